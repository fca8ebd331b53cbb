package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// Kafka security end to end, on a broker of the test's own with SASL_SSL
// and mutual-TLS listeners and the standard authorizer: `effectively
// produce` (as the admin user, SCRAM-SHA-512 with a password file), the
// worker with its dead-letter relay (as User:worker, SCRAM-SHA-256, under
// exactly the ACLs docs/security.md lists), the audit, the worker again
// over mTLS and over OAUTHBEARER; then the errors an operator meets: a
// wrong password, a CA that did not sign the broker's certificate, and
// each documented ACL class removed in turn.
func TestKafkaSecurity(t *testing.T) {
	t.Parallel()
	k := startSecureKafka(t)
	db := pgtest.New(t, accounts.Migrations())
	topic, group := kafkatest.Name(t, "topic"), kafkatest.Name(t, "group")
	dlq := topic + ".dlq"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{topic, dlq} {
		resp, err := k.admin.CreateTopic(ctx, 4, 1, nil, name)
		require.NoError(t, err)
		require.NoError(t, resp.Err)
	}
	const worker = "User:worker"
	k.grant(t, worker, workerACLs(topic, group)...)

	common := []string{"EFFECTIVELY_KAFKA_TOPICS=" + topic, "EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_HTTP_ADDR=", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=200"}
	adminEnv := append(append(k.tlsEnv(k.saslSSL), common...),
		"EFFECTIVELY_KAFKA_SASL_MECHANISM=scram-sha-512", "EFFECTIVELY_KAFKA_SASL_USERNAME=admin",
		"EFFECTIVELY_KAFKA_SASL_PASSWORD_FILE="+k.file("secrets", "admin.password"))
	workerPassword := k.password(t, "worker")
	scramEnv := append(append(k.tlsEnv(k.saslSSL), common...),
		"EFFECTIVELY_KAFKA_SASL_MECHANISM=scram-sha-256", "EFFECTIVELY_KAFKA_SASL_USERNAME=worker",
		"EFFECTIVELY_KAFKA_SASL_PASSWORD="+workerPassword)
	r := &rig{db: db, topic: topic, group: group}

	// produce: a generated workload, then two records that are not events.
	produceAs := func(t *testing.T, env []string, seed string) workload.Expected {
		t.Helper()
		expect := filepath.Join(t.TempDir(), "expect.json")
		code, stdout, stderr := runCmd(t, env, "produce", "--topic", topic, "--events", "1500", "--accounts", "100",
			"--seed", seed, "--expect", expect)
		require.Equal(t, 0, code, "produce: %s\n%s", stdout, stderr)
		exp, err := workload.ReadExpected(expect)
		require.NoError(t, err)
		return exp
	}
	produce := func(t *testing.T, seed string) workload.Expected { return produceAs(t, adminEnv, seed) }
	exp := produce(t, "71")
	poison := filepath.Join(t.TempDir(), "poison.jsonl")
	require.NoError(t, os.WriteFile(poison, []byte(`{"key":"poison-1","value":{"hello":"world"}}`+"\n"+`{"key":"poison-2","value":[1,2,3]}`+"\n"), 0o600))
	code, stdout, stderr := runCmd(t, adminEnv, "produce", "--topic", topic, "--file", poison)
	require.Equal(t, 0, code, "produce --file: %s\n%s", stdout, stderr)
	records := exp.Records + 2

	t.Run("scram worker and relay under the documented ACLs", func(t *testing.T) {
		w := start(t, scramEnv, "run")
		r.waitApplied(t, records, 3*time.Minute)
		// The relay publishes both dead letters to the .dlq topic, as
		// User:worker, in a transaction under its transactional ID.
		waitUntil(t, "the relay published 2 dead letters", 2*time.Minute, func(ctx context.Context) bool {
			ends, err := k.admin.ListEndOffsets(ctx, dlq)
			if err != nil {
				return false
			}
			var n int64
			ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
			return n >= 2 // records plus transaction markers
		})
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute), "stderr:\n%s", tail(w.stderr.String(), 40))
		require.Equal(t, int64(exp.Distinct), db.Count(t, `SELECT count(*) FROM effectively_claims`))
		require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM dead_letters`))
		require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM dead_letters WHERE published_at IS NOT NULL`))
		rep, err := workload.VerifyEffects(context.Background(), db.Pool, exp)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
	})

	t.Run("audit as the worker", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, scramEnv, "audit", "--topic", topic, "--json")
		var rep audit.Report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "exit %d; stderr:\n%s", code, stderr)
		require.Equal(t, 0, code, "stderr:\n%s", stderr)
		require.Equal(t, int64(records), rep.Records)
	})

	t.Run("replay as the worker", func(t *testing.T) {
		// The dry run reads the group's members, committed offsets and the
		// log's offsets: the documented ACLs cover it.
		code, stdout, stderr := runCmd(t, scramEnv, "replay", "--topic", topic, "--from-start", "--json")
		require.Equal(t, 0, code, "stderr:\n%s", stderr)
		var plan struct {
			Records int64 `json:"records"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &plan), stdout)
		require.Equal(t, int64(records), plan.Records, "the plan covers every record applied")
	})

	t.Run("mutual TLS produce, worker, relay, audit and replay", func(t *testing.T) {
		mtlsEnv := append(append(k.tlsEnv(k.mTLS), common...),
			"EFFECTIVELY_KAFKA_TLS_CERT_FILE="+k.file("tls", "worker.pem"),
			"EFFECTIVELY_KAFKA_TLS_KEY_FILE="+k.file("tls", "worker.key"))
		// Producing is a producer's right, not the worker's: granted for the
		// step, then revoked.
		producer := workerACL{"topic", topic, kadm.OpWrite}
		k.grant(t, worker, producer)
		more := produceAs(t, mtlsEnv, "72")
		k.revoke(t, worker, producer)
		poison3 := filepath.Join(t.TempDir(), "poison3.jsonl")
		require.NoError(t, os.WriteFile(poison3, []byte(`{"key":"poison-3","value":{"not":"an event"}}`+"\n"), 0o600))
		code, stdout, stderr := runCmd(t, adminEnv, "produce", "--topic", topic, "--file", poison3)
		require.Equal(t, 0, code, "produce --file: %s\n%s", stdout, stderr)
		env := append(append(k.tlsEnv(k.mTLS), common...),
			"EFFECTIVELY_KAFKA_TLS_CERT_FILE="+k.file("tls", "worker.pem"),
			"EFFECTIVELY_KAFKA_TLS_KEY_FILE="+k.file("tls", "worker.key"))
		w := start(t, env, "run")
		r.waitApplied(t, records+more.Records+1, 3*time.Minute)
		waitUntil(t, "the relay published the third dead letter over mTLS", 2*time.Minute, func(ctx context.Context) bool {
			var n int64
			return db.Pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE published_at IS NOT NULL`).Scan(&n) == nil && n == 3
		})
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
		require.Equal(t, int64(exp.Distinct+more.Distinct), db.Count(t, `SELECT count(*) FROM effectively_claims`))

		code, stdout, stderr = runCmd(t, env, "audit", "--topic", topic, "--json")
		require.Equal(t, 0, code, "audit over mTLS: %s", stderr)
		var rep audit.Report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.Equal(t, int64(records+more.Records+1), rep.Records)
		code, _, stderr = runCmd(t, env, "replay", "--topic", topic, "--from-start", "--json")
		require.Equal(t, 0, code, "replay dry run over mTLS: %s", stderr)
	})

	t.Run("oauthbearer token file", func(t *testing.T) {
		token := filepath.Join(t.TempDir(), "token")
		env := append(append(k.tlsEnv(k.saslSSL), common...),
			"EFFECTIVELY_KAFKA_SASL_MECHANISM=oauthbearer", "EFFECTIVELY_KAFKA_SASL_TOKEN_FILE="+token)
		require.NoError(t, os.WriteFile(token, []byte(unsecuredJWT("worker", -time.Minute)), 0o600))
		code, _, stderr := runCmd(t, env, "run")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "kafka.sasl.token_file")
		require.Contains(t, stderr, "EFFECTIVELY_KAFKA_SASL_TOKEN_FILE")
		// A fresh token in the same file: the worker starts.
		require.NoError(t, os.WriteFile(token, []byte(unsecuredJWT("worker", time.Hour)+"\n"), 0o600))
		w := start(t, env, "run")
		waitUntil(t, "the worker started", time.Minute, func(context.Context) bool {
			return strings.Contains(w.stderr.String(), "worker started") || w.exited()
		})
		require.False(t, w.exited(), "stderr:\n%s", w.stderr.String())
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
	})

	t.Run("wrong password names kafka.sasl.password", func(t *testing.T) {
		env := append(append([]string{}, scramEnv...), "EFFECTIVELY_KAFKA_SASL_PASSWORD=not-the-password-4711")
		code, _, stderr := runCmd(t, env, "run")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "kafka.sasl.password (env EFFECTIVELY_KAFKA_SASL_PASSWORD)")
		require.Contains(t, stderr, "SASL_AUTHENTICATION_FAILED")
		require.NotContains(t, stderr, "not-the-password-4711")
		require.NotContains(t, stderr, workerPassword)
	})

	t.Run("unknown CA names kafka.tls.ca_file", func(t *testing.T) {
		env := append(append([]string{}, scramEnv...), "EFFECTIVELY_KAFKA_TLS_CA_FILE="+otherCA(t))
		code, _, stderr := runCmd(t, env, "run")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "kafka.tls.ca_file (env EFFECTIVELY_KAFKA_TLS_CA_FILE)")
		require.Contains(t, stderr, "certificate signed by unknown authority")
	})

	t.Run("missing client certificate names kafka.tls.cert_file", func(t *testing.T) {
		code, _, stderr := runCmd(t, append(k.tlsEnv(k.mTLS), common...), "run")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "kafka.tls.cert_file (env EFFECTIVELY_KAFKA_TLS_CERT_FILE)")
	})

	// Each documented ACL class removed in turn: the worker refuses to
	// start and names the operation and the resource.
	for _, acl := range workerACLs(topic, group) {
		want := "missing ACL " + acl.operation.String() + " on " + acl.resource + ` "` + acl.name + `"`
		tc := struct {
			acl  workerACL
			want string
		}{acl, want}
		t.Run("without "+tc.acl.operation.String()+" on "+tc.acl.name, func(t *testing.T) {
			k.revoke(t, worker, tc.acl)
			defer k.grant(t, worker, tc.acl)
			code, _, stderr := runCmd(t, scramEnv, "run")
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stderr, "Kafka denied User:worker: "+tc.want)
			require.Contains(t, stderr, "kafka-acls.sh")
		})
	}
}
