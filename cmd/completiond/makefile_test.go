package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeIn runs make in the repository root with env added to a clean
// environment (none of the variables the Makefile reads, no MAKEFLAGS of an
// enclosing make), and returns its output.
func makeIn(t *testing.T, env []string, args ...string) string {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command(mk, append([]string{"-C", "../..", "--no-print-directory"}, args...)...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"ADDR", "COMPLETIOND_ADDR", "GO", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GNUMAKEFLAGS"}, name)
	})
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestMakeRunAddress: make run serves where COMPLETIOND_ADDR says, as the
// server would on its own, unless ADDR is given.
func TestMakeRunAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"default", nil, nil, "--addr 'localhost:50051'"},
		{"COMPLETIOND_ADDR", []string{"COMPLETIOND_ADDR=127.0.0.1:7001"}, nil, "--addr '127.0.0.1:7001'"},
		{"ADDR in the environment", []string{"ADDR=127.0.0.1:7002"}, nil, "--addr '127.0.0.1:7002'"},
		{"ADDR wins over COMPLETIOND_ADDR", []string{"COMPLETIOND_ADDR=127.0.0.1:7001"}, []string{"ADDR=127.0.0.1:7003"}, "--addr '127.0.0.1:7003'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := makeIn(t, tc.env, append([]string{"-n", "run"}, tc.args...)...)
			if !strings.Contains(out, "./cmd/completiond "+tc.want) {
				t.Errorf("make -n run = %q, want %s", out, tc.want)
			}
		})
	}
}

// TestMakeHelpShowsDefaults: make help prints the address make run would
// use and the pinned tool versions the Makefile declares.
func TestMakeHelpShowsDefaults(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	pins := regexp.MustCompile(`(?m)^([A-Z_]+_VERSION)\s*\?=\s*(\S+)$`).FindAllStringSubmatch(string(makefile), -1)
	if len(pins) < 5 {
		t.Fatalf("found %d pinned versions in the Makefile, want 5 or more", len(pins))
	}
	for _, tc := range []struct {
		name string
		env  []string
		addr string
	}{
		{"default", nil, "localhost:50051"},
		{"COMPLETIOND_ADDR", []string{"COMPLETIOND_ADDR=127.0.0.1:7004"}, "127.0.0.1:7004"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := makeIn(t, tc.env, "help")
			fields := map[string]string{}
			for line := range strings.Lines(out) {
				if f := strings.Fields(line); len(f) == 2 {
					fields[f[0]] = f[1]
				}
			}
			if fields["ADDR"] != tc.addr {
				t.Errorf("make help shows ADDR %q, want %q:\n%s", fields["ADDR"], tc.addr, out)
			}
			if !strings.Contains(out, "Serve on "+tc.addr) {
				t.Errorf("make help does not say that run serves on %s:\n%s", tc.addr, out)
			}
			for _, p := range pins {
				if fields[p[1]] != p[2] {
					t.Errorf("make help shows %s %q, want %q", p[1], fields[p[1]], p[2])
				}
			}
		})
	}
}
