package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestVersionIsNotReadFromTheEnvironment: --version is a command, not a
// setting. COMPLETIOND_VERSION, whatever it holds, neither makes the server
// print its version nor stops it from starting; every other flag's
// variable is still read.
func TestVersionIsNotReadFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		env         map[string]string
		wantVersion bool
	}{
		{"COMPLETIOND_VERSION=true", nil, map[string]string{"COMPLETIOND_VERSION": "true"}, false},
		{"COMPLETIOND_VERSION=1", nil, map[string]string{"COMPLETIOND_VERSION": "1"}, false},
		{"COMPLETIOND_VERSION=anything", nil, map[string]string{"COMPLETIOND_VERSION": "anything"}, false},
		{"the flag", []string{"--version"}, nil, true},
		{"the flag, the variable false", []string{"--version"}, map[string]string{"COMPLETIOND_VERSION": "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"COMPLETIOND_SIM_WORDS": "7"}
			for k, v := range tc.env {
				env[k] = v
			}
			o, err := parseOptions(tc.args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if o.version != tc.wantVersion {
				t.Errorf("version = %v, want %v", o.version, tc.wantVersion)
			}
			if o.simWords != 7 {
				t.Errorf("COMPLETIOND_SIM_WORDS was not read: sim words %d", o.simWords)
			}
		})
	}
}

// TestVersionPrintsTheRelease: --version and the version command print the
// release version, the one make release-check holds the CHANGELOG, the
// chart and the client packages to.
func TestVersionPrintsTheRelease(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if want := "completiond " + version + ", commit "; !strings.HasPrefix(out.String(), want) {
			t.Errorf("%v printed %q, want it to begin %q", args, out.String(), want)
		}
	}
}
