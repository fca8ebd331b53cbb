package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/test/cetest"
)

// secret is set, with a suffix per place, in every secret-bearing key: a
// URL's userinfo, a credential-like query parameter, a bearer-token file, a
// header file, the SASL password and sslpassword. None of it may appear in
// `config` output, the worker's logs, errors, /metrics, outbox rows or
// `outbox list`/`show`, while the target does receive the credentials.
const secret = "S3cretValue9"

func TestSecretsNeverAppear(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content+"\n"), 0o600))
		return p
	}
	tokenFile := write("token", secret+"-bearer")
	keyFile := write("key", secret+"-header")

	// The target fails once (its error, with the URL, is logged and stored),
	// then takes the call.
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, strings.Join([]string{r.URL.Path, r.URL.Query().Get("token"), r.Header.Get("Authorization"),
			r.Header.Get("X-Api-Key")}, " "))
		if len(got) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	crmURL := strings.Replace(srv.URL, "http://", "http://crm-user:"+secret+"-userinfo@", 1) + "/v1?token=" + secret + "-query"

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := newRig(t, 1,
		"EFFECTIVELY_TARGETS_CRM_URL="+crmURL,
		"EFFECTIVELY_TARGETS_CRM_BEARER_TOKEN_FILE="+tokenFile,
		"EFFECTIVELY_TARGETS_CRM_HEADER_FILES=X-Api-Key="+keyFile,
		"EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=200ms",
	)
	r.env = withEnv(r.env, "EFFECTIVELY_POSTGRES_URL="+r.db.URL+"&sslpassword="+secret+"-sslpassword")
	produceRecords(t, r.topic, cetest.Account(r.topic, "a1", "account.opened", "acct-1", 1, "Ann"))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	waitUntil(t, "the CRM call sent after one failure", 2*time.Minute, func(ctx context.Context) bool {
		var n int64
		return r.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'sent'`).Scan(&n) == nil && n == 1
	})
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	mu.Lock()
	require.Len(t, got, 2)
	require.Equal(t, "/v1/contacts/acct-1 "+secret+"-query Bearer "+secret+"-bearer "+secret+"-header", got[1],
		"the target receives every credential")
	mu.Unlock()

	places := map[string]string{"worker log": w.stderr.String(), "/metrics": string(metrics)}
	var rows []string
	rs, err := r.db.Pool.Query(context.Background(), `SELECT row_to_json(o)::text FROM outbox o`)
	require.NoError(t, err)
	for rs.Next() {
		var row string
		require.NoError(t, rs.Scan(&row))
		rows = append(rows, row)
	}
	require.NoError(t, rs.Err())
	require.Len(t, rows, 1)
	require.Contains(t, w.stderr.String(), "502 Bad Gateway", "the failed call, URL and all, was logged")
	places["outbox rows"] = strings.Join(rows, "\n")
	for _, args := range [][]string{{"outbox", "list"}, {"outbox", "list", "--json"}, {"outbox", "show", "1"}, {"outbox", "show", "1", "--json"}} {
		code, stdout, stderr := runCmd(t, r.env, args...)
		require.Equal(t, 0, code, stderr)
		places[strings.Join(args, " ")] = stdout + stderr
	}
	// The configuration, with the SASL password too (not used to connect).
	code, stdout, stderr := runCmd(t, append(r.env, "EFFECTIVELY_KAFKA_SASL_MECHANISM=plain",
		"EFFECTIVELY_KAFKA_SASL_USERNAME=worker", "EFFECTIVELY_KAFKA_SASL_PASSWORD="+secret+"-sasl"), "config")
	require.Equal(t, 0, code, stderr)
	places["config"] = stdout + stderr
	// An error naming the configuration: a refused value is printed redacted.
	code, stdout, stderr = runCmd(t, append(r.env, "EFFECTIVELY_TARGETS_CRM_URL=ftp://u:"+secret+"-bad@crm/"), "config")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "targets.crm.url")
	places["config error"] = stdout + stderr

	for place, text := range places {
		require.NotContains(t, text, secret, "%s shows a secret:\n%s", place, text)
	}
}
