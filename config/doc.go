// Package config is completiond's configuration as values: the routes and
// their fallbacks, the limits, the recovery policy a request may only
// tighten, the breaker settings, the API keys, the TLS file names, the
// event-log bounds and the fleet's Redis URL and lease length. LoadFile
// reads the YAML file (policy sections included) over a base; EnvRoutes
// adds the routes the environment's API keys allow; Default serves the
// embedded simulator.
//
// It owns values and their checks only: it never opens a connection,
// starts a goroutine or serves anything, and imports nothing of
// completiond's above recovery and provider (internal/archtest pins it).
package config
