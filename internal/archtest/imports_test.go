package archtest

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/completiond/completiond/"

// rules names, for every package of the module (by its path inside it),
// the module's packages its non-test files may import. The layers run one
// way: cmd → service → internal/driver → {internal/fleet, internal/guard,
// internal/telemetry, internal/convert} → {recovery, provider, config};
// recovery imports nothing of the module; config holds values only. The
// gRPC surface (service) calls no provider itself: the driver does. A rule that ends in "/..." allows a folder's packages.
var rules = map[string][]string{
	"recovery":                          {},
	"provider":                          {"recovery"},
	"provider/anthropic":                {"provider", "provider/classify", "provider/jsonenc", "provider/sse", "recovery"},
	"provider/openai":                   {"provider", "provider/classify", "provider/jsonenc", "provider/sse", "recovery"},
	"provider/classify":                 {"provider", "recovery"},
	"provider/sim":                      {"provider", "recovery"},
	"provider/sse":                      {},
	"provider/jsonenc":                  {},
	"provider/providertest":             {"provider", "provider/sse", "recovery"},
	"config":                            {"recovery", "provider", "provider/sim"},
	"internal/guard":                    {"config", "internal/redisscript", "recovery"},
	"internal/telemetry":                {"config", "provider", "recovery"},
	"internal/fleet":                    {"config", "gen/...", "internal/redisscript", "internal/telemetry"},
	"internal/redisscript":              {},
	"internal/convert":                  {"gen/...", "provider", "recovery"},
	"internal/driver":                   {"config", "gen/...", "internal/convert", "internal/fleet", "internal/guard", "internal/telemetry", "provider", "provider/classify", "recovery"},
	"service":                           {"config", "gen/...", "internal/convert", "internal/driver", "internal/fleet", "internal/guard", "internal/telemetry", "provider/sim", "recovery"},
	"cmd/completiond":                   {"config", "internal/fleet", "internal/telemetry", "provider/...", "provider", "recovery", "service"},
	"gen/completion/v1":                 {},
	"client":                            {"gen/..."},
	"examples/toolloop":                 {"client", "gen/..."},
	"internal/testkit":                  {"gen/..."},
	"internal/testcerts":                {},
	"internal/testproxy":                {},
	"internal/redistest":                {"internal/testcerts"},
	"internal/protoc-gen-descriptorset": {},
	"internal/archtest":                 {},
	"bench/debugserver":                 {},
	"bench/mock":                        {"bench/debugserver"},
	"bench/relay":                       {"bench/debugserver", "gen/..."},
	"bench/harness":                     {"bench/debugserver", "bench/mock", "bench/relay", "gen/..."},
	"bench/loadbench":                   {"bench/harness"},
	"deploy/helm":                       {},
}

// TestImportRules checks every package of the module against its rule.
func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
			return filepath.SkipDir // another module
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil || len(pkg.GoFiles) == 0 {
			return nil // no Go package here (or tests only)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		seen++
		allowed, ok := rules[rel]
		if !ok {
			t.Errorf("package %s has no import rule: add one to rules", rel)
			return nil
		}
		for _, bad := range violations(pkg.Imports, allowed) {
			t.Errorf("package %s imports %s; its rule allows only %v", rel, bad, allowed)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(rules)/2 {
		t.Fatalf("found %d packages, fewer than half of the %d rules: is the walk in the module?", seen, len(rules))
	}
}

// violations are the module's packages among imports that allowed does not
// name.
func violations(imports, allowed []string) []string {
	var out []string
	for _, imp := range imports {
		rel, ok := strings.CutPrefix(imp, module)
		if !ok {
			continue
		}
		if !slices.ContainsFunc(allowed, func(a string) bool {
			folder, all := strings.CutSuffix(a, "/...")
			return rel == a || all && (rel == folder || strings.HasPrefix(rel, folder+"/"))
		}) {
			out = append(out, rel)
		}
	}
	return out
}

// TestViolations pins the rule matcher itself: a back-import is caught.
func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		imports, allowed, want []string
	}{
		{[]string{"fmt", module + "recovery"}, []string{"recovery"}, nil},
		{[]string{module + "service"}, []string{"recovery"}, []string{"service"}},
		{[]string{module + "provider/openai"}, []string{"provider/..."}, nil},
		{[]string{module + "providerx"}, []string{"provider/..."}, []string{"providerx"}},
		{[]string{module + "internal/guard"}, []string{}, []string{"internal/guard"}},
	} {
		if got := violations(tc.imports, tc.allowed); !slices.Equal(got, tc.want) {
			t.Errorf("violations(%v, %v) = %v, want %v", tc.imports, tc.allowed, got, tc.want)
		}
	}
}
