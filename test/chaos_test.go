package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// The chaos suite runs the real binary as several processes against a
// broker and a database of its own, while a seeded schedule of faults hits
// them: SIGKILLs at random and at named crash points, clean restarts,
// members joining and leaving, broker and PostgreSQL restarts, a member
// paused past its session. A verifier that computes the expected end state
// from the produced events alone (package workload, the poison and doorbells
// injected here, what the local CRM and mail servers received) then checks
// every invariant and prints a table of figures.
//
// EFFECTIVELY_CHAOS_PROFILE selects the profile (short, the default, runs in
// make test; default is make chaos); EFFECTIVELY_CHAOS_SEED reproduces a run.

type chaosProfile struct {
	name                       string
	events, accounts           int
	partitions                 int32
	workers                    int
	rate                       int           // records per second while faults run
	interval                   time.Duration // between faults
	kills                      int           // at least this many SIGKILLs (random and at crash points)
	joins                      int           // members joining, then leaving
	brokerRestarts, pgRestarts int
	pauses                     int
	rebalances                 int // at least this many observed
	poisonEvery, bellEvery     int // one poison record, one doorbell per this many records
	network                    int // injections of each network fault kind (netKinds)
	guard                      time.Duration
}

var chaosProfiles = map[string]chaosProfile{
	"short": {name: "short", events: 20_000, accounts: 400, partitions: 6, workers: 3, rate: 700, interval: 2500 * time.Millisecond,
		kills: 6, joins: 1, brokerRestarts: 1, pgRestarts: 0, pauses: 0, poisonEvery: 400, bellEvery: 100, guard: 5 * time.Minute},
	"default": {name: "default", events: 200_000, accounts: 4000, partitions: 6, workers: 3, rate: 1000, interval: 2500 * time.Millisecond,
		kills: 32, joins: 8, brokerRestarts: 2, pgRestarts: 2, pauses: 1, rebalances: 20, poisonEvery: 400, bellEvery: 100, network: 1, guard: 25 * time.Minute},
	// network: every kind of network fault (netKinds) five times, with
	// SIGKILLs mixed in; the rate is low enough that the records last the
	// whole schedule (a minute of latency is five minutes in all).
	"network": {name: "network", events: 150_000, accounts: 3000, partitions: 6, workers: 3, rate: 190, interval: 2 * time.Second,
		kills: 12, joins: 2, brokerRestarts: 0, pgRestarts: 0, pauses: 0, rebalances: 10, poisonEvery: 400, bellEvery: 100, network: 5, guard: 45 * time.Minute},
}

// The network faults, each on one link of one worker (its own listener of
// the broker, its own PostgreSQL link) or on a target's link, through
// toxiproxy (netlab_test.go).
var netKinds = []string{
	"zombie",          // the worker's broker link cut or half-open until its session expires; its database link kept, slowed
	"commit-answer",   // PostgreSQL's answer to COMMIT dropped (connection closed, or held silent)
	"outbox-answer",   // a target's answers dropped after it received the request
	"kafka-answer",    // the broker's answers dropped (offset commits, fetches, the relay's transactions)
	"halfopen-kafka",  // the worker's broker link takes bytes and answers nothing
	"halfopen-pg",     // the worker's database link takes bytes and answers nothing
	"halfopen-target", // a target's link takes bytes and answers nothing
	"cut-pg",          // the worker cut from PostgreSQL, not from the broker
	"cut-target",      // a target cut, nothing else
	"latency",         // 500 ± 300 ms each way on every link, for a minute
}

// The kinds of kill the schedule deals out.
const (
	killRandom = "random"
)

var killPoints = []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.OutboxBeforeCall, crashpoint.OutboxAfterCall}

// chaosStream is the records a run produces and what they must come to.
type chaosStream struct {
	records  []*kgo.Record
	exp      workload.Expected
	poison   map[string]int // reason → records injected
	bells    int            // distinct doorbells
	bellDups int
}

func (s chaosStream) poisonTotal() int {
	n := 0
	for _, v := range s.poison {
		n += v
	}
	return n
}

// poisonHeader marks an injected poison record with its reason.
const poisonHeader = "chaos-poison"

// chaosPoison is the catalogue of bad input, minus what needs a partner
// record (conflict) or is applied normally (forged headers).
func chaosPoison() []badInput {
	var out []badInput
	for _, b := range catalogue {
		if b.reason != "" && b.reason != "conflict" {
			out = append(out, b)
		}
	}
	return out
}

// buildChaosStream generates the workload and injects poison (in the
// second half, where every account is open, keyed to an account so it
// shares that account's partition) and doorbells (anywhere, some twice).
func buildChaosStream(t *testing.T, p chaosProfile, topic string, seed uint64) chaosStream {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	gen, exp := workloadRecords(t, topic, workload.Config{Accounts: p.accounts, Events: p.events, Duplicates: 0.1, OutOfOrder: 0.1, Seed: seed})
	accounts := make([]string, 0, len(exp.Accounts))
	for id := range exp.Accounts {
		accounts = append(accounts, id)
	}
	sort.Strings(accounts)
	s := chaosStream{exp: exp, poison: map[string]int{}}
	kinds := chaosPoison()
	var bells []*kgo.Record
	for i, r := range gen {
		s.records = append(s.records, r)
		if i > len(gen)/2 && rng.IntN(p.poisonEvery) == 0 {
			b := kinds[rng.IntN(len(kinds))]
			pr := b.record(topic, accounts[rng.IntN(len(accounts))])
			// Each injection is its own event: the catalogue's fixed ids get a
			// unique prefix.
			pr.Value = []byte(strings.Replace(string(pr.Value), `"id":"x`, fmt.Sprintf(`"id":"p%d-x`, i), 1))
			// Marked for the verifier, which counts poison in the log as it
			// is (a record re-sent after a broker restart is there twice).
			// The worker ignores headers it does not know.
			pr.Headers = append(pr.Headers, kgo.RecordHeader{Key: poisonHeader, Value: []byte(b.reason)})
			s.records = append(s.records, pr)
			s.poison[b.reason]++
		}
		if rng.IntN(p.bellEvery) == 0 {
			bell := cetest.Record(topic, fmt.Sprintf("bell-%d-%d", seed, i), "account.refreshed", accounts[rng.IntN(len(accounts))], 0, nil)
			s.records = append(s.records, bell)
			bells = append(bells, bell)
			s.bells++
		}
		if len(bells) > 0 && rng.IntN(p.bellEvery*10) == 0 {
			again := bells[rng.IntN(len(bells))]
			s.records = append(s.records, &kgo.Record{Topic: topic, Key: again.Key, Value: again.Value, Headers: again.Headers})
			s.bellDups++
		}
	}
	return s
}

// chaosSource is the accounts source API: it answers every account's final
// state, so a doorbell converges on what the stream converges on.
func chaosSource(t *testing.T, exp workload.Expected) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/accounts/")
		a, ok := exp.Accounts[id]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "version": a.Version, "name": a.Name,
			"email": a.Email, "plan": a.Plan, "status": a.Status})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/accounts"
}

// fleet runs worker processes in slots and restarts each one that ends,
// counting how it ended.
type fleet struct {
	t   *testing.T
	env []string
	// slotEnv is added to env for slot i's processes: its own links.
	slotEnv [][]string
	mu      sync.Mutex
	slot    []*proc
	arm     []string // the crash point the slot's next process gets
	// ended: every process that ended, for the figures.
	kills       map[string]int
	cleanStops  int
	failedStart int
	ended       []*proc
	stopped     bool
	settling    map[*proc]bool
	wg          sync.WaitGroup
}

func newFleet(t *testing.T, env []string, slotEnv [][]string) *fleet {
	n := len(slotEnv)
	f := &fleet{t: t, env: env, slotEnv: slotEnv, slot: make([]*proc, n), arm: make([]string, n), kills: map[string]int{}, settling: map[*proc]bool{}}
	for i := range n {
		f.slot[i] = f.start(i)
	}
	f.wg.Add(1)
	go f.supervise()
	return f
}

func (f *fleet) start(i int) *proc {
	extra := []string{}
	if f.arm[i] != "" {
		extra = append(extra, crashpoint.EnvVar+"="+f.arm[i])
		f.arm[i] = ""
	}
	return start(f.t, append(append(append([]string{}, f.env...), f.slotEnv[i]...), extra...), "run")
}

// classify counts how p ended.
func (f *fleet) classify(p *proc) {
	f.ended = append(f.ended, p)
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		point := killRandom
		if _, after, ok := strings.Cut(p.stderr.String(), "crashpoint: killing the process at "); ok {
			point = strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
		}
		f.kills[point]++
	case p.cmd.ProcessState.ExitCode() == 0:
		f.cleanStops++
	default:
		// A worker starting while the broker or the database is down exits
		// non-zero by design (it names the unreachable service).
		f.failedStart++
	}
}

func (f *fleet) supervise() {
	defer f.wg.Done()
	for {
		time.Sleep(200 * time.Millisecond)
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return
		}
		for i, p := range f.slot {
			if p.exited() {
				f.classify(p)
				// A worker that ended armed but not at its point (it could not
				// start while a service was down, or a fault stopped it)
				// passes the point on to the next one, unless the run is
				// settling.
				if point := armedPoint(p); point != "" && !f.settling[p] && !strings.Contains(p.stderr.String(), "crashpoint: killing the process at ") {
					f.arm[i] = point
				}
				f.slot[i] = f.start(i)
			}
		}
		f.mu.Unlock()
	}
}

// unarmed picks a slot whose worker waits for no crash point, so a random
// kill does not pre-empt one (i when every slot is armed).
func (f *fleet) unarmed(rng *rand.Rand, i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var free []int
	for j, p := range f.slot {
		if !armed(p) {
			free = append(free, j)
		}
	}
	if len(free) == 0 {
		return i
	}
	return free[rng.IntN(len(free))]
}

func (f *fleet) killCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, k := range f.kills {
		n += k
	}
	return n
}

func (f *fleet) signal(i int, sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.slot[i].cmd.Process.Signal(sig)
}

// armAndRestart stops slot i cleanly and restarts it armed to crash at
// point (its n-th hit).
func (f *fleet) armAndRestart(i int, point string, n int) {
	f.mu.Lock()
	f.arm[i] = fmt.Sprintf("%s:%d", point, n)
	p := f.slot[i]
	f.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

func armed(p *proc) bool { return armedPoint(p) != "" }

// armedPoint is the point:n p was started with, "" when none.
func armedPoint(p *proc) string {
	for _, e := range p.cmd.Env {
		if v, ok := strings.CutPrefix(e, crashpoint.EnvVar+"="); ok {
			return v
		}
	}
	return ""
}

// settle stops, once, every process still armed with a crash point (the
// supervisor restarts it unarmed), and reports how many are left.
func (f *fleet) settle() (stillArmed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.slot {
		if p.exited() || !armed(p) {
			continue
		}
		stillArmed++
		if !f.settling[p] {
			f.settling[p] = true
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	return stillArmed
}

// stop ends supervision and stops every worker cleanly.
func (f *fleet) stop() {
	f.mu.Lock()
	f.stopped = true
	procs := slices.Clone(f.slot)
	f.mu.Unlock()
	f.wg.Wait()
	for _, p := range procs {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		p.wait(f.t, time.Minute)
		f.classify(p)
	}
}

// rebalances counts assignments across every worker that ran: a burst of
// "partition assigned" lines in one process is one rebalance it took part
// in.
func rebalances(procs []*proc) int {
	n := 0
	for _, p := range procs {
		var last time.Time
		for _, l := range parseLogLines(p.stderr.String()) {
			if l.Msg != "partition assigned" {
				continue
			}
			if l.Time.Sub(last) > 100*time.Millisecond {
				n++
			}
			last = l.Time
		}
	}
	return n
}

// versionWatch samples account versions and counts any that went down.
func versionWatch(db pgtest.DB) (stop func() (regressions int, samples int)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	seen := map[string]int64{}
	regressions, samples := 0, 0
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := db.Pool.Query(ctx, `SELECT id, version FROM accounts`)
			if err == nil {
				for rows.Next() {
					var id string
					var v int64
					if rows.Scan(&id, &v) == nil {
						if v < seen[id] {
							regressions++
						}
						seen[id] = v
					}
				}
				rows.Close()
				if rows.Err() == nil {
					samples++
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return func() (int, int) {
		cancel()
		<-done
		return regressions, samples
	}
}

func TestChaos(t *testing.T) {
	name := os.Getenv("EFFECTIVELY_CHAOS_PROFILE")
	if name == "" {
		name = "short"
	}
	p, ok := chaosProfiles[name]
	require.True(t, ok, "EFFECTIVELY_CHAOS_PROFILE=%s: want short or default", name)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("EFFECTIVELY_CHAOS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "EFFECTIVELY_CHAOS_SEED")
	}
	t.Logf("chaos profile %s, seed %d (EFFECTIVELY_CHAOS_SEED=%d reproduces the schedule)", p.name, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 11))

	// Every worker slot reaches the broker and PostgreSQL through links of
	// its own, and the targets through one link each; joiners and the
	// harness go direct.
	lab := newNetLab(t)
	brokers, perSlot, kafkaLinks, kafkaStack := ownKafkaProxied(t, lab, p.workers)
	pgPort, pgStack := ownPostgres(t)
	db := pgtest.NewOn(t, fmt.Sprintf("postgres://effectively:effectively@127.0.0.1:%s/effectively?sslmode=disable", pgPort), accounts.Migrations())
	topic, group := "chaos."+strconv.FormatUint(seed, 36), "chaos-group"
	adm := kadmOn(t, brokers)
	created, err := adm.CreateTopic(context.Background(), p.partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, created.Err)

	stream := buildChaosStream(t, p, topic, seed)
	crm, crmDirect := newEffectsServer(t, false, nil)
	mail, mailDirect := newEffectsServer(t, true, nil)
	crmLink := lab.link(t, "crm", strings.TrimPrefix(crmDirect, "http://"))
	mailLink := lab.link(t, "mail", strings.TrimPrefix(mailDirect, "http://"))
	crmURL, mailURL := "http://"+crmLink.Addr, "http://"+mailLink.Addr
	var pgLinks []*link
	slotEnv := make([][]string, p.workers)
	for i := range p.workers {
		k := lab.link(t, fmt.Sprintf("pg-%d", i), "127.0.0.1:"+pgPort)
		pgLinks = append(pgLinks, k)
		slotEnv[i] = []string{"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(perSlot[i], ","), "EFFECTIVELY_POSTGRES_URL=" + via(t, db.URL, k, "8s")}
	}
	links := append(append(append([]*link{}, kafkaLinks...), pgLinks...), crmLink, mailLink)
	env := []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group, "EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + via(t, db.URL, nil, "8s"), "EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s", "EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
		"EFFECTIVELY_RETRY_MAX=2s", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100",
		"EFFECTIVELY_CONSUMER_MAX_PAYLOAD_BYTES=4096",
		"EFFECTIVELY_SOURCES_ACCOUNTS_URL=" + chaosSource(t, stream.exp),
		"EFFECTIVELY_EFFECTS_CRM_URL=" + crmURL, "EFFECTIVELY_EFFECTS_MAIL_URL=" + mailURL + "/welcome",
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=2s", "EFFECTIVELY_OUTBOX_LEASE_GRACE=1s", "EFFECTIVELY_OUTBOX_CONCURRENCY=4",
		// A half-open database link is given up after 10 s (statement_timeout 8 s).
		"EFFECTIVELY_POSTGRES_ANSWER_TIMEOUT=10s",
		// Claims generations rotate every few seconds under the faults (the
		// retention stays 14 days: nothing is dropped within the run).
		"EFFECTIVELY_DEDUPE_GENERATION_INTERVAL=5s", "EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s",
	}
	f := newFleet(t, env, slotEnv)
	stopWatch := versionWatch(db)

	// The producer, paced, runs beside the faults.
	producing := produceThroughRestarts(brokers, stream.records, p.rate, p.guard)
	// A stall is time no position moved while records kept arriving: the
	// watch stops counting when the producer is done.
	stall := watchStall(db, group, topic)
	produced := make(chan error, 1)
	go func() {
		err := <-producing
		stall.stop()
		produced <- err
	}()

	// The fault schedule, dealt from the seed.
	var plan []string
	// A quarter at random, the rest at crash points; random kills make up
	// for points that are not reached in time.
	for range p.kills / 4 {
		plan = append(plan, "kill")
	}
	for i := range p.kills - p.kills/4 {
		plan = append(plan, "crash:"+killPoints[i%len(killPoints)])
	}
	for range p.joins {
		plan = append(plan, "join")
	}
	for range p.brokerRestarts {
		plan = append(plan, "broker")
	}
	for range p.pgRestarts {
		plan = append(plan, "postgres")
	}
	for range p.pauses {
		plan = append(plan, "pause")
	}
	for range p.network {
		for _, k := range netKinds {
			plan = append(plan, "net:"+k)
		}
	}
	plan = append(plan, "clean", "clean")
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	plan = earlyOutboxFaults(plan)
	t.Logf("fault schedule (%d): %s", len(plan), strings.Join(plan, " "))

	var joiners []*proc
	brokerRestarts, pgRestarts, pauses := 0, 0, 0
	net := &netFaults{injected: map[string]int{}}
	began := time.Now()
	for _, action := range plan {
		time.Sleep(p.interval)
		// Faults land on workers that wait for no crash point, so an armed
		// one lives until its point comes.
		i := f.unarmed(rng, rng.IntN(p.workers))
		switch {
		case action == "kill":
			f.signal(f.unarmed(rng, i), syscall.SIGKILL)
		case strings.HasPrefix(action, "crash:"):
			f.armAndRestart(i, strings.TrimPrefix(action, "crash:"), 1+rng.IntN(2))
		case action == "clean":
			f.signal(i, syscall.SIGTERM)
		case action == "join":
			j := start(t, env, "run")
			joiners = append(joiners, j)
			time.Sleep(p.interval)
			_ = j.cmd.Process.Signal(syscall.SIGTERM)
		case action == "broker":
			kafkaStack("down", "kafka")
			time.Sleep(3 * time.Second)
			kafkaStack("up", "kafka")
			brokerRestarts++
		case action == "postgres":
			pgStack("down", "pg")
			time.Sleep(3 * time.Second)
			pgStack("up", "pg")
			pgRestarts++
		case strings.HasPrefix(action, "net:"):
			kind := strings.TrimPrefix(action, "net:")
			net.inject(t, kind, netTarget{i: i, kafka: kafkaLinks[i], pg: pgLinks[i], crm: crmLink, mail: mailLink,
				crmServer: crm, mailServer: mail, links: links, f: f, rng: rng})
		case action == "pause":
			// Past its session: the group moves its partitions on; when it
			// wakes it must do no harm.
			f.signal(i, syscall.SIGSTOP)
			time.Sleep(12 * time.Second)
			f.signal(i, syscall.SIGCONT)
			pauses++
		}
	}
	// A crash point may not be reached before its worker is killed another
	// way: random kills make up the count.
	for f.killCount() < p.kills {
		time.Sleep(p.interval)
		f.signal(f.unarmed(rng, rng.IntN(p.workers)), syscall.SIGKILL)
		time.Sleep(500 * time.Millisecond) // the supervisor sees the death
	}
	select {
	case err := <-produced:
		require.NoError(t, err)
	case <-time.After(p.guard):
		t.Fatalf("the producer did not finish within %s", p.guard)
	}
	faultsEnd := time.Now()

	for _, k := range links {
		k.heal()
	}

	// Settle: no crash left armed, every record processed.
	waitUntil(t, "no worker left armed", 2*time.Minute, func(context.Context) bool { return f.settle() == 0 })
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	var total int64
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset; total += o.Offset })
	r := &rig{db: db, topic: topic, group: group, brokers: brokers, env: env}
	waitUntil(t, "every record processed", p.guard, func(context.Context) bool {
		pos, err := r.positions(context.Background())
		if err != nil {
			return false
		}
		for part, o := range end {
			if pos[part] < o {
				return false
			}
		}
		return true
	})
	drain := time.Since(faultsEnd)
	inLog := readLog(t, brokers, topic, total)
	opened := openedAccounts(stream.exp)
	waitUntil(t, "the outbox settled", 2*time.Minute, func(context.Context) bool {
		return db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
	})

	// The operator settles mails left in doubt against the mail log.
	unknown := r.outboxIntents(t, "--state", "unknown")
	m := mail.snapshot()
	settleMailsInDoubt(t, env, unknown, m.Received)
	waitUntil(t, "the resent mails delivered", 2*time.Minute, func(context.Context) bool {
		return db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
	})
	regressions, samples := stopWatch()
	f.stop()
	for _, j := range joiners {
		j.wait(t, time.Minute)
	}

	// The verdict, from the produced events alone.
	rep, err := workload.VerifyEffects(context.Background(), db.Pool, stream.exp)
	require.NoError(t, err)
	wantGood := int64(stream.exp.Distinct + stream.bells)
	good := db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition IN ('applied', 'stale')`)
	wantLedger := int64(stream.exp.ByType[workload.TypeLedgerCredited] + stream.exp.ByType[workload.TypeLedgerDebited])
	ledger := db.Count(t, `SELECT count(*) FROM ledger_entries`)
	deadLetters := db.Count(t, `SELECT count(*) FROM dead_letters`)
	parked := db.Count(t, `SELECT count(*) FROM parked_events`)
	crmSnap, mailSnap := crm.snapshot(), mail.snapshot()
	crmDup, mailDup, mailMissing := 0, len(mailSnap.Overflow), 0
	for _, a := range opened {
		if crmSnap.KeysByAccount[a] > 1 {
			crmDup++
		}
		if mailSnap.Received[a] == 0 {
			mailMissing++
		}
	}
	crmKeys := len(crmSnap.Keys)
	if _, ok := crmSnap.Keys[""]; ok {
		crmDup++ // a call without its key
	}
	killTotal := 0
	for _, n := range f.kills {
		killTotal += n
	}
	all := append(slices.Clone(f.ended), joiners...)
	rebal := rebalances(all)
	rotations := db.Count(t, `SELECT count(*) FROM claim_generations WHERE opened_at IS NOT NULL`) - 1
	commitsDropped := int64(0)
	for _, k := range pgLinks {
		commitsDropped += k.commitAnswersDropped()
	}
	fenced, retried := fencedIn(all...), retriedIn(all...)
	zombies, zombieLongest := zombieWindows(all)
	netShort := 0
	for _, k := range netKinds {
		netShort += max(p.network-net.injected[k], 0)
	}

	type figure struct {
		name  string
		value any
		bad   bool
	}
	figures := []figure{
		{"seed", seed, false},
		{"records in the log (re-sent after broker restarts)", fmt.Sprintf("%d (%d)", total, total-int64(len(stream.records))), inLog.records != total},
		{"distinct events (generated + doorbells)", wantGood, false},
		{"duplicates injected (generated + doorbells)", stream.exp.Duplicates + stream.bellDups, false},
		{"disorder injected", stream.exp.OutOfOrder, false},
		{"doorbells", stream.bells, false},
		{"poison injected", fmt.Sprintf("%d %v", stream.poisonTotal(), stream.poison), false},
		{"kills", fmt.Sprintf("%d %v", killTotal, f.kills), killTotal < p.kills},
		{"clean stops / failed starts", fmt.Sprintf("%d / %d", f.cleanStops, f.failedStart), false},
		{"members joined and left", len(joiners), false},
		{"rebalances observed", rebal, rebal < p.rebalances},
		{"broker restarts", brokerRestarts, brokerRestarts < p.brokerRestarts},
		{"postgres restarts", pgRestarts, pgRestarts < p.pgRestarts},
		{"paused members", pauses, pauses < p.pauses},
		{"claims generations opened (rotations)", rotations, rotations < 2},
		{"network faults injected", fmt.Sprintf("%d %v", net.total(), net.injected), netShort > 0},
		{"zombie windows (a member held partitions another owned)", fmt.Sprintf("%d, longest %s", zombies, zombieLongest.Round(100*time.Millisecond)), zombies < p.network},
		{"COMMIT answers dropped (batches in doubt)", commitsDropped, commitsDropped < int64(p.network)},
		{"target requests whose answer was dropped", net.outboxDropped, net.outboxDropped < p.network},
		{"redone batches (retries logged)", retried, false},
		{"records fenced (late work refused by the position)", fenced, false},
		{"longest stall while records arrived (no position moved)", stall.longest().Round(100 * time.Millisecond), false},
		{"effects applied (claims applied/stale)", good, false},
		{"ledger entries", fmt.Sprintf("%d (want %d)", ledger, wantLedger), false},
		{"DUPLICATE EFFECTS (must be 0)", max(ledger-wantLedger, 0) + max(good-wantGood, 0), ledger > wantLedger || good > wantGood},
		{"LOST EVENTS (must be 0)", max(wantLedger-ledger, 0) + max(wantGood-good, 0), ledger < wantLedger || good < wantGood},
		{"VERSION REGRESSIONS (must be 0)", fmt.Sprintf("%d (%d samples)", regressions, samples), regressions > 0},
		{"state problems (must be none)", len(rep.Problems), len(rep.Problems) > 0},
		{"dead letters (must equal poison in the log)", fmt.Sprintf("%d (poison records in the log %d)", deadLetters, inLog.poison), deadLetters != inLog.poison},
		{"parked at end (must be 0)", parked, parked != 0},
		{"CRM keys (must equal opened accounts)", fmt.Sprintf("%d (opened %d)", crmKeys, len(opened)), crmKeys != len(opened)},
		{"DUPLICATE CRM KEYS (must be 0)", crmDup, crmDup > 0},
		{"DUPLICATE MAILS (must be 0)", mailDup, mailDup > 0},
		{"mails in doubt, resolved", len(unknown), false},
		{"missing mails after resolve (must be 0)", mailMissing, mailMissing > 0},
		{"fault phase / drain time", fmt.Sprintf("%s / %s", faultsEnd.Sub(began).Round(time.Second), drain.Round(100*time.Millisecond)), false},
	}
	var b strings.Builder
	violations := 0
	fmt.Fprintf(&b, "chaos %s:\n", p.name)
	for _, fg := range figures {
		mark := ""
		if fg.bad {
			mark = "  <-- VIOLATION"
			violations++
		}
		fmt.Fprintf(&b, "  %-44s %v%s\n", fg.name, fg.value, mark)
	}
	for _, pr := range rep.Problems {
		fmt.Fprintf(&b, "  problem: %s\n", pr)
	}
	fmt.Println(b.String())
	if violations > 0 {
		t.Fatalf("chaos %s: %d violations; reproduce with EFFECTIVELY_CHAOS_SEED=%d EFFECTIVELY_CHAOS_PROFILE=%s", p.name, violations, seed, p.name)
	}
}

// logCount is what the topic holds, read back as it is.
type logCount struct{ records, poison int64 }

// readLog reads the whole topic (read_committed, to the end offsets it was
// given the total of) and counts the records and the marked poison.
func readLog(t *testing.T, brokers []string, topic string, total int64) logCount {
	t.Helper()
	var c logCount
	for _, r := range kafkatest.ReadCommittedFrom(t, brokers, topic, int(total), 3*time.Minute) {
		c.records++
		if slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == poisonHeader }) {
			c.poison++
		}
	}
	return c
}

// netTarget is what a network fault may hit: worker slot i's own links,
// the targets' links and servers, every link (latency), the fleet (a kill
// during a minute of latency).
type netTarget struct {
	i          int
	kafka, pg  *link
	crm, mail  *link
	crmServer  *effectsServer
	mailServer *effectsServer
	links      []*link
	f          *fleet
	rng        *rand.Rand
}

// netFaults counts the network faults a run injected.
type netFaults struct {
	injected      map[string]int
	outboxDropped int
}

func (n *netFaults) total() int {
	sum := 0
	for _, v := range n.injected {
		sum += v
	}
	return sum
}

// inject runs one network fault of kind on x and heals it.
func (n *netFaults) inject(t *testing.T, kind string, x netTarget) {
	t.Helper()
	nth := n.injected[kind]
	n.injected[kind]++
	target, server := x.crm, x.crmServer
	if nth%2 == 1 {
		target, server = x.mail, x.mailServer
	}
	// Faults held on one link for a while, then healed.
	held := map[string]struct {
		on    *link
		apply func(*link)
		hold  time.Duration
	}{
		"kafka-answer":    {x.kafka, (*link).dropAnswers, 3 * time.Second},
		"halfopen-kafka":  {x.kafka, (*link).halfOpen, 10 * time.Second},
		"halfopen-pg":     {x.pg, (*link).halfOpen, 15 * time.Second},
		"halfopen-target": {target, (*link).halfOpen, 10 * time.Second},
		"cut-pg":          {x.pg, (*link).cut, 10 * time.Second},
		"cut-target":      {target, (*link).cut, 10 * time.Second},
	}
	if h, ok := held[kind]; ok {
		h.apply(h.on)
		time.Sleep(h.hold)
		h.on.heal()
		return
	}
	switch kind {
	case "zombie":
		// Cut (even) or half-open (odd) from the broker past its session,
		// its database link kept but slowed, so that it holds fetched
		// records and batches in flight when its partitions move on.
		x.pg.latency(500, 100)
		time.Sleep(4 * time.Second) // it falls behind what it fetched
		if nth%2 == 0 {
			x.kafka.cut()
		} else {
			x.kafka.halfOpen()
		}
		time.Sleep(14 * time.Second)
		x.kafka.heal()
		x.pg.heal()
	case "commit-answer":
		before := x.pg.commitAnswersDropped()
		x.pg.dropCommitAnswers(nth%2 == 1)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && x.pg.commitAnswersDropped() == before; {
			time.Sleep(100 * time.Millisecond)
		}
		x.pg.heal()
	case "outbox-answer":
		// At least 5 s, and until a request has come and lost its answer
		// (up to 30 s): side effects come from account openings, which
		// thin out in the stream's second half.
		before := server.snapshot().requests()
		target.dropAnswers()
		time.Sleep(5 * time.Second)
		for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline) && server.snapshot().requests() == before; {
			time.Sleep(200 * time.Millisecond)
		}
		target.heal()
		n.outboxDropped += server.snapshot().requests() - before
	case "latency":
		for _, k := range x.links {
			k.latency(500, 300)
		}
		time.Sleep(30 * time.Second)
		// A kill in the middle of the slow minute: the restarted worker
		// connects through the slow links.
		x.f.signal(x.f.unarmed(x.rng, x.i), syscall.SIGKILL)
		time.Sleep(30 * time.Second)
		for _, k := range x.links {
			k.heal()
		}
	default:
		t.Fatalf("unknown network fault %q", kind)
	}
}

// retriedIn counts the batches the workers logged as failed and retried.
func retriedIn(procs ...*proc) int {
	n := 0
	for _, p := range procs {
		for _, l := range parseLogLines(p.stderr.String()) {
			if strings.HasPrefix(l.Msg, "applying batch failed; retrying") {
				n++
			}
		}
	}
	return n
}

// stallWatch samples the group's stored positions and keeps the longest
// time none of them moved.
type stallWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	max    time.Duration
}

func watchStall(db pgtest.DB, group, topic string) *stallWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &stallWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var last int64 = -1
		moved := time.Now()
		for ctx.Err() == nil {
			var sum int64
			err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic).Scan(&sum)
			if err == nil {
				if sum != last {
					last, moved = sum, time.Now()
				}
				w.max = max(w.max, time.Since(moved))
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *stallWatch) stop() {
	w.cancel()
	<-w.done
}

// longest is read after stop.

func (w *stallWatch) longest() time.Duration { return w.max }

// zombieWindows counts the pairs of processes in which one still held a
// partition the group had already given to the other, and the longest
// such overlap (from their logs).
func zombieWindows(procs []*proc) (n int, longest time.Duration) {
	logs := make([]string, len(procs))
	for i, p := range procs {
		logs[i] = p.stderr.String()
	}
	for i := range logs {
		for j := i + 1; j < len(logs); j++ { // the overlap is symmetric: once per pair
			if d := ownedTwice(logs[i], logs[j]); d > 0 {
				n++
				longest = max(longest, d)
			}
		}
	}
	return n, longest
}

// earlyOutboxFaults moves the outbox-answer faults into the first third of
// the plan, spread evenly, keeping the rest in order: side effects come from
// account openings, which the workload spreads over the first half of the
// stream only.
func earlyOutboxFaults(plan []string) []string {
	var outbox, rest []string
	for _, a := range plan {
		if a == "net:outbox-answer" {
			outbox = append(outbox, a)
		} else {
			rest = append(rest, a)
		}
	}
	if len(outbox) == 0 {
		return plan
	}
	step := max(1, len(plan)/3/len(outbox))
	out := make([]string, 0, len(plan))
	for i, a := range rest {
		if len(outbox) > 0 && i%step == 0 {
			out = append(out, outbox[0])
			outbox = outbox[1:]
		}
		out = append(out, a)
	}
	return append(out, outbox...)
}
