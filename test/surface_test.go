package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publicAPI is the engine's public surface as committed: every exported
// identifier (and exported method of an exported type) of every package a
// team's module can import. A change to it is a change to what teams depend
// on: update the file with EFFECTIVELY_UPDATE_API=1 and review the diff.
const publicAPI = "testdata/public-api.txt"

// publicPackages are the packages a team's module may import: the worker
// and its command line (service), the handler API (handlers, event,
// dedupe's dispositions), migration sets (schema), configuration (config,
// consumer's settings) and the test kit. Every other package is under
// internal/, where the go command refuses an import from another module.
var publicPackages = []string{"config", "consumer", "dedupe", "effectivelytest", "event", "handlers", "schema", "service"}

// The engine's importable packages and their exported identifiers, listed
// and compared with testdata/public-api.txt. Packages under internal/ are
// not importable from another module; cmd/ and examples/ are programs and
// examples, not API.
func TestPublicSurfaceIsListed(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{.Name}} {{.Module.Path}}", "github.com/effectively-io/effectively/...").Output()
	require.NoError(t, err)
	var lines []string
	packages := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		path, dir, name := f[0], f[1], f[2]
		if f[3] != "github.com/effectively-io/effectively" {
			continue // a module of its own: the tests, the chart, an example
		}
		rel := strings.TrimPrefix(path, "github.com/effectively-io/effectively")
		rel = strings.TrimPrefix(rel, "/")
		if name == "main" || strings.Contains("/"+rel+"/", "/internal/") ||
			strings.HasPrefix(rel, "examples") || strings.HasPrefix(rel, "cmd") {
			continue
		}
		packages++
		require.Contains(t, publicPackages, rel, "%s is importable from other modules but not one of the public packages: move it under internal/, or add it to publicPackages and docs/explanation/stability.md", path)
		lines = append(lines, exported(t, path, dir)...)
	}
	require.Equal(t, len(publicPackages), packages, "every public package exists")
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	t.Logf("public surface: %d importable packages, %d exported identifiers", packages, len(lines))
	if os.Getenv("EFFECTIVELY_UPDATE_API") != "" {
		require.NoError(t, os.WriteFile(publicAPI, []byte(got), 0o644))
	}
	want, err := os.ReadFile(publicAPI)
	require.NoError(t, err, "fix: EFFECTIVELY_UPDATE_API=1 go test ./test/ -run TestPublicSurfaceIsListed")
	require.Equal(t, string(want), got, "the public surface changed; if that is meant, run EFFECTIVELY_UPDATE_API=1 go test ./test/ -run TestPublicSurfaceIsListed and commit the diff")
}

// exported lists a package's exported identifiers: pkg.Name for functions,
// types, constants and variables, pkg.Type.Method for exported methods of
// exported types.
func exported(t *testing.T, path, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	short := strings.TrimPrefix(path, "github.com/effectively-io/effectively/")
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						out = append(out, short+"."+d.Name.Name)
						continue
					}
					if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) {
						out = append(out, short+"."+recv+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								out = append(out, short+"."+s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									out = append(out, short+"."+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
