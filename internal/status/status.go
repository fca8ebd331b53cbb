// Package status reads what a consumer group is doing now, as Kafka, the
// database and the workers themselves see it: the group status that
// `effectively status` prints and the console shows, and the worker's own
// view it serves at /status.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/replay"
)

// Sources are where a group's status is read from.
type Sources struct {
	// Config names the group, its topics, the brokers and http.addr.
	Config config.Config
	// Logger hears the Kafka client's errors.
	Logger *zap.Logger
	// Connect opens a small pool on the database, its error naming the
	// address and the fix.
	Connect func(ctx context.Context) (*pgxpool.Pool, error)
	// Unreachable explains a failed read of the database (address, fix).
	Unreachable func(err error) error
}

// Timeout bounds each source `status` reads (Kafka, PostgreSQL, a
// worker), so one that hangs delays the answer by this much, not forever.
const Timeout = 5 * time.Second

// Group is what `effectively status` shows: the group as Kafka, the
// database and the workers themselves see it. A source that cannot be read
// says why in its Error field; the others are still shown.
type Group struct {
	Group string    `json:"group"`
	At    time.Time `json:"at"`
	// Kafka is "ok" or why the brokers could not be read.
	Kafka string `json:"kafka"`
	// Postgres is "ok" or why the database could not be read (address and
	// fix).
	Postgres string `json:"postgres"`
	// Members are the group's members as the coordinator describes them,
	// with each one's worker view (from its admin server's /status).
	Members []Member `json:"members"`
	// Partitions are every partition of the group's topics.
	Partitions []Partition `json:"partitions"`
	// Parked, DeadLetters and Outbox count what waits in PostgreSQL (absent
	// when it is unreachable).
	Parked      *pipeline.ParkedCounts `json:"parked,omitempty"`
	DeadLetters *deadletter.Counts     `json:"dead_letters,omitempty"`
	Outbox      map[outbox.State]int64 `json:"outbox,omitempty"`
	// Claims is where the claims generations stand.
	Claims *dedupe.GenerationsStatus `json:"claims,omitempty"`
}

// Member is one member of the group.
type Member struct {
	replay.Member
	// Admin is the worker's /status URL that was asked, and AdminError why
	// it did not answer.
	Admin      string `json:"admin,omitempty"`
	AdminError string `json:"admin_error,omitempty"`
	// Worker is the worker's own answer.
	Worker *Worker `json:"worker,omitempty"`
}

// Partition is one partition of the group's topics. Offsets that
// could not be read are absent.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Owner is the member that owns it (its instance ID, else its member
	// ID); empty when unassigned.
	Owner string `json:"owner,omitempty"`
	// Stored is the position in PostgreSQL (authoritative), Committed the
	// group's offset in Kafka (what Kafka's tools and autoscalers read; the
	// owning worker brings it to Stored within seconds, also with no new
	// record), End the last stable offset.
	Stored    *int64 `json:"stored,omitempty"`
	Committed *int64 `json:"committed,omitempty"`
	End       *int64 `json:"end,omitempty"`
	// Lag is End minus the best position known: the stored one, else the
	// worker's, else Kafka's commit.
	Lag *int64 `json:"lag,omitempty"`
	// State, Cause, Error and Since are the owning worker's view (State is
	// "unknown" when no worker answered for it).
	State string    `json:"state"`
	Cause string    `json:"cause,omitempty"`
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"`
}

// Worker is what a worker serves at /status on its admin server: its
// own view of its membership and partitions, which `effectively status`
// shows even while PostgreSQL is unreachable.
type Worker struct {
	// Build and Version name the binary.
	Build   string `json:"build"`
	Version string `json:"version"`
	// Group, InstanceID and ClientID identify the member.
	Group      string `json:"group"`
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id"`
	// Joined: the group has assigned the member at least once; Closing: it
	// is draining after SIGTERM.
	Joined  bool `json:"joined"`
	Closing bool `json:"closing"`
	// Postgres is "ok" or why the worker cannot reach PostgreSQL.
	Postgres string `json:"postgres"`
	// Partitions are the member's partitions as it sees them.
	Partitions []consumer.PartitionStatus `json:"partitions"`
	// At is when the answer was made.
	At time.Time `json:"at"`
}

// Redact hides the credentials of any URL in st's texts. They are redacted
// where they are made; this is the defence at /status, for an error no one
// thought could hold a URL, and for an answer `status` reads from a worker
// of an older version.
func (st *Worker) Redact() {
	st.Postgres = redact.Text(st.Postgres)
	for i := range st.Partitions {
		st.Partitions[i].Error = redact.Text(st.Partitions[i].Error)
	}
}

// Read reads the group's three sources concurrently — Kafka, PostgreSQL,
// the workers' admin servers (workerURLs, else each member's host at the
// port of http.addr) — each within Timeout; a failure is reported in the
// result, never returned.
func Read(ctx context.Context, s Sources, workerURLs []string) Group {
	st := Group{Group: s.Config.Kafka.Group, At: time.Now().UTC(), Kafka: "ok", Postgres: "ok"}
	var (
		wg        sync.WaitGroup
		stored    = map[string]map[int32]dedupe.Position{}
		committed kadm.OffsetResponses
		ends      kadm.ListedOffsets
		members   []replay.Member
	)
	wg.Go(func() {
		var err error
		members, committed, ends, err = kafkaStatus(ctx, s)
		if err != nil {
			st.Kafka = err.Error()
		}
	})
	wg.Go(func() {
		if err := postgresStatus(ctx, s, &st, stored); err != nil {
			st.Postgres = err.Error()
		}
	})
	wg.Wait()

	st.Members = make([]Member, len(members))
	for i, m := range members {
		st.Members[i] = Member{Member: m}
	}
	views := workerViews(ctx, s, &st, workerURLs)

	owners := map[string]string{}
	for _, m := range members {
		owner := m.InstanceID
		if owner == "" {
			owner = m.MemberID
		}
		for t, ps := range m.Partitions {
			for _, p := range ps {
				owners[PartitionKey(t, p)] = owner
			}
		}
	}
	for _, topic := range s.Config.Kafka.Topics {
		parts := map[int32]bool{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic && o.Partition >= 0 {
				parts[o.Partition] = true
			}
		})
		for p := range stored[topic] {
			parts[p] = true
		}
		for _, v := range views {
			if v.Topic == topic {
				parts[v.Partition] = true
			}
		}
		ps := make([]int32, 0, len(parts))
		for p := range parts {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		for _, p := range ps {
			sp := Partition{Topic: topic, Partition: p, Owner: owners[PartitionKey(topic, p)], State: "unknown"}
			if pos, ok := stored[topic][p]; ok {
				sp.Stored = ptr(pos.Next)
			}
			if o, ok := committed.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
				sp.Committed = ptr(o.At)
			}
			if o, ok := ends.Lookup(topic, p); ok && o.Err == nil {
				sp.End = ptr(o.Offset)
			}
			v, seen := views[PartitionKey(topic, p)]
			if seen {
				sp.State, sp.Cause, sp.Error, sp.Since = v.State, v.Cause, v.Error, v.Since
			}
			var pos *int64
			switch {
			case sp.Stored != nil:
				pos = sp.Stored
			case seen && v.Position >= 0:
				pos = ptr(v.Position)
			case sp.Committed != nil:
				pos = sp.Committed
			}
			if pos != nil && sp.End != nil {
				sp.Lag = ptr(max(*sp.End-*pos, 0))
			}
			st.Partitions = append(st.Partitions, sp)
		}
	}
	st.redact()
	return st
}

// redact hides the credentials of any URL in st's texts, before `status`
// prints them or the console shows them (see Worker.Redact).
func (st *Group) redact() {
	st.Kafka, st.Postgres = redact.Text(st.Kafka), redact.Text(st.Postgres)
	for i := range st.Members {
		m := &st.Members[i]
		m.AdminError = redact.Text(m.AdminError)
		if m.Worker != nil {
			m.Worker.Redact()
		}
	}
	for i := range st.Partitions {
		st.Partitions[i].Error = redact.Text(st.Partitions[i].Error)
	}
}

// PartitionKey names a partition as status prints it: topic/partition.
func PartitionKey(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

func ptr[T any](v T) *T { return &v }

// kafkaStatus describes the group and lists its committed and end offsets.
func kafkaStatus(ctx context.Context, s Sources) ([]replay.Member, kadm.OffsetResponses, kadm.ListedOffsets, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	kopts, err := broker.ClientOpts(s.Config.Kafka, s.Logger.Named("kafka"))
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := kgo.NewClient(append(kopts, kgo.WithLogger(kzap.New(s.Logger.Named("kafka"), kzap.Level(kgo.LogLevelError))))...)
	if err != nil {
		return nil, nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	unreachable := func(what string, err error) error {
		return fmt.Errorf("cannot read %s from Kafka at %s (kafka.brokers): %w; fix: check the brokers are up, or set kafka.brokers / %s",
			what, strings.Join(s.Config.Kafka.Brokers, ","), err, config.EnvName("kafka.brokers"))
	}
	members, err := replay.ActiveMembers(ctx, adm, s.Config.Kafka.Group)
	if err != nil {
		return nil, nil, nil, unreachable("the group", err)
	}
	committed, err := adm.FetchOffsets(ctx, s.Config.Kafka.Group)
	if err != nil {
		return members, nil, nil, unreachable("the committed offsets", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, s.Config.Kafka.Topics...)
	if err != nil && len(ends) == 0 {
		return members, committed, nil, unreachable("the end offsets", err)
	}
	return members, committed, ends, nil
}

// postgresStatus reads the stored positions and the counts of what waits.
func postgresStatus(ctx context.Context, s Sources, st *Group, stored map[string]map[int32]dedupe.Position) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	pool, err := s.Connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, t := range s.Config.Kafka.Topics {
		pos, err := dedupe.Positions(ctx, pool, s.Config.Kafka.Group, t, nil)
		if err != nil {
			return s.Unreachable(err)
		}
		stored[t] = pos
	}
	parked, err := pipeline.CountParked(ctx, pool)
	if err != nil {
		return err
	}
	dl, err := deadletter.Count(ctx, pool)
	if err != nil {
		return err
	}
	ob, err := outbox.Counts(ctx, pool)
	if err != nil {
		return err
	}
	claims, err := dedupe.ReadGenerations(ctx, pool)
	if err != nil {
		return err
	}
	st.Parked, st.DeadLetters, st.Outbox, st.Claims = &parked, &dl, ob, &claims
	return nil
}

// workerViews asks each worker's admin server for its view and returns the
// partitions they report, by "topic/partition". Without --worker URLs, a
// member's admin server is its host at the port of http.addr.
func workerViews(ctx context.Context, s Sources, st *Group, urls []string) map[string]consumer.PartitionStatus {
	type target struct {
		member int // index in st.Members, or -1
		url    string
	}
	var targets []target
	if len(urls) > 0 {
		for _, u := range urls {
			targets = append(targets, target{-1, strings.TrimSuffix(u, "/") + "/status"})
		}
	} else if _, port, err := net.SplitHostPort(s.Config.HTTP.Addr); err == nil && port != "0" {
		for i, m := range st.Members {
			host := strings.TrimPrefix(m.Host, "/")
			if host == "" {
				continue
			}
			targets = append(targets, target{i, "http://" + net.JoinHostPort(host, port) + "/status"})
		}
	}
	answers := make([]*Worker, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	client := &http.Client{Timeout: Timeout}
	for i, t := range targets {
		wg.Go(func() { answers[i], errs[i] = fetchWorker(ctx, client, t.url) })
	}
	wg.Wait()
	views := map[string]consumer.PartitionStatus{}
	for i, t := range targets {
		idx := t.member
		if idx < 0 && answers[i] != nil {
			// Match an explicit URL to its member by instance ID.
			for j, m := range st.Members {
				if m.InstanceID != "" && m.InstanceID == answers[i].InstanceID {
					idx = j
				}
			}
		}
		if idx >= 0 {
			st.Members[idx].Admin = t.url
			if errs[i] != nil {
				st.Members[idx].AdminError = errs[i].Error()
			}
			st.Members[idx].Worker = answers[i]
		} else if errs[i] != nil {
			st.Members = append(st.Members, Member{Admin: t.url, AdminError: errs[i].Error()})
		} else {
			st.Members = append(st.Members, Member{Member: replay.Member{InstanceID: answers[i].InstanceID, ClientID: answers[i].ClientID}, Admin: t.url, Worker: answers[i]})
		}
		if answers[i] == nil {
			continue
		}
		for _, p := range answers[i].Partitions {
			views[PartitionKey(p.Topic, p.Partition)] = p
		}
	}
	return views
}

func fetchWorker(ctx context.Context, client *http.Client, url string) (*Worker, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s (is http.addr's port the workers' admin port? an older worker without /status?)", url, resp.Status)
	}
	var ws Worker
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&ws); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return &ws, nil
}
