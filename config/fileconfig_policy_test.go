package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFilePolicy(t *testing.T) {
	routes := "providers: {s: {kind: sim}}\nroutes: {sim: {provider: s, model: sim-1}}\n"
	tests := []struct {
		name, yaml string
		wantErr    string
		check      func(t *testing.T, cfg Config)
	}{
		{name: "unset keeps the defaults", yaml: routes, check: func(t *testing.T, cfg Config) {
			if cfg.Policy != Default().Policy {
				t.Errorf("policy %+v", cfg.Policy)
			}
		}},
		{name: "fields override", yaml: routes + "policy:\n  retry: {fallback_retries: 1, retry_after_ceiling: 30s, backoff_base: 250ms}\n  turns: {max_turns: 5}\n",
			check: func(t *testing.T, cfg Config) {
				r := cfg.Policy.Retry
				if r.FallbackRetries != 1 || r.RetryAfterCeiling != 30*time.Second || r.BackoffBase != 250*time.Millisecond ||
					cfg.Policy.Turns.MaxTurns != 5 || r.MaxRetries != 10 || cfg.Policy.Truncation.MaxOutputTokens != 8000 {
					t.Errorf("policy %+v", cfg.Policy)
				}
			}},
		{name: "a misspelt field", yaml: routes + "policy: {retry: {max_retrys: 3}}\n", wantErr: "max_retrys"},
		{name: "out of bounds", yaml: routes + "policy: {retry: {fallback_retries: 50}}\n", wantErr: "retry.fallback_retries"},
		{name: "a bad duration", yaml: routes + "policy: {retry: {fallback_wait: soon}}\n", wantErr: "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadFile(path, Default(), func(string) string { return "" }, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "policy") {
					t.Fatalf("error %v, want one naming policy and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}
