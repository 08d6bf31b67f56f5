package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// engineFiles parses the engine package's own files (not its tests).
func engineFiles(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir("../../guard")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, "../../guard/"+e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) < 5 {
		t.Fatalf("%d files in guard", len(files))
	}
	return fset, files
}

// exported lists the engine's exported identifiers: top-level functions,
// types, variables and constants, and the methods of exported types.
func exported(files []*ast.File) []string {
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch x := d.(type) {
			case *ast.FuncDecl:
				if !x.Name.IsExported() {
					continue
				}
				if x.Recv == nil {
					names = append(names, x.Name.Name)
					continue
				}
				recv := x.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					names = append(names, id.Name+"."+x.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range x.Specs {
					switch y := s.(type) {
					case *ast.TypeSpec:
						if y.Name.IsExported() {
							names = append(names, y.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range y.Names {
							if id.IsExported() {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
	}
	return names
}

// The engine stays a core a newcomer can hold: at most 60 exported
// identifiers, and nothing imported but the standard library and the
// engine's own contracts (the store protocol, the message).
func TestTheEngineStaysSmall(t *testing.T) {
	_, files := engineFiles(t)
	if names := exported(files); len(names) > 60 || len(names) < 20 {
		t.Errorf("guard exports %d identifiers (at most 60): %s", len(names), strings.Join(names, " "))
	}
	own := map[string]bool{"github.com/otpguard/otpguard/guard/store": true, "github.com/otpguard/otpguard/guard/message": true}
	for _, f := range files {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") && !own[p] {
				t.Errorf("guard imports %s: the engine uses the standard library and its own contracts only", p)
			}
		}
	}
}

// No function of the product is 60 lines or more: a long one is split
// into the stages it runs, each named.
func TestNoProductFunctionOf60Lines(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, name := range tracked(t) {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "tests/") || strings.HasPrefix(name, "third_party/") {
			continue
		}
		f, err := parser.ParseFile(fset, "../../"+name, nil, 0)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			checked++
			if n := fset.Position(fn.Body.Rbrace).Line - fset.Position(fn.Pos()).Line + 1; n >= 60 {
				t.Errorf("%s: %s is %d lines (under 60: split it by its stages)", name, fn.Name.Name, n)
			}
		}
	}
	if checked < 500 {
		t.Fatalf("%d functions checked", checked)
	}
}
