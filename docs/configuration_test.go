package docs_test

import (
	"go/ast"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// flagHelp is one flag as completiond --help prints it.
type flagHelp struct {
	name, def string // def: the printed default, "" when none is printed
}

// serverFlags builds the server and reads its flags from --help.
func serverFlags(t *testing.T) []flagHelp {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "completiond")
	build := exec.Command("go", "build", "-o", bin, "./cmd/completiond")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/completiond: %v\n%s", err, out)
	}
	// --help exits 0 (or 2, as the flag package does by default).
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	var flags []flagHelp
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)`)
	def := regexp.MustCompile(`\(default (.+)\)$`)
	var cur *flagHelp
	usage := ""
	done := func() {
		if cur == nil {
			return
		}
		if m := def.FindStringSubmatch(strings.TrimSpace(usage)); m != nil {
			cur.def = strings.Trim(m[1], `"`)
		}
		flags = append(flags, *cur)
	}
	for line := range strings.Lines(string(out)) {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			done()
			cur, usage = &flagHelp{name: m[1]}, ""
			continue
		}
		if cur != nil && strings.HasPrefix(line, "    \t") {
			usage = line
		}
	}
	done()
	if len(flags) < 20 {
		t.Fatalf("found %d flags in completiond --help, want 20 or more:\n%s", len(flags), out)
	}
	return flags
}

// row is one table row of a page: its cells, markup kept, and its section.
type row struct {
	section string
	cells   []string
}

// rows are the table rows of text, outside code blocks.
func rows(text string) []row {
	var out []row
	section := ""
	for line := range strings.Lines(prose(text)) {
		line = strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := regexp.MustCompile(`\s*(?:[^\\])\|\s*`).Split(" "+strings.Trim(line, "|")+" ", -1)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		out = append(out, row{section: section, cells: cells})
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codeSpans are the code spans of s.
func codeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// sameDefault reports whether the default a page shows matches the one
// --help prints: equal, or the same duration written shorter (5m, 5m0s).
func sameDefault(page, help string) bool {
	spans := codeSpans(page)
	if len(spans) == 0 {
		return false
	}
	got := strings.Trim(spans[0], `"`)
	if got == help {
		return true
	}
	a, err1 := time.ParseDuration(got)
	b, err2 := time.ParseDuration(help)
	return err1 == nil && err2 == nil && a == b
}

// TestConfigurationFlags: docs/configuration.md has a row for every flag of
// completiond --help, with its environment variable and the default --help
// prints; no row for a flag that does not exist.
func TestConfigurationFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server")
	}
	flags := serverFlags(t)
	page := readPage(t, "docs/configuration.md")
	byFlag := map[string]row{}
	for _, r := range rows(page.text) {
		if r.section != "Flags and environment variables" || len(r.cells) < 3 {
			continue
		}
		for _, s := range codeSpans(r.cells[0]) {
			if name, ok := strings.CutPrefix(s, "--"); ok {
				byFlag[name] = r
			}
		}
	}
	for _, f := range flags {
		r, ok := byFlag[f.name]
		if !ok {
			t.Errorf("docs/configuration.md has no row for --%s", f.name)
			continue
		}
		delete(byFlag, f.name)
		env := "COMPLETIOND_" + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))
		switch {
		case f.name == "version":
			if !strings.Contains(r.cells[1], "not read") {
				t.Errorf("--version: the environment cell %q does not say that it is not read", r.cells[1])
			}
		case !slices.Contains(codeSpans(r.cells[1]), env):
			t.Errorf("--%s: the environment cell %q does not name %s", f.name, r.cells[1], env)
		}
		switch {
		case r.cells[2] == "":
			t.Errorf("--%s has no default in docs/configuration.md", f.name)
		case f.def != "" && !sameDefault(r.cells[2], f.def):
			t.Errorf("--%s: docs/configuration.md says the default is %s, completiond --help %q", f.name, r.cells[2], f.def)
		}
	}
	for name := range byFlag {
		t.Errorf("docs/configuration.md has a row for --%s, which completiond --help does not list", name)
	}
}

// envName is what an environment variable the server reads looks like.
var envName = regexp.MustCompile(`^(COMPLETIOND|ANTHROPIC|OPENAI|OTEL)_[A-Z0-9_]*[A-Z0-9]$`)

// serverPackage reports whether dir holds the server's code rather than a
// client's, an example's or a benchmark's.
func serverPackage(dir string) bool {
	rel, _ := filepath.Rel(root, dir)
	first := strings.Split(filepath.ToSlash(rel), "/")[0]
	return !slices.Contains([]string{"bench", "examples", "client", "clients", "docs"}, first)
}

// TestConfigurationEnvironment: docs/configuration.md names every
// environment variable whose name the server's sources spell out (string
// literals and constants), and every flag's.
func TestConfigurationEnvironment(t *testing.T) {
	_, pkgs := sources(t)
	found := map[string]bool{}
	for _, p := range pkgs {
		if !serverPackage(p.dir) {
			continue
		}
		for _, v := range p.consts {
			if envName.MatchString(v) {
				found[v] = true
			}
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(v) {
						found[v] = true
					}
				}
				return true
			})
		}
	}
	if !found["COMPLETIOND_API_KEY"] {
		t.Fatalf("the scan found %v, not even COMPLETIOND_API_KEY", found)
	}
	page := readPage(t, "docs/configuration.md")
	spans := codeSpans(prose(page.text))
	for v := range found {
		if !slices.Contains(spans, v) {
			t.Errorf("docs/configuration.md does not name the environment variable %s, which the server reads", v)
		}
	}
}

// yamlField is one field of a struct the configuration file decodes into.
type yamlField struct {
	key string   // its yaml tag's name
	typ ast.Expr // its Go type
}

// yamlStructs are the structs of the server's sources with yaml-tagged
// fields, by name, and the fields.
func yamlStructs(t *testing.T) map[string][]yamlField {
	t.Helper()
	_, pkgs := sources(t)
	out := map[string][]yamlField{}
	for _, p := range pkgs {
		if !serverPackage(p.dir) {
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, field := range st.Fields.List {
					if field.Tag == nil {
						continue
					}
					tag, _ := strconv.Unquote(field.Tag.Value)
					key, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
					if key == "" || key == "-" {
						continue
					}
					out[ts.Name.Name] = append(out[ts.Name.Name], yamlField{key: key, typ: field.Type})
				}
				return true
			})
		}
	}
	return out
}

// yamlPaths are the dotted paths of every YAML key, as far up as the
// struct types tell: a map's entries are <name>, a list's []. A struct that
// no tagged field holds (the policy, decoded from a yaml.Node) is a root.
func yamlPaths(structs map[string][]yamlField) []string {
	// parents: the path of the key that holds each struct.
	parents := map[string]string{}
	var elem func(e ast.Expr, suffix string) (string, string)
	elem = func(e ast.Expr, suffix string) (string, string) {
		switch e := e.(type) {
		case *ast.StarExpr:
			return elem(e.X, suffix)
		case *ast.ArrayType:
			return elem(e.Elt, suffix+"[]")
		case *ast.MapType:
			return elem(e.Value, suffix+".<name>")
		case *ast.Ident:
			return e.Name, suffix
		case *ast.SelectorExpr:
			return e.Sel.Name, suffix
		}
		return "", ""
	}
	var pathOf func(name string, depth int) string
	pathOf = func(name string, depth int) string {
		if p, ok := parents[name]; ok || depth > 10 {
			return p
		}
		for parent, fields := range structs {
			for _, f := range fields {
				if typ, suffix := elem(f.typ, ""); typ == name && parent != name {
					prefix := pathOf(parent, depth+1)
					if prefix != "" {
						prefix += "."
					}
					parents[name] = prefix + f.key + suffix
					return parents[name]
				}
			}
		}
		parents[name] = ""
		return ""
	}
	var out []string
	for name, fields := range structs {
		prefix := pathOf(name, 0)
		if prefix != "" {
			prefix += "."
		}
		for _, f := range fields {
			out = append(out, prefix+f.key)
		}
	}
	slices.Sort(out)
	return out
}

// TestConfigurationFileKeys: docs/configuration.md has a row, with a
// default, for every key of the configuration file — every yaml tag of the
// server's sources, named by its path.
func TestConfigurationFileKeys(t *testing.T) {
	paths := yamlPaths(yamlStructs(t))
	if len(paths) < 60 {
		t.Fatalf("found %d YAML keys, want 60 or more: %v", len(paths), paths)
	}
	page := readPage(t, "docs/configuration.md")
	var table []row
	for _, r := range rows(page.text) {
		if len(r.cells) >= 2 && r.section != "Flags and environment variables" && r.section != "Environment variables without a flag" {
			table = append(table, r)
		}
	}
	for _, p := range paths {
		var hit *row
		for i, r := range table {
			for _, s := range codeSpans(r.cells[0]) {
				if s == p || strings.HasSuffix(s, "."+p) {
					hit = &table[i]
				}
			}
		}
		switch {
		case hit == nil:
			t.Errorf("docs/configuration.md has no row for the YAML key %s", p)
		case hit.cells[1] == "":
			t.Errorf("docs/configuration.md gives the YAML key %s no default", p)
		}
	}
}
