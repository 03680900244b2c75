package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/completiond/completiond/config"
)

// Secrets the check-config tests put in the environment: none may appear in
// the output, nor their digests.
const (
	anthropicSecret = "sk-ant-CHECKCONFIG-secret-1"
	openaiSecret    = "sk-openai-CHECKCONFIG-secret-2"
	callerSecret    = "caller-CHECKCONFIG-secret-3"
	urlPassword     = "CHECKCONFIG-url-password"
	// fileDigest is the sha256 of a key that only the file names.
	fileDigest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

// checkEnv is the environment of the check-config tests.
func checkEnv(k string) string {
	return map[string]string{
		"ANTHROPIC_API_KEY": anthropicSecret,
		"OPENAI_API_KEY":    openaiSecret,
		"CALLER_KEY":        callerSecret,
	}[k]
}

const fullConfig = `default_route: claude
providers:
  anthropic: {kind: anthropic, api_key: "${ANTHROPIC_API_KEY}"}
  openai:    {kind: openai, api_key: "${OPENAI_API_KEY}"}
  local:     {kind: openai, base_url: "http://user:` + urlPassword + `@localhost:8000/v1?token=` + urlPassword + `"}
  sim:       {kind: sim}
routes:
  claude:
    provider: anthropic
    model: claude-sonnet-4-5
    context_window: 200000
    max_output_tokens: 64000
    prefill: true
    fallbacks: [qwen, gpt]
    timeouts: {headers: 10s, idle: 45s}
    prices: {input: 3, output: 15}
  claude-thinking:
    provider: anthropic
    model: claude-sonnet-4-5
    thinking_budget: 16000
  gpt:
    provider: openai
    model: gpt-4.1
    max_reasoning_effort: medium
  qwen:
    provider: local
    model: Qwen/Qwen3-8B
    prefill: true
    structured_output: hook
  sim:
    provider: sim
    model: sim-1
circuit_breaker: {failures: 3, cooldown: 1m}
auth:
  keys:
    - {name: ops, key: "${CALLER_KEY}", routes: all}
    - {name: batch, sha256: "` + fileDigest + `", routes: [claude, gpt], budget: {usd: 50, tokens: 2000000, period: month}}
    - {name: billing-svc, routes: [gpt]}
limits: {max_in_flight: 100, key_rate: 2.5}
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckConfigPrintsResolvedRoutes(t *testing.T) {
	path := writeConfig(t, fullConfig)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check-config", path}, checkEnv, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	got := squeeze(out.String())
	for _, want := range []string{
		path + ": OK, 5 routes",
		"default route claude",
		"route claude\nprovider anthropic\nbase url https://api.anthropic.com (default)\nmodel claude-sonnet-4-5\n",
		"context window 200000 tokens",
		"max output 64000 tokens",
		"fallbacks qwen → gpt",
		"timeouts headers 10s, first token 5m0s, idle 45s, total 20m0s\nprices USD per million tokens: input 3, output 15, cache write 3.75, cache read 0.3",
		"model gpt-4.1\n", // and below it, no prices:
		"prices none (cost unknown)",
		"thinking 16000 tokens",
		"reasoning budget up to 16000 tokens\n",
		"reasoning effort up to medium\n",
		"reasoning none (requests asking for reasoning are refused)",
		"structured output native\n",
		"structured output hook (the stop hook alone)",
		"route gpt\nprovider openai\nbase url https://api.openai.com/v1 (default)",
		"base url http://localhost:8000/v1\n", // no user info, no query
		`prefill body {"add_generation_prompt":false,"continue_final_message":true}`,
		"route sim\nprovider sim\nbase url none (embedded simulator)",
		"circuit breaker 3 failures, cooldown 1m0s",
		"auth 3 keys, client certificates off",
		"key ops API key, all routes",
		"key batch API key, routes claude, gpt, budget 50 USD or 2000000 tokens per month (UTC)",
		"key billing-svc client certificate only, routes gpt",
		"tls off (plaintext)",
		"max_in_flight 100\n",
		"key_rate 2.5\n",
		"key_burst 40 (default)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	assertNoSecret(t, out.String()+errOut.String())
}

// squeeze collapses the alignment of check-config's report: each line's
// fields joined by one space.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// assertNoSecret fails if out holds a secret of checkEnv or the file, or
// the digest of one, in any spelling.
func assertNoSecret(t *testing.T, out string) {
	t.Helper()
	for _, secret := range []string{anthropicSecret, openaiSecret, callerSecret, urlPassword, fileDigest} {
		d := config.HashKey(secret)
		for _, s := range []string{secret, hex.EncodeToString(d[:]), strings.ToUpper(hex.EncodeToString(d[:]))} {
			if strings.Contains(out, s) {
				t.Errorf("output holds the secret %q:\n%s", s, out)
			}
		}
	}
	if strings.Contains(out, "9f86d081") {
		t.Errorf("output holds a key digest:\n%s", out)
	}
}

func TestCheckConfigExamples(t *testing.T) {
	paths, err := filepath.Glob("../../examples/config/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configurations: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var out bytes.Buffer
			if err := run(t.Context(), []string{"check-config", path}, checkEnv, &out, &out); err != nil {
				t.Fatalf("check-config: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), ": OK, ") {
				t.Errorf("no OK line:\n%s", out.String())
			}
			assertNoSecret(t, out.String())
		})
	}
}

func TestCheckConfigRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		env  func(string) string
		want string
	}{
		{"unknown field", "routes:\n  a: {provider: p, model: m, temperature: 1}\n", checkEnv, "field temperature not found"},
		{"unset variable", "providers:\n  a: {kind: anthropic, api_key: \"${NOT_SET_ANYWHERE}\"}\n", checkEnv,
			"providers.a.api_key: environment variable NOT_SET_ANYWHERE is not set"},
		{"unknown provider kind", "providers:\n  a: {kind: bedrock}\n", checkEnv, "providers.a.kind: unknown provider kind"},
		{"bad timeout", "default_route: r\nproviders:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m, timeouts: {idle: soon}}\n",
			checkEnv, "routes.r.timeouts.idle"},
		{"unknown fallback", "default_route: r\nproviders:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m, fallbacks: [nope]}\n",
			checkEnv, `falls back to unknown route "nope"`},
		{"no default route", "providers:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m}\n", checkEnv, "default_route: required"},
		{"bad key digest", "default_route: r\nproviders:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m}\n" +
			"auth: {keys: [{name: k, sha256: abc, routes: all}]}\n", checkEnv, "auth.keys[0].sha256"},
		{"openai prefill", "default_route: r\nproviders:\n  o: {kind: openai, api_key: \"${OPENAI_API_KEY}\"}\n" +
			"routes:\n  r: {provider: o, model: m, prefill: true}\n", checkEnv, "routes.r.prefill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			var out bytes.Buffer
			err := run(t.Context(), []string{"check-config", path}, tc.env, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("a refused file printed a report:\n%s", out.String())
			}
			assertNoSecret(t, err.Error())
		})
	}
}

func TestCheckConfigArguments(t *testing.T) {
	good := writeConfig(t, "default_route: r\nproviders:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m}\n")
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" for success
		wantOut string
	}{
		{"file argument", []string{good}, nil, "", ": OK, 1 routes"},
		{"file from COMPLETIOND_CONFIG", nil, map[string]string{"COMPLETIOND_CONFIG": good}, "", good + ": OK"},
		{"argument wins over COMPLETIOND_CONFIG", []string{good}, map[string]string{"COMPLETIOND_CONFIG": "/nonexistent"}, "", good + ": OK"},
		{"no file", nil, nil, "want a configuration file", ""},
		{"empty file name", []string{""}, nil, "want a configuration file", ""},
		{"two files", []string{good, good}, nil, "", good + ": OK, 1 routes"},
		{"missing file", []string{filepath.Join(t.TempDir(), "absent.yaml")}, nil, "no such file", ""},
		{"help", []string{"--help"}, nil, "", "Usage: completiond check-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			env := func(k string) string { return tc.env[k] }
			err := run(t.Context(), append([]string{"check-config"}, tc.args...), env, &out, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check-config: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output lacks %q:\n%s", tc.wantOut, out.String())
			}
		})
	}
}

// TestCheckConfigSeveralFiles: check-config checks every file it is given,
// in order, whatever an earlier one did: a report on stdout for each good
// file, the error of each bad one on stderr, and an error (the exit
// status) that counts the bad files.
func TestCheckConfigSeveralFiles(t *testing.T) {
	good := writeConfig(t, "default_route: r\nproviders:\n  s: {kind: sim}\nroutes:\n  r: {provider: s, model: m}\n")
	full := writeConfig(t, fullConfig)
	unknown := writeConfig(t, "routes:\n  a: {provider: p, model: m, temperature: 1}\n")
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		name    string
		paths   []string
		wantErr string // "" for success
		good    []string
		bad     map[string]string // path: what its error says
	}{
		{"all good", []string{good, full}, "", []string{good, full}, nil},
		{"bad ones among good ones", []string{unknown, good, absent, full}, "check-config: 2 of 4 files are bad: " + unknown + ", " + absent,
			[]string{good, full}, map[string]string{unknown: "field temperature not found", absent: "no such file"}},
		{"all bad", []string{absent, unknown}, "check-config: 2 of 2 files are bad",
			nil, map[string]string{unknown: "field temperature not found", absent: "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"check-config"}, tc.paths...), checkEnv, &stdout, &stderr)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check-config: %v\n%s", err, stderr.String())
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			reports := strings.Count(stdout.String(), ": OK, ")
			if reports != len(tc.good) {
				t.Errorf("%d reports, want %d:\n%s", reports, len(tc.good), stdout.String())
			}
			last := -1
			for _, path := range tc.good { // in the order given
				i := strings.Index(stdout.String(), path+": OK, ")
				if i <= last {
					t.Errorf("no report of %s after the one before it:\n%s", path, stdout.String())
				}
				last = i
			}
			if len(tc.bad) == 0 && stderr.Len() > 0 {
				t.Errorf("stderr of good files:\n%s", stderr.String())
			}
			for path, want := range tc.bad {
				// An error names its file; a YAML error may take several lines.
				i := strings.Index(stderr.String(), path+":")
				if i < 0 || !strings.Contains(stderr.String()[i:], want) {
					t.Errorf("stderr does not name %s with %q after it:\n%s", path, want, stderr.String())
				}
				if strings.Contains(stdout.String(), path+":") {
					t.Errorf("a report of the bad file %s:\n%s", path, stdout.String())
				}
			}
			assertNoSecret(t, stdout.String()+stderr.String())
		})
	}
}

// TestCheckConfigCallsNoUpstream: checking a file builds its providers but
// never calls them.
func TestCheckConfigCallsNoUpstream(t *testing.T) {
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer upstream.Close()
	path := writeConfig(t, "default_route: a\nproviders:\n"+
		"  anthropic: {kind: anthropic, base_url: \""+upstream.URL+"\", api_key: \"${ANTHROPIC_API_KEY}\"}\n"+
		"  openai: {kind: openai, base_url: \""+upstream.URL+"/v1\", api_key: \"${OPENAI_API_KEY}\"}\n"+
		"routes:\n  a: {provider: anthropic, model: m}\n  o: {provider: openai, model: m}\n")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"check-config", path}, checkEnv, &out, &out); err != nil {
		t.Fatalf("check-config: %v\n%s", err, out.String())
	}
	upstream.Close() // waits for any request in flight
	if n := calls.Load(); n != 0 {
		t.Errorf("check-config made %d upstream calls", n)
	}
	if !strings.Contains(out.String(), upstream.URL+"/v1") {
		t.Errorf("output lacks the base URL %s/v1:\n%s", upstream.URL, out.String())
	}
}

// TestCheckConfigPrintsThePolicy: check-config shows the policy fields the
// file changed, and says when it changed none.
func TestCheckConfigPrintsThePolicy(t *testing.T) {
	dir := t.TempDir()
	base := "providers: {s: {kind: sim}}\nroutes: {sim: {provider: s, model: sim-1}}\n"
	for _, tc := range []struct{ yaml, want string }{
		{base, "default (recovery.DefaultPolicy)"},
		{base + "policy: {retry: {fallback_retries: 1}}\n", "retry.fallback_retries  1 (default 3)"},
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := run(t.Context(), []string{"check-config", path}, func(string) string { return "" }, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("output lacks %q:\n%s", tc.want, out.String())
		}
	}
}
