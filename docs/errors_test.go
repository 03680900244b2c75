package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goPackage is the parsed non-test Go files of one directory.
type goPackage struct {
	dir    string
	files  []*ast.File
	consts map[string]string // package-level string constants, values resolved
}

// sources parses every non-test Go file of the repository but the
// generated code, by directory. It reads the text only: no package is
// compiled or imported, so the test depends on no package's internal names.
func sources(t *testing.T) (*token.FileSet, []*goPackage) {
	t.Helper()
	fset := token.NewFileSet()
	byDir := map[string]*goPackage{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] || d.Name() == "testdata" || path == filepath.Join(root, "gen") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if byDir[dir] == nil {
			byDir[dir] = &goPackage{dir: dir, consts: map[string]string{}}
		}
		byDir[dir].files = append(byDir[dir].files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []*goPackage
	for _, p := range byDir {
		p.resolveConsts()
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b *goPackage) int { return strings.Compare(a.dir, b.dir) })
	return fset, pkgs
}

// resolveConsts fills p.consts: string constants from literals and sums of
// literals and other constants of the package.
func (p *goPackage) resolveConsts() {
	exprs := map[string]ast.Expr{}
	for _, f := range p.files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						exprs[name.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var eval func(e ast.Expr, depth int) (string, bool)
	eval = func(e ast.Expr, depth int) (string, bool) {
		if depth > 10 {
			return "", false
		}
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if x, ok := exprs[e.Name]; ok {
				return eval(x, depth+1)
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				a, ok1 := eval(e.X, depth+1)
				b, ok2 := eval(e.Y, depth+1)
				return a + b, ok1 && ok2
			}
		case *ast.ParenExpr:
			return eval(e.X, depth+1)
		}
		return "", false
	}
	for name, x := range exprs {
		if v, ok := eval(x, 0); ok {
			p.consts[name] = v
		}
	}
}

// transitionReasons are the reasons of the proto's TransitionReason enum
// (without the TRANSITION_REASON_ prefix): every one, and those whose
// comment says they are terminal.
func transitionReasons(t *testing.T) (all, terminal []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "proto/completion/v1/completion.proto"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "enum TransitionReason {")
	if start < 0 {
		t.Fatal("completion.proto has no enum TransitionReason")
	}
	body := text[start : start+strings.Index(text[start:], "\n}")]
	value := regexp.MustCompile(`^\s*TRANSITION_REASON_([A-Z_]+)\s*=\s*\d+;`)
	comment := ""
	for line := range strings.Lines(body) {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "//"); ok {
			comment += c
			continue
		}
		if m := value.FindStringSubmatch(line); m != nil && m[1] != "UNSPECIFIED" {
			all = append(all, m[1])
			if strings.Contains(comment, "(terminal)") {
				terminal = append(terminal, m[1])
			}
		}
		comment = ""
	}
	if len(terminal) == 0 {
		t.Fatal("no TransitionReason is marked (terminal) in completion.proto")
	}
	return all, terminal
}

// reasonScan finds the reasons the sources put in errdetails.ErrorInfo.
type reasonScan struct {
	fset  *token.FileSet
	pkgs  []*goPackage
	found map[string][]string // reason → where
	// transitions is where a reason is a transition reason's name (a
	// String() of the machine's reason): every terminal reason may be sent.
	transitions []string
	errs        []string
}

// reasonFormat is what an ErrorInfo reason must look like (AIP-193).
var reasonFormat = regexp.MustCompile(`^[A-Z][A-Z0-9_]*[A-Z0-9]$`)

func (s *reasonScan) where(n ast.Node) string {
	p := s.fset.Position(n.Pos())
	rel, _ := filepath.Rel(root, p.Filename)
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)
}

// scan visits every ErrorInfo composite literal of the sources.
func (s *reasonScan) scan() {
	for _, p := range s.pkgs {
		for _, f := range p.files {
			for _, decl := range f.Decls {
				fn, _ := decl.(*ast.FuncDecl)
				ast.Inspect(decl, func(n ast.Node) bool {
					lit, ok := n.(*ast.CompositeLit)
					if !ok || !isErrorInfo(lit.Type) {
						return true
					}
					for _, elt := range lit.Elts {
						if kv, ok := elt.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Reason") {
							s.resolve(kv.Value, p, fn, s.where(kv), 0)
						}
					}
					return true
				})
			}
		}
	}
}

func isErrorInfo(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name == "ErrorInfo"
	case *ast.Ident:
		return e.Name == "ErrorInfo"
	case *ast.StarExpr:
		return isErrorInfo(e.X)
	}
	return false
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// add records reason, found at where.
func (s *reasonScan) add(reason, where string) {
	if !reasonFormat.MatchString(reason) {
		s.errs = append(s.errs, fmt.Sprintf("%s: ErrorInfo reason %q is not UPPER_SNAKE_CASE", where, reason))
		return
	}
	s.found[reason] = append(s.found[reason], where)
}

// resolve finds the values expression e (in function fn of package p) may
// have: a literal, a constant, a parameter (through every call of its
// function), a field (through every literal that sets it), or a transition
// reason's String().
func (s *reasonScan) resolve(e ast.Expr, p *goPackage, fn *ast.FuncDecl, where string, depth int) {
	if depth > 6 {
		s.errs = append(s.errs, where+": ErrorInfo reason: too many indirections to follow")
		return
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if v, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
			s.add(v, where)
			return
		}
	case *ast.ParenExpr:
		s.resolve(e.X, p, fn, where, depth+1)
		return
	case *ast.Ident:
		if v, ok := p.consts[e.Name]; ok {
			s.add(v, where)
			return
		}
		if i := paramIndex(fn, e.Name); i >= 0 {
			calls := s.callsOf(fn.Name.Name, i)
			if len(calls) == 0 {
				s.errs = append(s.errs, fmt.Sprintf("%s: ErrorInfo reason is parameter %s of %s, which nothing calls", where, e.Name, fn.Name.Name))
			}
			for _, c := range calls {
				s.resolve(c.arg, c.pkg, c.fn, c.where, depth+1)
			}
			return
		}
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "String" && len(e.Args) == 0 {
			s.transitions = append(s.transitions, where)
			return
		}
	case *ast.SelectorExpr:
		if vals := s.constsNamed(e.Sel.Name); len(vals) > 0 {
			for _, v := range vals {
				s.add(v, where)
			}
			return
		}
		if vals := s.fieldValues(e.Sel.Name); len(vals) > 0 {
			for _, v := range vals {
				s.add(v.value, v.where)
			}
			return
		}
	}
	s.errs = append(s.errs, fmt.Sprintf("%s: cannot tell which reasons this ErrorInfo sends (%T): teach docs/errors_test.go to follow it", where, e))
}

// paramIndex is the position of fn's parameter name, or -1.
func paramIndex(fn *ast.FuncDecl, name string) int {
	if fn == nil {
		return -1
	}
	i := 0
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// call is one argument of a call to a function, where it is made.
type call struct {
	arg   ast.Expr
	pkg   *goPackage
	fn    *ast.FuncDecl
	where string
}

// callsOf finds every call of a function or method named name and its
// argument at index i.
func (s *reasonScan) callsOf(name string, i int) []call {
	var out []call
	for _, p := range s.pkgs {
		for _, f := range p.files {
			for _, decl := range f.Decls {
				fn, _ := decl.(*ast.FuncDecl)
				ast.Inspect(decl, func(n ast.Node) bool {
					ce, ok := n.(*ast.CallExpr)
					if !ok || len(ce.Args) <= i {
						return true
					}
					switch fun := ce.Fun.(type) {
					case *ast.Ident:
						if fun.Name != name {
							return true
						}
					case *ast.SelectorExpr:
						if fun.Sel.Name != name {
							return true
						}
					default:
						return true
					}
					out = append(out, call{arg: ce.Args[i], pkg: p, fn: fn, where: s.where(ce)})
					return true
				})
			}
		}
	}
	return out
}

// constsNamed are the values of the string constants named name in any
// package.
func (s *reasonScan) constsNamed(name string) []string {
	var out []string
	for _, p := range s.pkgs {
		if v, ok := p.consts[name]; ok {
			out = append(out, v)
		}
	}
	return out
}

// fieldValue is an UPPER_SNAKE_CASE string a literal sets a field to.
type fieldValue struct{ value, where string }

// fieldValues are the UPPER_SNAKE_CASE strings that keyed composite
// literals anywhere set a field named name to.
func (s *reasonScan) fieldValues(name string) []fieldValue {
	var out []fieldValue
	for _, p := range s.pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				kv, ok := n.(*ast.KeyValueExpr)
				if !ok || !isIdent(kv.Key, name) {
					return true
				}
				var v string
				switch x := kv.Value.(type) {
				case *ast.BasicLit:
					v, _ = strconv.Unquote(x.Value)
				case *ast.Ident:
					v = p.consts[x.Name]
				case *ast.SelectorExpr: // another package's constant: guard.ReasonOverloaded
					if vals := s.constsNamed(x.Sel.Name); len(vals) == 1 {
						v = vals[0]
					}
				}
				if reasonFormat.MatchString(v) {
					out = append(out, fieldValue{v, s.where(kv)})
				}
				return true
			})
		}
	}
	return out
}

// tableRows are the first cells of a page's table rows that are a single
// code span, by section (the "##" heading above them).
func tableRows(text string) map[string][]string {
	out := map[string][]string{}
	section := ""
	cell := regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\|")
	for line := range strings.Lines(prose(text)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
		}
		if m := cell.FindStringSubmatch(line); m != nil {
			out[section] = append(out[section], m[1])
		}
	}
	return out
}

// TestErrorReferenceIsComplete: docs/errors.md has a row for every reason
// the server's sources can put in an ErrorInfo — those written out, and the
// terminal transition reasons, which a completion's end status names — and
// no row for a reason they cannot send.
func TestErrorReferenceIsComplete(t *testing.T) {
	fset, pkgs := sources(t)
	s := &reasonScan{fset: fset, pkgs: pkgs, found: map[string][]string{}}
	s.scan()
	for _, e := range s.errs {
		t.Error(e)
	}
	_, terminal := transitionReasons(t)
	if len(s.transitions) == 0 {
		t.Error("no ErrorInfo names a transition reason: a completion's end must (docs/errors_test.go may have lost track of it)")
	}
	for _, r := range terminal {
		s.found[r] = append(s.found[r], "a terminal TransitionReason, at "+strings.Join(s.transitions, ", "))
	}
	if len(s.found) <= len(terminal) {
		t.Errorf("found only the transition reasons %v: the scan lost track of the refusals", slices.Sorted(func(yield func(string) bool) {
			for r := range s.found {
				if !yield(r) {
					return
				}
			}
		}))
	}
	page := readPage(t, "docs/errors.md")
	rows := tableRows(page.text)
	var listed []string
	for _, section := range []string{"A completion's end", "Refusals and the server's own state"} {
		if len(rows[section]) == 0 {
			t.Errorf("docs/errors.md has no table of reasons under %q", section)
		}
		listed = append(listed, rows[section]...)
	}
	for r, where := range s.found {
		if !slices.Contains(listed, r) {
			t.Errorf("docs/errors.md does not list the ErrorInfo reason %s (sent at %s)", r, strings.Join(where, ", "))
		}
	}
	for _, r := range listed {
		if _, ok := s.found[r]; !ok {
			t.Errorf("docs/errors.md lists %s, which the server's sources never send", r)
		}
	}
}
