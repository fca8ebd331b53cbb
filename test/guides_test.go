package test

import (
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The guides print configurations the suites run; these read them.

// fencedBlock is the first fenced block of kind lang after the line
// heading in the Markdown file path.
func fencedBlock(t *testing.T, path, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(b)
	at := strings.Index(text, "\n"+heading+"\n")
	require.NotEqual(t, -1, at, "%s: no heading %q", path, heading)
	text = text[at+1:]
	open := strings.Index(text, "\n```"+lang+"\n")
	require.NotEqual(t, -1, open, "%s: no %s block after %q", path, lang, heading)
	block, _, ok := strings.Cut(text[open+len("\n```"+lang+"\n"):], "\n```\n")
	require.True(t, ok, "%s: the %s block after %q is not closed", path, lang, heading)
	return block + "\n"
}

// withoutComments drops YAML comment lines, trailing comments and blank
// lines.
func withoutComments(yaml string) string {
	var out []string
	for _, line := range strings.Split(yaml, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimRight(line, " ")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// The change-data-capture guide prints what make cdc runs: its connector
// configuration is the suite's (with the local stack's addresses), and
// its configuration-only sinks are examples/customers/effectively.yaml,
// the file the suite runs the stock binary with. A guide that drifts from
// what is tested fails here, without the CDC stack.
func TestCDCGuideShowsWhatMakeCDCRuns(t *testing.T) {
	t.Parallel()
	const guide = "../docs/guides/change-data-capture.md"

	example, err := os.ReadFile("../examples/customers/effectively.yaml")
	require.NoError(t, err)
	require.Equal(t, withoutComments(string(example)), withoutComments(fencedBlock(t, guide, "## 4. The replica, the history and the total, by configuration alone", "yaml")),
		"the guide's configuration is examples/customers/effectively.yaml")

	sh := fencedBlock(t, guide, "## 2. The connector", "sh")
	start, end := strings.Index(sh, "-d '"), strings.LastIndex(sh, "'")
	require.True(t, start >= 0 && end > start, "the guide's curl has its document in -d '…': %s", sh)
	var doc struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(sh[start+len("-d '"):end]), &doc), "the guide's connector document")
	src, err := url.Parse("postgres://cdc:cdc@127.0.0.1:15433/source") // stack.sh up cdc's source
	require.NoError(t, err)
	require.Equal(t, debeziumConnectorConfig(src, slotName(doc.Name), "src", "customers"), doc.Config,
		"the guide's connector is the one make cdc registers")
	require.Contains(t, sh, "http://127.0.0.1:18083/connectors", "Connect's REST address in stack.sh")
}
