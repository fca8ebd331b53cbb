package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReferenceDocsAreCurrent regenerates the reference (gen-docs) from the
// reference build and compares it with docs/reference: a key, metric,
// reason, command or flag changed in the code without `make docs` fails here.
func TestReferenceDocsAreCurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stderr bytes.Buffer
	err := newApp().Run(context.Background(), []string{"gen-docs", dir}, io.Discard, &stderr)
	require.NoError(t, err, stderr.String())

	want := filepath.Join("..", "..", "docs", "reference")
	gen, err := markdownFiles(dir)
	require.NoError(t, err)
	committed, err := markdownFiles(want)
	require.NoError(t, err)
	for name, b := range gen {
		old, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("docs/reference/%s is missing; fix: run `make docs` and commit docs/reference", name)
		case !bytes.Equal(old, b):
			t.Errorf("docs/reference/%s is stale (the code changed since it was generated); fix: run `make docs` and commit docs/reference", name)
		}
	}
	for name := range committed {
		if _, ok := gen[name]; !ok {
			t.Errorf("docs/reference/%s is no longer generated (a command was removed or renamed); fix: run `make docs` and commit docs/reference", name)
		}
	}
}

// TestReferenceDocsDescribeEverything refuses a key, metric or reason
// without a description: each comes from a doc comment or a metric's help.
func TestReferenceDocsDescribeEverything(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"config.md", "metrics.md", "dead-letter-reasons.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", name))
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "| `") && strings.HasSuffix(line, "|  |") {
				t.Errorf("docs/reference/%s: no description for %s; fix: add a doc comment (or Help) in the code, then `make docs`", name, strings.Fields(line)[1])
			}
		}
	}
}

func markdownFiles(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	return out, err
}

// writtenElsewhere are pages linked from here that another change adds
// (the getting-started guide is written on its own branch). A missing one
// is tolerated; once it exists its links are checked like any other page's.
var writtenElsewhere = map[string]bool{"docs/getting-started.md": true}

// mdLink matches an inline Markdown link or image target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestMarkdownLinksResolve checks every relative link in README.md and
// docs/ (and the examples' READMEs) points at a file or folder that exists.
// Anchors are not checked; external links are left alone.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..")
	var files []string
	for _, root := range []string{"docs", "examples"} {
		err := filepath.WalkDir(filepath.Join(repo, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
				files = append(files, path)
			}
			return err
		})
		require.NoError(t, err)
	}
	files = append(files, filepath.Join(repo, "README.md"))
	sort.Strings(files)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := stripCode(string(b))
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(f), filepath.FromSlash(target))
			if strings.HasPrefix(target, "/") {
				path = filepath.Join(repo, filepath.FromSlash(target))
			}
			checked++
			if rel, _ := filepath.Rel(repo, path); writtenElsewhere[filepath.ToSlash(rel)] {
				continue
			}
			if _, err := os.Stat(path); err != nil {
				rel, _ := filepath.Rel(repo, f)
				t.Errorf("%s links to %s, which does not exist; fix: correct the link or add the file", filepath.ToSlash(rel), m[1])
			}
		}
	}
	require.Positive(t, checked, "no links found: the check itself is broken")
}

// stripCode removes fenced code blocks and inline code spans, whose
// brackets are not links.
func stripCode(s string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(inlineCode.ReplaceAllString(line, "``"))
			out.WriteString("\n")
		}
	}
	return out.String()
}

var inlineCode = regexp.MustCompile("`[^`]*`")
