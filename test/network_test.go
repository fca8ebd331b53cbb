package test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// The network lies: each test here puts a fault between a worker and one of
// its services with toxiproxy (netlab_test.go) while records flow, then
// counts effects against what the produced events alone say (workload).
// The long mixed run is make chaos CHAOS_PROFILE=network.

// netEnv is what every network test's worker runs with: short sessions,
// a statement timeout of 4 s and an answer timeout of 5 s so a half-open
// database link turns into a reconnect within seconds.
func netEnv(pgURL string) []string {
	return []string{
		"EFFECTIVELY_POSTGRES_URL=" + pgURL,
		"EFFECTIVELY_POSTGRES_ANSWER_TIMEOUT=5s",
		"EFFECTIVELY_RETRY_MAX=2s", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100",
	}
}

// via is dbURL reached through link k (direct when nil), with
// statementTimeout.
func via(t *testing.T, dbURL string, k *link, statementTimeout string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	if k != nil {
		u.Host = k.Addr
	}
	q := u.Query()
	q.Set("statement_timeout", statementTimeout)
	u.RawQuery = q.Encode()
	return u.String()
}

// hostOf is dbURL's host:port.
func hostOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Host
}

// fencedIn sums what the workers logged as fenced: records a batch held
// that another member (or an earlier attempt of the same batch whose
// COMMIT answer was lost) had already applied.
func fencedIn(procs ...*proc) int {
	n := 0
	for _, p := range procs {
		for _, l := range parseLogLines(p.stderr.String()) {
			if strings.HasPrefix(l.Msg, "records already applied were not applied again") {
				n += l.Fenced
			}
		}
	}
	return n
}

// pgLinkRun starts a worker whose database link goes through a lab link
// and the workload cfg produced at rate records/s, and returns once 200
// records are applied: the rig, the link, the worker's admin address, what
// the workload comes to, the worker, the position watch's stop and the
// producer's end.
func pgLinkRun(t *testing.T, cfg workload.Config, rate int) (*rig, *link, string, workload.Expected, *proc, func() int, <-chan error) {
	t.Helper()
	lab := newNetLab(t)
	r := newRig(t, 4)
	pg := lab.link(t, "pg", hostOf(t, r.db.URL))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.env = append(r.env, append(netEnv(via(t, r.db.URL, pg, "4s")), "EFFECTIVELY_HTTP_ADDR="+httpAddr)...)
	recs, exp := r.records(t, cfg)
	w := r.worker(t)
	stopWatch := r.watchPositions(t)
	produced := produceThroughRestarts(kafkaBrokers(t, r), recs, rate, 3*time.Minute)
	r.waitApplied(t, 200, time.Minute)
	return r, pg, httpAddr, exp, w, stopWatch, produced
}

// ownBrokerRig is a rig on a broker of the test's own (admin: its direct
// address): a database, a 4-partition topic, a group, and the network
// tests' worker settings with short sessions. Workers add their own links.
func ownBrokerRig(t *testing.T, admin []string) *rig {
	t.Helper()
	db := pgtest.New(t, accounts.Migrations())
	topic, group := kafkatest.Name(t, "topic"), kafkatest.Name(t, "group")
	created, err := kadmOn(t, admin).CreateTopic(context.Background(), 4, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, created.Err)
	return &rig{db: db, topic: topic, group: group, brokers: admin, env: append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(admin, ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group, "EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s", "EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
	}, netEnv(via(t, db.URL, nil, "4s"))...)}
}

// COMMIT reaches PostgreSQL and its answer is lost: the connection closes
// (three times) or stays open and silent (twice, caught by the answer
// timeout). The worker cannot know whether its batch is in; it retries,
// and the retry finds the partition's stored position already past the
// batch (fenced): every event has exactly one effect.
func TestNetCommitAnswersLost(t *testing.T) {
	t.Parallel()
	r, pg, httpAddr, exp, w, stopWatch, produced := pgLinkRun(t, testWorkload(5000, 200, 41), 400)
	for _, hold := range []bool{false, true, false, true, false} {
		before := pg.commitAnswersDropped()
		pg.dropCommitAnswers(hold)
		waitUntil(t, "a COMMIT answer dropped", time.Minute, func(context.Context) bool { return pg.commitAnswersDropped() > before })
		if hold {
			// Healing would close the held connection; leave it silent
			// past the answer timeout, which must end the wait.
			time.Sleep(7 * time.Second)
		}
		pg.heal()
	}
	require.NoError(t, <-produced)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	retries := counter(t, httpAddr, "effectively_batch_retries_total")
	stopWatch()
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	dropped, fenced := pg.commitAnswersDropped(), fencedIn(w)
	t.Logf("COMMIT answers dropped %d; batch retries %v; records fenced on retry %d", dropped, retries, fenced)
	require.GreaterOrEqual(t, dropped, int64(5))
	require.Positive(t, retries, "the worker felt the lost answers")
	require.Positive(t, fenced, "a retried batch found itself already committed")
	require.Contains(t, w.stderr.String(), "no answer from PostgreSQL (postgres.answer_timeout) within 5s",
		"a held COMMIT answer was given up by the answer timeout, not by a heal")
	r.verify(t, exp)
}

// kafkaBrokers is the rig's broker list.
func kafkaBrokers(t *testing.T, r *rig) []string {
	t.Helper()
	for _, e := range r.env {
		if v, ok := strings.CutPrefix(e, "EFFECTIVELY_KAFKA_BROKERS="); ok {
			return strings.Split(v, ",")
		}
	}
	t.Fatal("the rig names no brokers")
	return nil
}

// Cut from PostgreSQL but not from the broker: the member keeps its
// session and its partitions, goes unready naming PostgreSQL, stops
// fetching and commits nothing while the link is down — fully cut, then
// half-open (bytes taken, never answered), then slow (500 ± 300 ms each
// way) — and is ready and exact again after each heal.
func TestNetPostgresCutOneSided(t *testing.T) {
	t.Parallel()
	r, pg, httpAddr, exp, w, stopWatch, produced := pgLinkRun(t, testWorkload(6000, 200, 43), 200)

	for _, fault := range []struct {
		name  string
		apply func()
	}{{"cut", pg.cut}, {"half-open", pg.halfOpen}} {
		fault.apply()
		var body string
		waitUntil(t, "/readyz names PostgreSQL ("+fault.name+")", time.Minute, func(context.Context) bool {
			code, b := readyz(t, httpAddr)
			body = b
			return code == http.StatusServiceUnavailable && strings.Contains(b, `"postgres":"unreachable`)
		})
		require.Contains(t, body, `"kafka":"ok"`, "only PostgreSQL is cut")
		require.Zero(t, dependencyUp(t, httpAddr, "postgres"))
		// Nothing commits while the link is down.
		frozen := r.applied(t)
		time.Sleep(3 * time.Second)
		require.Equal(t, frozen, r.applied(t), "nothing committed through a %s link", fault.name)
		require.Positive(t, stateGauges(t, httpAddr, "retrying"), "the partitions retry, paused")
		pg.heal()
		waitUntil(t, "ready again after the "+fault.name, time.Minute, func(context.Context) bool {
			code, _ := readyz(t, httpAddr)
			return code == http.StatusOK && r.applied(t) > frozen
		})
		t.Logf("%s: /readyz during it: %s", fault.name, body)
	}
	require.Contains(t, w.stderr.String(), "no answer from PostgreSQL (postgres.answer_timeout) within 5s",
		"the half-open link was given up by the answer timeout")
	// Slow, not cut: ready all along (a slow answer is an answer).
	pg.latency(500, 300)
	slowFrom := r.applied(t)
	waitUntil(t, "batches commit through the slow link", time.Minute, func(context.Context) bool { return r.applied(t) > slowFrom+100 })
	code, body := readyz(t, httpAddr)
	require.Equal(t, http.StatusOK, code, "a slow link is not a cut: %s", body)
	pg.heal()

	require.NoError(t, <-produced)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	stopWatch()
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	r.verify(t, exp)
}

// Cut from the broker but not from PostgreSQL: worker A's broker link goes
// half-open (bytes taken, nothing answered) while its database link is
// slow, so it holds fetched records and batches in flight when its session
// expires and B takes its partitions. A goes unready naming Kafka and keeps
// applying what it holds — a zombie (the test measures the window in which
// both held a partition, from their logs). Where its late batches and B's
// overlap, the partitions' stored positions fence whatever one of them
// applied first (counted, not required: whether A still commits inside the
// window depends on what it had fetched; TestZombieBatchIsFencedByThePosition
// in internal/pipeline asserts the fence itself). Every event has exactly
// one effect; no position moves back.
func TestNetZombieCutFromTheBroker(t *testing.T) {
	t.Parallel()
	lab := newNetLab(t)
	admin, perClient, kafkaLinks, _ := ownKafkaProxied(t, lab, 2)
	r := ownBrokerRig(t, admin)
	db := r.db
	pgA := lab.link(t, "pg-a", hostOf(t, db.URL))
	ports := proctest.FreePorts(t, 2)
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	recs, exp := r.records(t, testWorkload(8000, 300, 45))
	a := r.worker(t, "EFFECTIVELY_KAFKA_BROKERS="+strings.Join(perClient[0], ","),
		"EFFECTIVELY_POSTGRES_URL="+via(t, db.URL, pgA, "4s"), "EFFECTIVELY_HTTP_ADDR="+addrA)
	b := r.worker(t, "EFFECTIVELY_KAFKA_BROKERS="+strings.Join(perClient[1], ","), "EFFECTIVELY_HTTP_ADDR="+addrB)
	stopWatch := r.watchPositions(t)
	produced := produceThroughRestarts(admin, recs, 400, 3*time.Minute)
	r.waitApplied(t, 500, time.Minute)
	waitUntil(t, "both members own partitions", time.Minute, func(context.Context) bool {
		return len(ownedPartitions(a.stderr.String())) > 0 && len(ownedPartitions(b.stderr.String())) > 0
	})

	// A falls behind (a slow database link: its fetched records pile up),
	// then loses the broker.
	pgA.latency(500, 100)
	time.Sleep(4 * time.Second)
	kafkaLinks[0].halfOpen()
	waitUntil(t, "B owns every partition", time.Minute, func(context.Context) bool {
		return len(ownedPartitions(b.stderr.String())) == 4
	})
	var body string
	waitUntil(t, "A's /readyz names Kafka", time.Minute, func(context.Context) bool {
		code, bd := readyz(t, addrA)
		body = bd
		return code == http.StatusServiceUnavailable && strings.Contains(bd, `"kafka":"unreachable`)
	})
	require.Contains(t, body, `"postgres":"ok"`, "A still reaches PostgreSQL")
	time.Sleep(5 * time.Second) // A applies what it holds, late
	kafkaLinks[0].heal()
	pgA.heal()

	require.NoError(t, <-produced)
	r.waitApplied(t, exp.Records, 3*time.Minute)
	stopWatch()
	for _, w := range []*proc{a, b} {
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
	}
	overlap := ownedTwice(a.stderr.String(), b.stderr.String())
	fencedA, fencedB := fencedIn(a), fencedIn(b)
	t.Logf("A still held partitions B owned for %s (the zombie window); fenced: %d records in A, %d in B; A's /readyz while cut: %s",
		overlap.Round(time.Millisecond), fencedA, fencedB, body)
	require.Positive(t, overlap, "A was a zombie: it held partitions after the group had given them to B")
	r.verify(t, exp)
}

// Cut from a target only: its answers dropped after it got the request
// (three windows), its link half-open, then cut. The outbox waits and
// retries; nothing else does (positions keep moving during the cut). The
// CRM (idempotent, keyed) gets exactly one key per opened account; the
// mail API (at most once) never gets a second mail, and every mail whose
// answer was lost is `unknown`, with the mail in fact received — what the
// operator's `outbox resolve --sent` then records.
func TestNetTargetAnswersLost(t *testing.T) {
	t.Parallel()
	lab := newNetLab(t)
	crm, crmDirect := newEffectsServer(t, false, nil)
	mail, mailDirect := newEffectsServer(t, true, nil)
	crmLink := lab.link(t, "crm", strings.TrimPrefix(crmDirect, "http://"))
	mailLink := lab.link(t, "mail", strings.TrimPrefix(mailDirect, "http://"))
	r := newRig(t, 4, "EFFECTIVELY_EFFECTS_CRM_URL=http://"+crmLink.Addr, "EFFECTIVELY_EFFECTS_MAIL_URL=http://"+mailLink.Addr+"/welcome",
		"EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=1s",
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=2s", "EFFECTIVELY_OUTBOX_LEASE_GRACE=1s", "EFFECTIVELY_OUTBOX_CONCURRENCY=2",
		"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=20")
	recs, exp := r.records(t, testWorkload(2000, 200, 47))
	w := r.worker(t)
	produced := produceThroughRestarts(kafkaBrokers(t, r), recs, 100, 3*time.Minute)
	r.waitApplied(t, 20, time.Minute)

	dropped := 0
	for range 3 {
		before := crm.snapshot().requests() + mail.snapshot().requests()
		crmLink.dropAnswers()
		mailLink.dropAnswers()
		time.Sleep(2 * time.Second)
		crmLink.heal()
		mailLink.heal()
		dropped += crm.snapshot().requests() + mail.snapshot().requests() - before
		time.Sleep(time.Second)
	}
	for _, fault := range []func(*link){(*link).halfOpen, (*link).cut} {
		fault(crmLink)
		fault(mailLink)
		from := r.applied(t)
		waitUntil(t, "records applied while the targets are cut", time.Minute, func(context.Context) bool { return r.applied(t) > from+50 })
		crmLink.heal()
		mailLink.heal()
	}
	require.NoError(t, <-produced)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	waitUntil(t, "the outbox settled", 2*time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	opened := openedAccounts(exp)
	c, m := crm.snapshot(), mail.snapshot()
	unknown := r.outboxIntents(t, "--state", "unknown")
	t.Logf("requests whose answer was dropped %d; CRM keys %d for %d opened accounts; mails %d; mails in doubt %d", dropped, len(c.Keys), len(opened), m.requests(), len(unknown))
	require.Positive(t, dropped, "answers were dropped")
	for _, acct := range opened {
		require.Equal(t, 1, c.KeysByAccount[acct], "account %s: one CRM key, however often it was called", acct)
	}
	require.Empty(t, m.Overflow, "no account got a second mail")
	// The operator settles each mail in doubt against the mail log (as the
	// runbook says): sent when it arrived, resent when it did not. Then
	// every opened account has exactly one mail.
	settleMailsInDoubt(t, r.env, unknown, m.Received)
	w = r.startedWorker(t)
	waitUntil(t, "the resent mails delivered", 2*time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	m = mail.snapshot()
	require.Empty(t, m.Overflow, "no account got a second mail")
	for _, acct := range opened {
		require.Equal(t, 1, m.Received[acct], "account %s: exactly one mail after the operator settled the doubtful ones", acct)
	}
	r.verify(t, exp)
}

// ownedTwice is the longest time a partition was owned by both zombie's
// and owner's logs at once: assigned to owner while zombie had not yet
// revoked it.
func ownedTwice(zombie, owner string) time.Duration {
	type span struct{ from, to time.Time }
	spans := func(stderr string) map[int32][]span {
		out := map[int32][]span{}
		open := map[int32]time.Time{}
		var last time.Time // a killed process logs no revoke: its spans end at its last line
		for _, l := range parseLogLines(stderr) {
			last = l.Time
			if l.Partition == nil {
				continue
			}
			switch l.Msg {
			case "partition assigned":
				open[*l.Partition] = l.Time
			case "partition revoked", "partition lost":
				if from, ok := open[*l.Partition]; ok {
					out[*l.Partition] = append(out[*l.Partition], span{from, l.Time})
					delete(open, *l.Partition)
				}
			}
		}
		for p, from := range open {
			out[p] = append(out[p], span{from, last})
		}
		return out
	}
	z, o := spans(zombie), spans(owner)
	longest := time.Duration(0)
	for p, zs := range z {
		for _, a := range zs {
			for _, b := range o[p] {
				from, to := a.from, a.to
				if b.from.After(from) {
					from = b.from
				}
				if b.to.Before(to) {
					to = b.to
				}
				longest = max(longest, to.Sub(from))
			}
		}
	}
	return longest
}

// The broker's answers lost: four times, every answer on the worker's
// broker link is dropped and the connection reset after the broker acted
// (fetches, heartbeats, offset commits, the dead-letter relay's
// transactional produce and its commit), then the link is capped at
// 32 KB/s for 6 s. Every event has exactly one effect, every poison
// record exactly one dead letter — in dead_letters and once on the .dlq
// topic (read committed) — and Kafka's committed offsets end at the
// positions PostgreSQL holds.
func TestNetKafkaAnswersLost(t *testing.T) {
	t.Parallel()
	lab := newNetLab(t)
	admin, perClient, kafkaLinks, _ := ownKafkaProxied(t, lab, 1)
	r := ownBrokerRig(t, admin)
	db, topic, group, adm := r.db, r.topic, r.group, kadmOn(t, admin)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.env = append(r.env, "EFFECTIVELY_KAFKA_BROKERS="+strings.Join(perClient[0], ","),
		"EFFECTIVELY_HTTP_ADDR="+httpAddr, "EFFECTIVELY_CONSUMER_MAX_PAYLOAD_BYTES=4096")
	stream := buildChaosStream(t, chaosProfile{events: 4000, accounts: 200, poisonEvery: 50, bellEvery: 1 << 30}, topic, 51)
	w := r.worker(t)
	produced := produceThroughRestarts(admin, stream.records, 200, 3*time.Minute)
	r.waitApplied(t, 100, time.Minute)
	for range 4 {
		kafkaLinks[0].dropAnswers()
		time.Sleep(2 * time.Second)
		kafkaLinks[0].heal()
		time.Sleep(time.Second)
	}
	kafkaLinks[0].bandwidth(32)
	capped := r.applied(t)
	time.Sleep(6 * time.Second)
	kafkaLinks[0].heal()
	require.NoError(t, <-produced)

	ends, err := adm.ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	var total int64
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset; total += o.Offset })
	waitUntil(t, "every record processed", 3*time.Minute, func(ctx context.Context) bool {
		pos, err := r.positions(ctx)
		if err != nil {
			return false
		}
		for p, o := range end {
			if pos[p] < o {
				return false
			}
		}
		return true
	})
	waitUntil(t, "Kafka's committed offsets reach the stored positions", time.Minute, func(ctx context.Context) bool {
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		for p, o := range end {
			if c, ok := committed.Lookup(topic, p); !ok || c.At != o {
				return false
			}
		}
		return true
	})
	waitUntil(t, "the relay published every dead letter", time.Minute, func(context.Context) bool {
		return db.Count(t, `SELECT count(*) FROM dead_letters WHERE published_at IS NULL`) == 0
	})
	readErrors := counter(t, httpAddr, "effectively_kafka_read_errors_total")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	inLog := readLog(t, admin, topic, total)
	dead := db.Count(t, `SELECT count(*) FROM dead_letters`)
	onDLQ := map[string]bool{}
	for _, rec := range kafkatest.ReadCommittedFrom(t, admin, topic+".dlq", int(dead), time.Minute) {
		h := map[string]string{}
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		onDLQ[h["effectively.origin.partition"]+"/"+h["effectively.origin.offset"]] = true
	}
	t.Logf("records %d (poison %d); dead letters %d, distinct on the .dlq topic %d; applied during the 32 KB/s cap from %d; broker reads failed %v",
		total, inLog.poison, dead, len(onDLQ), capped, readErrors)
	require.Positive(t, readErrors, "the worker felt the lost answers")
	require.Equal(t, inLog.poison, dead, "one dead letter per poison record in the log")
	require.Len(t, onDLQ, int(dead), "each dead letter once on the .dlq topic (its first %d records are distinct)", dead)
	rep, err := workload.VerifyEffects(context.Background(), db.Pool, stream.exp)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, int64(stream.exp.Distinct), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition IN ('applied', 'stale')`))
}
