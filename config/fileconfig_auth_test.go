package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFileConfigAuthTLSLimits(t *testing.T) {
	sum := fmt.Sprintf("%x", HashKey("hashed-key"))
	path := writeConfig(t, `
auth:
  keys:
    - {name: ops, key: "${TEST_OPS_KEY}", routes: all}
    - {name: batch, sha256: "`+sum+`", routes: [sim, sim-large]}
    - {name: billing, routes: [sim]}
tls: {cert: /etc/completiond/tls.crt, key: /etc/completiond/tls.key, client_ca: /etc/completiond/clients.pem, reload: 2s}
limits:
  max_in_flight: 100
  key_max_concurrent: 8
  key_rate: 2.5
  key_burst: 5
  max_streams_per_connection: 32
  keepalive_min_time: 30s
  max_connection_age: 1h
  max_connection_age_grace: 0s
`)
	env := map[string]string{"TEST_OPS_KEY": "ops-key-from-env"}
	cfg, err := LoadFile(path, Default(), func(k string) string { return env[k] }, fakeFactories)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []APIKey{{Name: "ops", SHA256: HashKey("ops-key-from-env")},
		{Name: "batch", SHA256: HashKey("hashed-key"), Routes: []string{"sim", "sim-large"}},
		{Name: "billing", Routes: []string{"sim"}}}
	if !reflect.DeepEqual(cfg.Auth, Auth{Keys: wantKeys, ClientCertificates: true}) {
		t.Errorf("auth %+v", cfg.Auth)
	}
	if want := (TLSFiles{CertFile: "/etc/completiond/tls.crt", KeyFile: "/etc/completiond/tls.key",
		ClientCAFile: "/etc/completiond/clients.pem", ReloadInterval: 2 * time.Second}); cfg.TLS != want {
		t.Errorf("tls %+v", cfg.TLS)
	}
	want := DefaultLimits()
	want.MaxInFlight, want.KeyMaxConcurrent, want.KeyRate, want.KeyBurst = 100, 8, 2.5, 5
	want.MaxConcurrentStreams, want.KeepaliveMinTime, want.MaxConnectionAge, want.MaxConnectionAgeGrace = 32, 30*time.Second, time.Hour, 0
	if cfg.Limits != want {
		t.Errorf("limits %+v, want %+v", cfg.Limits, want)
	}
}

func TestFileConfigAuthErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`auth: {keys: [{name: a, key: "${UNSET_KEY}", routes: all}]}`, "auth.keys[0].key: environment variable UNSET_KEY"},
		{`auth: {keys: [{name: a, key: k}]}`, "auth.keys[0].routes: required"},
		{`auth: {keys: [{name: a, key: k, routes: some}]}`, "want a list of routes or all"},
		{`auth: {keys: [{name: a, key: k, sha256: abcd, routes: all}]}`, "auth.keys[0]: set key or sha256"},
		{`auth: {keys: [{name: a, sha256: abcd, routes: all}]}`, "auth.keys[0].sha256"},
		{`auth: {keys: [{name: a, key: k, routes: [nope]}]}`, `auth.keys[0].routes: unknown route "nope"`},
		{`auth: {keys: [{key: k, routes: all}]}`, "auth.keys[0].name"},
		{`tls: {cert: a.crt}`, "tls: cert and key go together"},
		{`limits: {max_in_flight: -1}`, "limits.max_in_flight"},
		{`limits: {key_rate: -1}`, "limits.key_rate"},
		{`limits: {max_connection_age: soon}`, "limits.max_connection_age"},
		{`limits: {max_request_bytes: 0}`, "limits.max_request_bytes"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := LoadFile(writeConfig(t, tc.body), Default(), func(string) string { return "" }, fakeFactories)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
