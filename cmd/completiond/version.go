package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version is completiond's release version: what --version prints, traces
// carry as service.version and completiond_build_info as version. The
// CHANGELOG's top entry, the Helm chart's appVersion and the client
// packages carry the same (make release-check).
const version = "0.2.0"

// buildInfo is what this binary knows of its own build.
type buildInfo struct {
	version, commit, goVersion string
	modified                   bool
}

// readBuildInfo is the release version, the commit from the VCS stamp of a
// build from a checkout, and the Go version. The main module's version is
// not used: a build from a checkout has a pseudo-version of its commit
// there (v0.0.0-…+dirty), not the release it is. What is unknown says so.
func readBuildInfo() buildInfo {
	b := buildInfo{version: version, commit: "unknown", goVersion: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.goVersion = info.GoVersion
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
