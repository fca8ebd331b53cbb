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

// ReasonDocs returns every reason Decode gives, then ReasonHandlerError,
// each with its doc comment.
func ReasonDocs() []ReasonDoc {
	return DocumentReasons(errorsSource, append(DecodeReasons(), ReasonHandlerError)...)
}

// DocumentReasons pairs each reason with the doc comment of the constant
// that declares it in the Go files of fsys (a package embeds the files that
// declare its reasons, so any binary can document them). A reason whose
// constant has no doc comment, or that no constant declares, gets an empty
// Doc; the docs test refuses that.
func DocumentReasons(fsys fs.FS, reasons ...Reason) []ReasonDoc {
	docs := map[Reason]string{}
	files, err := fs.Glob(fsys, "*.go")
	if err != nil {
		panic(err) // only a malformed pattern fails
	}
	for _, name := range files {
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
				cg := vs.Doc
				if cg == nil && len(gd.Specs) == 1 {
					cg = gd.Doc
				}
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING || cg == nil || i >= len(vs.Names) {
						continue
					}
					val, err := strconv.Unquote(lit.Value)
					if err != nil {
						continue
					}
					text := strings.Join(strings.Fields(cg.Text()), " ")
					text = strings.TrimPrefix(text, vs.Names[i].Name+":")
					text = strings.TrimPrefix(text, vs.Names[i].Name+" ")
					docs[Reason(val)] = strings.TrimSpace(text)
				}
			}
		}
	}
	out := make([]ReasonDoc, len(reasons))
	for i, r := range reasons {
		out[i] = ReasonDoc{Reason: r, Doc: docs[r]}
	}
	return out
}
