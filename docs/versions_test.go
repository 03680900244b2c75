package docs_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"golang.org/x/mod/semver"
)

// find is the first submatch of pattern in the file at path (from the
// root).
func find(t *testing.T, path, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(readPage(t, path).text)
	if m == nil {
		t.Fatalf("%s: no match for %s", path, pattern)
	}
	return m[1]
}

// TestVersionsAgree: one version everywhere. The server's release version
// (cmd/completiond/version.go, what --version prints) is the CHANGELOG's top
// entry, the Helm chart's version and appVersion, and the Python and npm
// packages' versions; every other CHANGELOG entry is an older release.
// make release-check runs it.
func TestVersionsAgree(t *testing.T) {
	want := find(t, "cmd/completiond/version.go", `(?m)^const version = "([^"]+)"$`)
	if !semver.IsValid("v" + want) {
		t.Fatalf("cmd/completiond/version.go: %q is not a semantic version", want)
	}
	var pkg, lock struct {
		Version  string
		Packages map[string]struct{ Version string }
	}
	if err := json.Unmarshal([]byte(readPage(t, "clients/node/package.json").text), &pkg); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(readPage(t, "clients/node/package-lock.json").text), &lock); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"CHANGELOG.md's top entry":                      find(t, "CHANGELOG.md", `(?m)^## (\S+)`),
		"deploy/helm/completiond/Chart.yaml version":    find(t, "deploy/helm/completiond/Chart.yaml", `(?m)^version: (\S+)$`),
		"deploy/helm/completiond/Chart.yaml appVersion": find(t, "deploy/helm/completiond/Chart.yaml", `(?m)^appVersion: "([^"]+)"$`),
		"clients/python/pyproject.toml":                 find(t, "clients/python/pyproject.toml", `(?m)^version = "([^"]+)"`),
		"completiond.__version__":                       find(t, "clients/python/src/completiond/__init__.py", `(?m)^__version__ = "([^"]+)"`),
		"clients/node/package.json":                     pkg.Version,
		"clients/node/package-lock.json":                lock.Version,
		"clients/node/package-lock.json's root":         lock.Packages[""].Version,
	}
	for where, v := range got {
		if v != want {
			t.Errorf("%s is %q, cmd/completiond/version.go %q", where, v, want)
		}
	}
	entries := regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+\S*)`).FindAllStringSubmatch(readPage(t, "CHANGELOG.md").text, -1)
	for _, m := range entries[1:] {
		if semver.Compare("v"+m[1], "v"+want) >= 0 {
			t.Errorf("CHANGELOG.md: the entry %s is below %s's but not older", m[1], want)
		}
	}
}
