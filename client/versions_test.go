package client

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"golang.org/x/mod/semver"
)

// TestClientVersionsAgree: the Python and TypeScript packages carry one
// version, which is the repository's next release: above every version
// CHANGELOG.md has released, so that a release bumps them together.
func TestClientVersionsAgree(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	find := func(file, pattern string) string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(read(file))
		if m == nil {
			t.Fatalf("%s: no match for %s", file, pattern)
		}
		return m[1]
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal([]byte(read("../clients/node/package.json")), &pkg); err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{
		"clients/python/pyproject.toml": find("../clients/python/pyproject.toml", `(?m)^version = "([^"]+)"`),
		"completiond.__version__":       find("../clients/python/src/completiond/__init__.py", `(?m)^__version__ = "([^"]+)"`),
		"clients/node/package.json":     pkg.Version,
	}
	want := versions["clients/node/package.json"]
	for where, v := range versions {
		if v != want {
			t.Errorf("%s is %s, clients/node/package.json %s", where, v, want)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+)`).FindAllStringSubmatch(read("../CHANGELOG.md"), -1) {
		if semver.Compare("v"+want, "v"+m[1]) <= 0 {
			t.Errorf("client version %s is not above the released %s (CHANGELOG.md)", want, m[1])
		}
	}
}
