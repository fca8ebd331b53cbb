package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
	"github.com/effectively-io/effectively/internal/stacktest"
)

// guidePath is the getting-started guide, relative to this package.
const guidePath = "../docs/getting-started.md"

// guideTopic is the topic the guide's commands name. The test runs them on
// a topic of its own (the only change it makes to them), so that it never
// meets a reader's records on a shared broker.
const guideTopic = "--topic profiles"

// TestGettingStartedGuide follows docs/getting-started.md as a newcomer
// would: from a copy of the checkout's files (nothing built beforehand), in
// an empty folder next to it, it writes the guide's files and runs its
// commands, as written and in order, in one bash session — go mod init, go
// build, migrate, produce, run, psql, audit. The stack comes from the
// environment the guide tells the reader to export (EFFECTIVELY_POSTGRES_URL,
// here with a schema of the test's own) and the EFFECTIVELY_* variables
// every build reads (its own broker, topic and group). The outcome is then
// checked in the database, and every output the guide shows must appear in
// what the commands printed.
func TestGettingStartedGuide(t *testing.T) {
	t.Parallel()
	steps := parseGuide(t, guidePath)

	db := pgtest.NewEmpty(t)
	topic := kafkatest.Name(t, "topic")
	kafkatest.DeleteOnCleanup(t, topic, topic+".dlq")
	group := kafkatest.NewGroup(t)

	root := guideDir(t)
	copyCheckout(t, "..", filepath.Join(root, "effectively"))
	script, substituted := guideScript(steps, topic)
	require.Positive(t, substituted, "the guide no longer names the topic as %q; update guideTopic", guideTopic)

	env := []string{
		"EFFECTIVELY_POSTGRES_URL=" + libpqURL(t, stacktest.PostgresURL(t), db.Schema),
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_HTTP_ADDR=", // no metrics listener: tests run side by side
		"GOWORK=off",
	}
	for _, kv := range os.Environ() {
		// The developer's own settings must not leak into the reader's shell.
		if !strings.HasPrefix(kv, "EFFECTIVELY_") && !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr proctest.LockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	logStepTimes(t, stderr.String(), start)
	if err != nil {
		t.Fatalf("the guide's commands failed after %s: %v\nscript:\n%s\nstdout:\n%s\nstderr (tail):\n%s",
			took.Round(time.Millisecond), err, script, stdout.String(), tail(stderr.String(), 80))
	}
	t.Logf("the guide's commands took %s", took.Round(time.Millisecond))

	// What the guide shows, in the order it shows it.
	out := normalizedLines(stdout.String())
	from := 0
	for _, s := range steps {
		if s.kind != stepOutput {
			continue
		}
		for _, want := range normalizedLines(s.body) {
			i := indexFrom(out, from, want)
			require.GreaterOrEqual(t, i, 0, "the guide's output line %q (line %d of the guide) was not printed; stdout:\n%s", want, s.line, stdout.String())
			from = i + 1
		}
	}

	// The outcome, read from the database: one row per profile at its
	// newest version, each event claimed once with the right disposition,
	// every record of the test's topic among them.
	bg := context.Background()
	type profile struct {
		ID      string
		Version int64
		Name    string
	}
	var profiles []profile
	rows, err := db.Pool.Query(bg, `SELECT id, version, display_name FROM profiles ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var p profile
		require.NoError(t, rows.Scan(&p.ID, &p.Version, &p.Name))
		profiles = append(profiles, p)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []profile{{"alice", 2, "Alice Liddell"}, {"bob", 3, "Robert"}}, profiles)

	dispositions := map[string]string{}
	rows, err = db.Pool.Query(bg, `SELECT event_key, disposition FROM effectively_claims WHERE topic = $1 AND consumer_group = $2`, topic, group)
	require.NoError(t, err)
	for rows.Next() {
		var k, d string
		require.NoError(t, rows.Scan(&k, &d))
		dispositions[k] = d
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{
		"ce:15:profile-service:evt-1": "applied",
		"ce:15:profile-service:evt-2": "applied",
		"ce:15:profile-service:evt-3": "applied",
		"ce:15:profile-service:evt-4": "stale",
		"ce:15:profile-service:evt-5": "applied",
	}, dispositions)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM dead_letters`), "dead letters")
	// Twelve records (the file, sent twice), all behind the group's position.
	require.EqualValues(t, 12, db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE topic = $1 AND consumer_group = $2`, topic, group))
}

type stepKind int

const (
	stepRun    stepKind = iota // a shell block to run
	stepSkip                   // a shell block the test cannot run (with the reason)
	stepFile                   // a file to write
	stepOutput                 // output the previous commands must have printed
)

// step is one marked fenced block of the guide.
type step struct {
	kind stepKind
	arg  string // the file name of a stepFile
	body string
	line int // where the block starts in the guide
}

var (
	markerRE = regexp.MustCompile(`^<!-- test: (run|output|file ([A-Za-z0-9._/-]+)|skip \(.+\)) -->$`)
	fenceRE  = regexp.MustCompile("^```([a-z]*)$")
)

// parseGuide reads the guide's marked blocks. Every fenced block must be
// marked: a shell block with `<!-- test: run -->` or `<!-- test: skip
// (reason) -->`, any other with `<!-- test: file NAME -->` or `<!-- test:
// output -->`, on the line before the fence. A new command that the test
// would not run fails here rather than going untested.
func parseGuide(t *testing.T, path string) []step {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	var steps []step
	var marker []string // the pending marker's submatches
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		if m := markerRE.FindStringSubmatch(l); m != nil {
			marker = m
			continue
		}
		f := fenceRE.FindStringSubmatch(l)
		if f == nil {
			if l != "" {
				marker = nil
			}
			continue
		}
		lang, start := f[1], i+1
		var body strings.Builder
		for i++; i < len(lines) && strings.TrimRight(lines[i], " \t\r") != "```"; i++ {
			body.WriteString(lines[i] + "\n")
		}
		require.Less(t, i, len(lines), "%s:%d: the fenced block does not end", path, start)
		require.NotNil(t, marker, "%s:%d: a ```%s block without a <!-- test: ... --> marker on the line before it", path, start, lang)
		s := step{body: body.String(), line: start}
		switch {
		case marker[1] == "run":
			s.kind = stepRun
		case marker[1] == "output":
			s.kind = stepOutput
		case marker[2] != "":
			s.kind, s.arg = stepFile, marker[2]
		default:
			s.kind = stepSkip
		}
		require.Equal(t, lang == "sh", s.kind == stepRun || s.kind == stepSkip,
			"%s:%d: a ```%s block marked %q: shell blocks are run or skip, others file or output", path, start, lang, marker[1])
		steps = append(steps, s)
		marker = nil
	}
	require.NotEmpty(t, steps, "%s has no marked blocks", path)
	return steps
}

// guideScript joins the guide's files and commands into one bash script,
// with the test's topic in place of the guide's. Before each command block
// it notes the time on stderr, so the steps can be timed. It returns how
// many times the topic was substituted.
func guideScript(steps []step, topic string) (string, int) {
	var b strings.Builder
	b.WriteString("exec 3>&2\nset -ex\n")
	n := 0
	for _, s := range steps {
		switch s.kind {
		case stepFile:
			fmt.Fprintf(&b, "cat > '%s' <<'GUIDE_EOF'\n%sGUIDE_EOF\n", s.arg, s.body)
		case stepRun:
			fmt.Fprintf(&b, "{ echo \"guide-step %d $(date +%%s%%N)\" >&3; } 2>/dev/null\n", s.line)
			n += strings.Count(s.body, guideTopic)
			b.WriteString(strings.ReplaceAll(s.body, guideTopic, "--topic "+topic))
		}
	}
	b.WriteString("{ echo \"guide-step end $(date +%s%N)\" >&3; } 2>/dev/null\n")
	return b.String(), n
}

// logStepTimes logs how long each command block of the guide took.
func logStepTimes(t *testing.T, stderr string, start time.Time) {
	t.Helper()
	var (
		prevLine string
		prev     = start
		lines    []string
	)
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "guide-step" {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, ns)
		if prevLine != "" {
			lines = append(lines, fmt.Sprintf("block at line %s: %s", prevLine, at.Sub(prev).Round(time.Millisecond)))
		}
		prevLine, prev = f[1], at
	}
	t.Logf("time per command block of the guide:\n%s", strings.Join(lines, "\n"))
}

// guideDir is an empty folder for the reader's files and the copy of the
// checkout. Its path is the same on every run from this checkout: Go's build
// cache keys compiled packages by their folder, so a fixed path lets the
// second run reuse the first one's work (half a minute on two cores).
func guideDir(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs("..")
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(os.TempDir(), "effectively-guide-"+hex.EncodeToString(sum[:6]))
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// libpqURL is base with its search_path set to schemaName in the form both
// pgx and psql (libpq) accept: the options parameter.
func libpqURL(t *testing.T, base, schemaName string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Del("search_path")
	q.Set("options", "-csearch_path="+schemaName)
	u.RawQuery = q.Encode()
	return u.String()
}

// copyCheckout copies the checkout's files — tracked, and new ones not
// ignored, as in the working tree — to dst: a clean checkout, without
// anything built or generated in this one.
func copyCheckout(t *testing.T, src, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	require.NoError(t, err, "listing the checkout's files")
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		from := filepath.Join(src, string(name))
		fi, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		require.NoError(t, err)
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		to := filepath.Join(dst, string(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
		require.NoError(t, os.WriteFile(to, b, fi.Mode().Perm()))
	}
}

// normalizedLines splits s into its non-empty lines with runs of
// whitespace collapsed, so that column padding does not matter.
func normalizedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func indexFrom(lines []string, from int, want string) int {
	for i := from; i < len(lines); i++ {
		if lines[i] == want {
			return i
		}
	}
	return -1
}
