package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The release image (../Dockerfile): bases pinned by digest with their tags
// beside them, a -trimpath static build, a non-root user, and the worker
// alone as its command (the schema is migrated by its own step). No Docker
// engine is needed: the file is read, not built.
func TestDockerfileIsARelease(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	df := string(b)

	from := regexp.MustCompile(`(?m)^FROM\s+(\S+)`)
	pinned := regexp.MustCompile(`^([a-z0-9./-]+):([\w.-]+)@sha256:[0-9a-f]{64}$`)
	froms := from.FindAllStringSubmatch(df, -1)
	require.Len(t, froms, 2, "a build stage and a runtime stage")
	for _, f := range froms {
		m := pinned.FindStringSubmatch(f[1])
		require.NotNil(t, m, "FROM %s: pin the base by digest (name:tag@sha256:…)", f[1])
		require.Contains(t, df, "# "+m[1]+":"+m[2]+" ", "the tag of %s is named in a comment, for whoever bumps it", f[1])
	}
	require.Contains(t, froms[0][1], "golang:1.26.8", "the build uses go.mod's Go")

	build := regexp.MustCompile(`(?m)^RUN [^\n]*(?:\\\n[^\n]*)*go build[^\n]*`).FindString(df)
	require.NotEmpty(t, build, "the Dockerfile builds the binary")
	for _, want := range []string{"-trimpath", "CGO_ENABLED=0", "./cmd/effectively", "-X main.version="} {
		require.Contains(t, build, want)
	}

	runtime := df[strings.LastIndex(df, "\nFROM "):]
	user := regexp.MustCompile(`(?m)^USER\s+(\d+)(?::(\d+))?\s*$`).FindStringSubmatch(runtime)
	require.NotNil(t, user, "the runtime stage names its user by number (runAsNonRoot checks a number)")
	require.NotEqual(t, "0", user[1], "not root")
	cmd := regexp.MustCompile(`(?m)^CMD\s+(.+)$`).FindStringSubmatch(runtime)
	require.NotNil(t, cmd)
	var args []string
	require.NoError(t, json.Unmarshal([]byte(cmd[1]), &args), "CMD in exec form")
	require.Equal(t, []string{"run"}, args, "the worker only: migrate is its own step (compose's migrate service, the chart's Job)")
	require.NotContains(t, df, "--migrate")
}

// ../.dockerignore keeps every file `go build ./cmd/effectively` reads
// (go.mod, go.sum, the module's packages the binary imports and the files
// they embed), as Docker's own matcher reads the file, and leaves out what
// the image must not carry: history, docs, tests, the charts, the stack.
func TestDockerignoreKeepsWhatTheBuildNeeds(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../.dockerignore")
	require.NoError(t, err)
	patterns, err := ignorefile.ReadAll(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	pm, err := patternmatcher.New(patterns)
	require.NoError(t, err)
	excluded := func(path string) bool {
		t.Helper()
		ex, err := pm.MatchesOrParentMatches(filepath.ToSlash(path))
		require.NoError(t, err)
		return ex
	}

	root, err := filepath.Abs("..")
	require.NoError(t, err)
	out, err := exec.Command("go", "list", "-C", root, "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles ","}}|{{join .EmbedFiles ","}}{{end}}{{end}}`, "./cmd/effectively").CombinedOutput()
	require.NoError(t, err, "%s", out)
	needed := []string{"go.mod", "go.sum"}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		dir, files, _ := strings.Cut(strings.TrimSpace(line), "|")
		gos, embeds, _ := strings.Cut(files, "|")
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		for _, name := range append(strings.Split(gos, ","), strings.Split(embeds, ",")...) {
			if name != "" {
				needed = append(needed, filepath.Join(rel, name))
			}
		}
	}
	require.Greater(t, len(needed), 100, "go list found the binary's files")
	require.True(t, slices.ContainsFunc(needed, func(p string) bool { return strings.HasPrefix(p, "schema/migrations/") }), "embedded files are among them")
	for _, p := range needed {
		require.False(t, excluded(p), ".dockerignore leaves out %s, which the build reads", p)
	}

	for _, p := range []string{".git/HEAD", "docs/security.md", "test/main_test.go", "deploy/image_test.go", "config/load_test.go",
		"stack/stack.sh", "bin/effectively", "examples/orders-go/go.mod", "README.md", "schema/testdata/x.sql"} {
		require.True(t, excluded(p), ".dockerignore keeps %s, which the image does not need", p)
	}
}

// docker-compose.yml migrates as its own step before the worker starts,
// with the same image and database, instead of `run --migrate` in every
// worker; the chart does the same with its migrate Job (checkMigrateJob).
func TestComposeMigratesBeforeTheWorker(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	type service struct {
		Build       string                       `json:"build"`
		Image       string                       `json:"image"`
		Command     []string                     `json:"command"`
		Environment map[string]string            `json:"environment"`
		DependsOn   map[string]map[string]string `json:"depends_on"`
		Restart     string                       `json:"restart"`
	}
	var compose struct {
		Services map[string]service `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	migrate, ok := compose.Services["migrate"]
	require.True(t, ok, "docker-compose.yml has a migrate step")
	worker := compose.Services["worker"]
	require.Equal(t, []string{"migrate"}, migrate.Command)
	require.Equal(t, "no", migrate.Restart, "a finished migration is not restarted")
	require.Equal(t, "service_healthy", migrate.DependsOn["postgres"]["condition"])
	require.Equal(t, []string{"run"}, worker.Command, "the worker does not migrate")
	require.Equal(t, "service_completed_successfully", worker.DependsOn["migrate"]["condition"], "the worker starts after the migration succeeded")
	require.Equal(t, ".", migrate.Build)
	require.Equal(t, worker.Image, migrate.Image, "one image")
	require.Equal(t, worker.Environment["EFFECTIVELY_POSTGRES_URL"], migrate.Environment["EFFECTIVELY_POSTGRES_URL"], "one database")
	require.NotContains(t, string(b), "--migrate")
}
