package main

import (
	"maps"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/service"
)

// factories build the real providers a configuration may name.
var factories = map[string]config.Factory{
	"anthropic": func(s config.ProviderSpec) (provider.Provider, error) {
		return anthropic.New(anthropic.Config{BaseURL: s.BaseURL, APIKey: s.APIKey})
	},
	"openai": func(s config.ProviderSpec) (provider.Provider, error) {
		return openai.New(openai.Config{BaseURL: s.BaseURL, APIKey: s.APIKey, PrefillBody: prefillBody(s)})
	},
}

// loadRoutes sets cfg's routes. With a configuration file at path, they are
// exactly the routes the file declares: the simulator serves only the
// routes of a provider of kind sim the file names, so that a production
// configuration exposes no simulator. Without a file (make run), the sim
// routes s serves stay, and the API keys found in the environment add
// theirs. A sim the file declares is s, with the --sim-* settings.
func loadRoutes(cfg service.Config, path string, s *sim.Provider, getenv func(string) string) (service.Config, error) {
	if path != "" {
		cfg.Routes = map[string]*config.Route{}
		withSim := maps.Clone(factories)
		withSim["sim"] = func(config.ProviderSpec) (provider.Provider, error) { return s, nil }
		v, err := config.LoadFile(path, cfg.Config, getenv, withSim)
		cfg.Config = v
		return cfg, err
	}
	cfg.Routes = config.SimRoutes(s)
	v, err := config.EnvRoutes(cfg.Config, getenv, factories)
	cfg.Config = v
	return cfg, err
}

// prefillBody is the spec's prefill body for openai.Config: an empty map,
// not nil, when the spec has none, so that the provider adds no default of
// its own — LoadFile has already decided.
func prefillBody(s config.ProviderSpec) map[string]any {
	if s.PrefillBody == nil {
		return map[string]any{}
	}
	return s.PrefillBody
}
