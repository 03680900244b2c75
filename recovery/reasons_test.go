package recovery

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// transitionLine is a transition in a transcript's expected output:
// "RETRY #1 ...", "COMPLETED #3 terminal ...", "NEXT_TURN #2 turn=2 ...".
var transitionLine = regexp.MustCompile(`(?m)^([A-Z_]+) #\d+( turn=\d+)?( terminal)?`)

// TestTranscriptsCoverEveryReason makes sure every reason appears as a
// decision in some transcript, terminal ones as the terminal transition.
// It reads the expected outputs of the same files TestMachine replays (and
// checks that TestMachine does replay testdata/), so it holds under any -run
// filter without depending on TestMachine having run.
func TestTranscriptsCoverEveryReason(t *testing.T) {
	if !replaysTestdata(t, "TestMachine") {
		t.Fatal("no TestMachine replaying testdata/ with datadriven.Walk: the transcripts are not run")
	}
	known := map[string]bool{}
	for _, r := range AllReasons() {
		known[r.String()] = true
	}
	seen := map[string]bool{}
	files := 0
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Parse the file as datadriven does, and keep the expected outputs
		// only: comments and commands are not decisions.
		datadriven.RunTestFromString(t, string(data), func(t *testing.T, d *datadriven.TestData) string {
			for _, m := range transitionLine.FindAllStringSubmatch(d.Expected, -1) {
				if !known[m[1]] {
					t.Errorf("%s: %s is no reason", path, m[1])
				}
				seen[m[1]+m[3]] = true
			}
			return d.Expected
		})
	})
	if files == 0 {
		t.Fatal("no transcripts in testdata/")
	}
	for _, r := range AllReasons() {
		key := r.String()
		if r.Terminal() {
			key += " terminal"
		}
		if !seen[key] {
			t.Errorf("no transcript shows %s", key)
		}
	}
}

// replaysTestdata reports whether the package's test sources declare a test
// named name that calls datadriven.Walk on "testdata" and never skips.
func replaysTestdata(t *testing.T, name string) bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != name || fn.Body == nil {
				continue
			}
			walks, skips := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if strings.HasPrefix(sel.Sel.Name, "Skip") {
					skips = true
				}
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "datadriven" && sel.Sel.Name == "Walk" && len(call.Args) == 3 {
					if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						walks = walks || err == nil && v == "testdata"
					}
				}
				return true
			})
			return walks && !skips
		}
	}
	return false
}
