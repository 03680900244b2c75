package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/sim"
)

// TestExampleConfigsLoad loads every file in examples/config as the server
// would, with the keys it names set: the examples stay valid as the
// configuration grows.
func TestExampleConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("../examples/config/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("example configs %v (%v): want at least four", files, err)
	}
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-example", "OPENAI_API_KEY": "sk-example"}
	fake := func(ProviderSpec) (provider.Provider, error) { return sim.New(sim.Config{}), nil }
	factories := map[string]Factory{"anthropic": fake, "openai": fake}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := LoadFile(f, Default(), func(k string) string { return env[k] }, factories)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Check(); err != nil {
				t.Fatal(err)
			}
			if r := cfg.Routes[cfg.DefaultRoute]; r == nil || strings.HasPrefix(r.Spec.Name, "sim") {
				t.Errorf("default route %q is not one of the file's", cfg.DefaultRoute)
			}
		})
	}
}
