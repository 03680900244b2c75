package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// serviceSources parses the package's non-test Go files.
func serviceSources(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return fset, files
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg string, names ...string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && slices.Contains(names, sel.Sel.Name)
}

// TestStatusesAreBuiltInOneFile: every status the service sends is built in
// grpc_status.go — no call of status.New, Newf, Error, Errorf, FromProto or
// ErrorProto, no WithDetails and no ErrorInfo or RetryInfo outside it — so
// that what a caller can get back is read in one place.
func TestStatusesAreBuiltInOneFile(t *testing.T) {
	fset, files := serviceSources(t)
	if _, ok := files["grpc_status.go"]; !ok {
		t.Fatal("no grpc_status.go")
	}
	for name, f := range files {
		if name == "grpc_status.go" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isSelector(n.Fun, "status", "New", "Newf", "Error", "Errorf", "FromProto", "ErrorProto") {
					t.Errorf("%s: a status is built outside grpc_status.go", fset.Position(n.Pos()))
				}
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "WithDetails" {
					t.Errorf("%s: status details are added outside grpc_status.go", fset.Position(n.Pos()))
				}
			case *ast.CompositeLit:
				if isSelector(n.Type, "errdetails", "ErrorInfo", "RetryInfo") {
					t.Errorf("%s: an ErrorInfo or RetryInfo is built outside grpc_status.go", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}
