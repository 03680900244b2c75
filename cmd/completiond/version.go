package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// buildInfo is what this binary knows of its own build.
type buildInfo struct {
	version, commit, goVersion string
	modified                   bool
}

// readBuildInfo reads the version from the main module (a tagged
// `go install …@vX.Y.Z`), the commit from the VCS stamp of a build from a
// checkout, and the Go version. What is unknown says so.
func readBuildInfo() buildInfo {
	b := buildInfo{version: "(devel)", commit: "unknown", goVersion: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.goVersion = info.GoVersion
	if v := info.Main.Version; v != "" {
		b.version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.commit = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line `completiond --version` prints.
func (b buildInfo) String() string {
	commit := b.commit
	if b.modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("completiond %s, commit %s, %s", b.version, commit, b.goVersion)
}

// printVersion answers `completiond --version` and `completiond version`.
func printVersion(w io.Writer) {
	fmt.Fprintln(w, readBuildInfo())
}
