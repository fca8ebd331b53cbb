package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	stdlog "log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/status"
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

// stem is in every secret of TestSecretsNeverAppearInFailures: the token
// used as a URL's user name, a URL's password, query credentials (built-in
// names and one configured in redact.params), webhook secrets in a path
// (Slack's shape, and a prefix configured in secret_path_prefix), and the
// source's bearer token.
const stem = "Qv8FailStem"

// timedOut matches Go's HTTP client timing out: "Client.Timeout exceeded",
// "context deadline exceeded" or "timeout awaiting response headers",
// whichever of net/http's timers reports it first.
var timedOut = regexp.MustCompile(`[Tt]imeout|deadline exceeded`)

// Targets and a prefetch source whose URLs carry credentials fail in every
// way a network fails — connection refused, a certificate no one trusts, no
// answer (timeout) — and the Go HTTP client's errors name the whole URL.
// None of those credentials appears in the worker's log, its /status,
// `status --json`, the console's pages, the outbox rows, the dead_letters
// rows, the .dlq record, or the CLI's output; while each failure is
// visibly there (redacted), and the source, once it answers, is read with
// its bearer token over TLS verified against its ca_file.
func TestSecretsNeverAppearInFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bearer := filepath.Join(dir, "source-token")
	require.NoError(t, os.WriteFile(bearer, []byte(stem+"-src-bearer\n"), 0o600))
	// httptest's certificate: the source's CA when it answers. The
	// untrusted servers use one of their own.
	probe := httptest.NewTLSServer(http.NotFoundHandler())
	ca := filepath.Join(dir, "source-ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: probe.Certificate().Raw}), 0o600))
	probe.Close()
	untrusted := selfSigned(t)

	src, crm, mail := newSwitchable(t), newSwitchable(t), newSwitchable(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := newRig(t, 1,
		"EFFECTIVELY_TARGETS_CRM_URL=https://"+stem+"-crm-user@"+crm.addr+"/services/T0AAA/B0BBB/"+stem+"-crm-path?api_key="+stem+"-crm-query",
		"EFFECTIVELY_TARGETS_MAIL_URL=https://mailer:"+stem+"-mail-pass@"+mail.addr+"/hooks/"+stem+"-mail-path/send?X-Amz-Signature="+stem+"-mail-sig&X-Amz-Credential="+stem+"-mail-cred",
		"EFFECTIVELY_TARGETS_MAIL_SECRET_PATH_PREFIX=/hooks/",
		"EFFECTIVELY_TARGETS_ACCOUNTS_URL=https://"+stem+"-src-user@"+src.addr+"/accounts?access_token="+stem+"-src-query&zz_custom="+stem+"-src-custom&page=1",
		"EFFECTIVELY_TARGETS_ACCOUNTS_BEARER_TOKEN_FILE="+bearer,
		"EFFECTIVELY_TARGETS_ACCOUNTS_CA_FILE="+ca,
		"EFFECTIVELY_REDACT_PARAMS=zz_custom",
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=1s", "EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=500ms",
		"EFFECTIVELY_PREFETCH_MAX_ATTEMPTS=1",
	)
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr,
		"EFFECTIVELY_CONSOLE_ENABLED=true", "EFFECTIVELY_CONSOLE_LOCALHOST_WITHOUT_TOKEN=true")
	base := "http://" + addr

	places := map[string]string{}
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
		return string(b)
	}
	intent := func(op string) (state, lastErr string) {
		_ = r.db.Pool.QueryRow(context.Background(), `SELECT state, coalesce(last_error, '') FROM outbox WHERE operation = $1`, op).Scan(&state, &lastErr)
		return state, lastErr
	}
	// partitionError is the error the worker's /status shows for its
	// retrying partition.
	partitionError := func() string {
		var st status.Worker
		if json.Unmarshal([]byte(get("/status")), &st) != nil || len(st.Partitions) == 0 {
			return ""
		}
		return st.Partitions[0].Error
	}
	// snapshot keeps what /status, `status --json` and the console show now.
	snapshot := func(phase string) {
		t.Helper()
		places[phase+": /status"] = get("/status")
		code, out, stderr := runCmd(t, r.env, "status", "--json", "--worker", base)
		require.Equal(t, 0, code, stderr)
		places[phase+": status --json"] = out + stderr
		places[phase+": console overview"] = get("/console/")
	}
	send := func(recs ...*kgo.Record) {
		t.Helper()
		produceRecords(t, r.topic, recs...)
	}

	// Refused: nothing listens on any of the three.
	send(cetest.Account(r.topic, "o1", "account.opened", "acct-1", 1, "Ann"))
	waitUntil(t, "both intents failed, refused", time.Minute, func(context.Context) bool {
		_, crmErr := intent(accounts.OpCRMUpsertContact)
		_, mailErr := intent(accounts.OpMailWelcome)
		return strings.Contains(crmErr, "connection refused") && strings.Contains(mailErr, "connection refused")
	})
	send(cetest.Record(r.topic, "bell-1", "account.refreshed", "acct-1", 0, nil))
	waitUntil(t, "the doorbell's source refused", time.Minute, func(context.Context) bool {
		return strings.Contains(partitionError(), "connection refused")
	})
	snapshot("refused")

	// TLS: each answers with a certificate no one trusts.
	for _, s := range []*switchable{src, crm, mail} {
		s.serveTLS(http.NotFoundHandler(), &untrusted)
	}
	waitUntil(t, "every call refused by TLS", time.Minute, func(context.Context) bool {
		_, crmErr := intent(accounts.OpCRMUpsertContact)
		mailState, mailErr := intent(accounts.OpMailWelcome)
		return strings.Contains(partitionError(), "certificate") && strings.Contains(crmErr, "certificate") &&
			mailState == "unknown" && strings.Contains(mailErr, "certificate")
	})
	snapshot("tls")

	// Timeout: connections are accepted and never answered.
	src.hang()
	crm.hang()
	waitUntil(t, "the source and the CRM time out", time.Minute, func(context.Context) bool {
		_, crmErr := intent(accounts.OpCRMUpsertContact)
		return timedOut.MatchString(partitionError()) && timedOut.MatchString(crmErr)
	})
	snapshot("timeout")

	// The source answers, over TLS verified against its ca_file, when it is
	// sent its bearer token — except for acct-slow, which it never answers:
	// that doorbell is dead-lettered (prefetch.max_attempts) with the
	// timeout, and published to the .dlq topic.
	var mu sync.Mutex
	var auth []string
	src.serveTLS(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		auth = append(auth, req.Header.Get("Authorization"))
		mu.Unlock()
		if req.Header.Get("Authorization") != "Bearer "+stem+"-src-bearer" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		id := strings.TrimPrefix(req.URL.Path, "/accounts/")
		if id == "acct-echo" {
			// A source that echoes its request in its refusal.
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "denied: %s for %s", req.Header.Get("Authorization"), req.URL)
			return
		}
		if id == "acct-slow" {
			select {
			case <-req.Context().Done():
			case <-time.After(30 * time.Second):
			}
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "version": 2, "name": id, "email": id + "@example.com", "plan": "pro", "status": "open"})
	}), nil)
	waitUntil(t, "the doorbell applied from the source", time.Minute, func(ctx context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'acct-1' AND version = 2`) == 1
	})
	// One Kafka record batch, so one fetch and one worker batch: the slow
	// doorbell's failures count only while its source answers other
	// events (the echoing one's refusal is such an answer), and the
	// worker asks the source about nothing else while it retries a batch.
	// Produced one by one, the slow doorbell could be fetched alone and be
	// retried for as long as its source never answers it (by design).
	// (No doorbell for an answering account beside them: on a starved
	// machine its 5 s read may time out twice and dead-letter it as well,
	// and the count below is exact.)
	sendOneBatch(t, r.topic,
		cetest.Record(r.topic, "bell-slow", "account.refreshed", "acct-slow", 0, nil),
		cetest.Record(r.topic, "bell-echo", "account.refreshed", "acct-echo", 0, nil))
	waitUntil(t, "the slow and the refused doorbells dead-lettered and published", 4*time.Minute, func(ctx context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason IN ('source_unavailable', 'source_rejected') AND published_at IS NOT NULL`) == 2
	})
	var letterID int64
	var letterErr, echoErr string
	require.NoError(t, r.db.Pool.QueryRow(context.Background(), `SELECT id, error FROM dead_letters WHERE reason = 'source_unavailable'`).Scan(&letterID, &letterErr))
	require.Regexp(t, timedOut, letterErr, "the dead letter keeps the timeout, its URL redacted")
	require.Contains(t, letterErr, "xxxxx")
	require.NoError(t, r.db.Pool.QueryRow(context.Background(), `SELECT error FROM dead_letters WHERE reason = 'source_rejected'`).Scan(&echoErr))
	require.Contains(t, echoErr, `403 Forbidden: "denied: xxxxx for /accounts/acct-echo?access_token=xxxxx`, "the source's refusal is kept, what it echoed of the request masked")
	dlq := kafkatest.ReadCommitted(t, r.topic+".dlq", 2, 90*time.Second)
	require.Len(t, dlq, 2)
	var rec strings.Builder
	for _, d := range dlq {
		fmt.Fprintf(&rec, "%s %s", d.Key, d.Value)
		for _, h := range d.Headers {
			fmt.Fprintf(&rec, " %s=%s", h.Key, h.Value)
		}
		rec.WriteString("\n")
	}
	require.Regexp(t, timedOut, rec.String())
	require.Contains(t, rec.String(), "denied")
	places[".dlq records"] = rec.String()
	snapshot("answering")

	// The pages and the commands that show dead letters and intents.
	var intentIDs []int64
	rows, err := r.db.Pool.Query(context.Background(), `SELECT id FROM outbox ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		intentIDs = append(intentIDs, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, intentIDs, 2)
	pages := []string{"/console/dead-letters", fmt.Sprintf("/console/dead-letters/%d", letterID), "/console/outbox"}
	commands := [][]string{{"dlq", "list"}, {"dlq", "list", "--json"}, {"dlq", "show", fmt.Sprint(letterID)}, {"dlq", "show", fmt.Sprint(letterID), "--json"},
		{"outbox", "list"}, {"outbox", "list", "--json"}, {"status"}}
	for _, id := range intentIDs {
		pages = append(pages, fmt.Sprintf("/console/outbox/%d", id))
		commands = append(commands, []string{"outbox", "show", fmt.Sprint(id)}, []string{"outbox", "show", fmt.Sprint(id), "--json"})
	}
	for _, p := range pages {
		places["console "+p] = get(p)
	}
	for _, args := range commands {
		code, out, stderr := runCmd(t, r.env, args...)
		require.Equal(t, 0, code, stderr)
		places[strings.Join(args, " ")] = out + stderr
	}
	places["outbox rows"] = rowsJSON(t, r, `SELECT row_to_json(o)::text FROM outbox o`)
	places["dead_letters rows"] = rowsJSON(t, r, `SELECT row_to_json(d)::text FROM dead_letters d`)

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	places["worker log"] = w.stderr.String()

	// Every failure is there, with its URL redacted.
	log := places["worker log"]
	for _, want := range []string{"connection refused", "certificate", "xxxxx"} {
		require.Contains(t, log, want, "the worker's log shows the failure")
	}
	require.Regexp(t, timedOut, log, "the worker's log shows the timeouts")
	for _, phase := range []string{"refused", "tls", "timeout"} {
		for _, where := range []string{"/status", "status --json", "console overview"} {
			require.Contains(t, places[phase+": "+where], "xxxxx", "%s: %s shows the redacted URL", phase, where)
		}
	}
	require.Contains(t, places["refused: console overview"], "connection refused")
	require.Contains(t, places["tls: status --json"], "certificate")
	require.Contains(t, places["outbox rows"], "xxxxx")
	mu.Lock()
	require.NotEmpty(t, auth, "the source was read over TLS with its ca_file")
	for _, a := range auth {
		require.Equal(t, "Bearer "+stem+"-src-bearer", a, "every read carried the source's bearer token")
	}
	mu.Unlock()

	for place, text := range places {
		require.NotContains(t, text, stem, "%s shows a secret:\n%s", place, text)
	}
}

// rowsJSON is every row of query (one text column), one a line.
func rowsJSON(t *testing.T, r *rig, query string) string {
	t.Helper()
	rs, err := r.db.Pool.Query(context.Background(), query)
	require.NoError(t, err)
	var out []string
	for rs.Next() {
		var row string
		require.NoError(t, rs.Scan(&row))
		out = append(out, row)
	}
	require.NoError(t, rs.Err())
	require.NotEmpty(t, out, query)
	return strings.Join(out, "\n")
}

// switchable is a local address whose behaviour the test switches: nothing
// listening (connection refused), a TLS server, or a listener that accepts
// and never answers (a timeout).
type switchable struct {
	t     *testing.T
	addr  string
	mu    sync.Mutex
	close func()
}

func newSwitchable(t *testing.T) *switchable {
	s := &switchable{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), close: func() {}}
	t.Cleanup(s.refuse)
	return s
}

// listen closes what listens now and listens again on the same address.
func (s *switchable) listen() net.Listener {
	s.close()
	s.close = func() {}
	var ln net.Listener
	require.Eventually(s.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "listening on %s again", s.addr)
	return ln
}

func (s *switchable) refuse() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.close()
	s.close = func() {}
}

func (s *switchable) hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln := s.listen()
	var (
		cmu   sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
		}
	}()
	s.close = func() {
		_ = ln.Close()
		<-done
		cmu.Lock()
		defer cmu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// serveTLS serves h over TLS with cert (nil: httptest's own).
func (s *switchable) serveTLS(h http.Handler, cert *tls.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln := s.listen()
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	s.close = func() {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// sendOneBatch produces recs to topic as one Kafka record batch (buffered,
// then flushed in one request), which a consumer reads in one fetch.
func sendOneBatch(t *testing.T, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic), kgo.ManualFlushing())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, len(recs))
	for _, rec := range recs {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { errs <- err })
	}
	require.NoError(t, cl.Flush(ctx))
	for range recs {
		require.NoError(t, <-errs)
	}
}

// selfSigned is a certificate for 127.0.0.1 that nothing trusts.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nobody trusts this"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
