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

// TestReferenceDocsMissNothing cross-checks the generator against the
// source: every metric name and every dead-letter reason constant declared
// in this module (outside tests and other modules) is in the reference. A
// metric registered somewhere gen-docs does not know fails here.
func TestReferenceDocsMissNothing(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..")
	ref := func(name string) string {
		b, err := os.ReadFile(filepath.Join(repo, "docs", "reference", name))
		require.NoError(t, err)
		return string(b)
	}
	metrics, reasons := ref("metrics.md"), ref("dead-letter-reasons.md")
	metricName := regexp.MustCompile(`Name:\s*"(effectively_[a-z0-9_]+)"`)
	reasonConst := regexp.MustCompile(`\b(?:event\.)?Reason\s*=\s*"([a-z0-9_]+)"`)
	found := 0
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == filepath.Join(repo, "test") || (path != repo && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != repo {
				return filepath.SkipDir // another module: its own build documents it
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
			found++
			if !strings.Contains(metrics, "`"+m[1]+"`") {
				t.Errorf("%s registers %s, which docs/reference/metrics.md lacks; fix: register it in service.engineMetrics (gen-docs), then `make docs`", rel, m[1])
			}
		}
		for _, m := range reasonConst.FindAllStringSubmatch(string(b), -1) {
			found++
			if !strings.Contains(reasons, "`"+m[1]+"`") {
				t.Errorf("%s declares the dead-letter reason %s, which docs/reference/dead-letter-reasons.md lacks; fix: embed that file in its package's Reasons (event.DeclaredReasons), then `make docs`", rel, m[1])
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, found, "no metric or reason found in the source: the check itself is broken")
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
