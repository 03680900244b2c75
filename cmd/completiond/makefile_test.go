package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeCmd is make with args, in dir, with env added to a clean environment
// (none of the variables the Makefile reads, no MAKEFLAGS of an enclosing
// make).
func makeCmd(t *testing.T, dir string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command(mk, append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"ADDR", "COMPLETIOND_ADDR", "BREAKING_REF", "BIN", "GO", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GNUMAKEFLAGS"}, name)
	})
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// makeIn runs make in the repository root (see makeCmd) and returns its
// output.
func makeIn(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, err := makeCmd(t, "../..", env, args...).CombinedOutput()
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

// TestMakeBreakingAgainstPreviousCommit runs make breaking in scratch
// repositories, with a stand-in buf that prints its arguments: the check
// compares against the commit before HEAD, deepens a shallow clone to
// reach it, and says why there is nothing to compare when that commit has
// no proto/ or HEAD is the first commit.
func TestMakeBreakingAgainstPreviousCommit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	makefile, err := filepath.Abs("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "buf"), []byte("#!/bin/sh\necho \"buf $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(git, append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com",
			"-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// repo makes a repository whose commits add the given files.
	repo := func(commits ...map[string]string) string {
		dir := t.TempDir()
		gitIn(dir, "init", "-q")
		for i, files := range commits {
			for name, body := range files {
				if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			gitIn(dir, "add", "-A")
			gitIn(dir, "commit", "-q", "-m", fmt.Sprint("commit ", i+1))
		}
		return dir
	}
	api := map[string]string{"buf.yaml": "version: v2\n", "proto/a/v1/a.proto": "syntax = \"proto3\";\n"}
	readme := map[string]string{"README": "hi\n"}
	shallow := func(src string) string {
		dir := filepath.Join(t.TempDir(), "clone")
		gitIn(filepath.Dir(dir), "clone", "-q", "--depth", "1", "file://"+src, dir)
		return dir
	}
	twoCommits := repo(api, readme)
	shallowClone := shallow(twoCommits)
	for _, tc := range []struct {
		name    string
		dir     string
		ref     string // the commit buf must be given; "" when buf must not run
		want    string
		wantErr bool
	}{
		{"previous commit", twoCommits, gitIn(twoCommits, "rev-parse", "HEAD~1"), "proto/ against HEAD~1", false},
		{"shallow clone", shallowClone, gitIn(twoCommits, "rev-parse", "HEAD~1"), "git fetch --deepen=1", false},
		{"first commit", repo(api), "", "HEAD is the first commit", false},
		{"shallow first commit", shallow(repo(api)), "", "HEAD is the first commit", false},
		{"API added by HEAD", repo(readme, api), "", "has no proto/: nothing to break", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := makeCmd(t, tc.dir, nil, "-s", "-f", makefile, "BIN="+bin, "breaking").CombinedOutput()
			if err != nil {
				t.Fatalf("make breaking: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("make breaking said %q, want %q", out, tc.want)
			}
			ran := strings.Contains(string(out), "buf breaking")
			if tc.ref == "" && ran {
				t.Errorf("buf ran: %s", out)
			}
			if tc.ref != "" && !strings.Contains(string(out), "buf breaking --against .git#ref="+tc.ref) {
				t.Errorf("buf did not compare against %s: %s", tc.ref, out)
			}
		})
	}
	t.Run("not a commit", func(t *testing.T) {
		out, err := makeCmd(t, twoCommits, nil, "-s", "-f", makefile, "BIN="+bin, "BREAKING_REF=nope", "breaking").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "nope is not a commit") {
			t.Errorf("make breaking BREAKING_REF=nope: %v, %s", err, out)
		}
	})
}

// TestMakeTestInstallsWhatItRuns: make test runs the fleet tests against a
// real redis-server and the race detector, which needs a C compiler; on a
// fresh machine it installs both before it runs a test (the prerequisite was
// once lost in a merge, and only a machine that had redis already passed).
// Its go test is not wrapped, so that each package's line shows as it comes.
func TestMakeTestInstallsWhatItRuns(t *testing.T) {
	out := makeIn(t, nil, "-n", "test")
	gotest := strings.Index(out, "test -race -count")
	if gotest < 0 {
		t.Fatalf("make -n test runs no go test -race:\n%s", out)
	}
	for _, want := range []string{"install -y -qq redis-server", "install -y -qq gcc libc6-dev"} {
		i := strings.Index(out, want)
		if i < 0 || i > gotest {
			t.Errorf("make -n test does not %q before go test:\n%s", want, out)
		}
	}
	// go test's line per package is the progress: a pipe or a redirection
	// would hold it back or hide it.
	line, _, _ := strings.Cut(out[gotest:], "\n")
	if strings.ContainsAny(line, "|>") {
		t.Errorf("make test wraps go test, which hides its progress: %s", line)
	}
}
