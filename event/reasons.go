package event

import (
	"embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strconv"
	"strings"
)

// ReasonDoc is a dead-letter reason code and what it means, for the
// generated reference (docs/reference/dead-letter-reasons.md).
type ReasonDoc struct {
	Reason Reason
	// Doc is the doc comment of the constant that declares the reason,
	// without the constant's name.
	Doc string
}

//go:embed errors.go
var errorsSource embed.FS

// ReasonDocs returns every reason this package declares — those Decode
// gives, then ReasonHandlerError — each with its doc comment.
func ReasonDocs() []ReasonDoc {
	return DeclaredReasons(errorsSource)
}

// DeclaredReasons returns every constant of type Reason (event.Reason)
// declared in the Go files of fsys, in file and source order, each with its
// doc comment. A package embeds the files that declare its reasons, so any
// binary can document them (the generated reference, gen-docs).
func DeclaredReasons(fsys fs.FS) []ReasonDoc {
	files, err := fs.Glob(fsys, "*.go")
	if err != nil {
		panic(err) // only a malformed pattern fails
	}
	var out []ReasonDoc
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			panic(fmt.Sprintf("event: reading embedded %s: %v", name, err))
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments)
		if err != nil {
			panic(fmt.Sprintf("event: parsing embedded %s: %v", name, err)) // it compiled
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if !isReasonType(vs.Type) {
					continue
				}
				cg := vs.Doc
				if cg == nil && len(gd.Specs) == 1 {
					cg = gd.Doc
				}
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING || i >= len(vs.Names) {
						continue
					}
					val, err := strconv.Unquote(lit.Value)
					if err != nil {
						continue
					}
					text := ""
					if cg != nil {
						text = strings.Join(strings.Fields(cg.Text()), " ")
						text = strings.TrimPrefix(text, vs.Names[i].Name+":")
						text = strings.TrimSpace(text)
					}
					out = append(out, ReasonDoc{Reason: Reason(val), Doc: text})
				}
			}
		}
	}
	return out
}

// isReasonType reports whether a constant's declared type is Reason or
// event.Reason.
func isReasonType(t ast.Expr) bool {
	switch t := t.(type) {
	case *ast.Ident:
		return t.Name == "Reason"
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "event" && t.Sel.Name == "Reason"
	}
	return false
}
