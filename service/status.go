package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/termsafe"
)

// statusTimeout bounds each source `status` reads (Kafka, PostgreSQL, a
// worker), so one that hangs delays the answer by this much, not forever.
const statusTimeout = 5 * time.Second

// GroupStatus is what `effectively status` shows: the group as Kafka, the
// database and the workers themselves see it. A source that cannot be read
// says why in its Error field; the others are still shown.
type GroupStatus struct {
	Group string    `json:"group"`
	At    time.Time `json:"at"`
	// Kafka is "ok" or why the brokers could not be read.
	Kafka string `json:"kafka"`
	// Postgres is "ok" or why the database could not be read (address and
	// fix).
	Postgres string `json:"postgres"`
	// Members are the group's members as the coordinator describes them,
	// with each one's worker view (from its admin server's /status).
	Members []StatusMember `json:"members"`
	// Partitions are every partition of the group's topics.
	Partitions []StatusPartition `json:"partitions"`
	// Parked, DeadLetters and Outbox count what waits in PostgreSQL (absent
	// when it is unreachable).
	Parked      *pipeline.ParkedCounts `json:"parked,omitempty"`
	DeadLetters *deadletter.Counts     `json:"dead_letters,omitempty"`
	Outbox      map[outbox.State]int64 `json:"outbox,omitempty"`
	// Claims is where the claims generations stand.
	Claims *dedupe.GenerationsStatus `json:"claims,omitempty"`
}

// StatusMember is one member of the group.
type StatusMember struct {
	replay.Member
	// Admin is the worker's /status URL that was asked, and AdminError why
	// it did not answer.
	Admin      string `json:"admin,omitempty"`
	AdminError string `json:"admin_error,omitempty"`
	// Worker is the worker's own answer.
	Worker *WorkerStatus `json:"worker,omitempty"`
}

// StatusPartition is one partition of the group's topics. Offsets that
// could not be read are absent.
type StatusPartition struct {
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

type statusFlags struct {
	asJSON  bool
	watch   time.Duration
	workers []string
}

func newStatusCmd(c *CLI) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what the group is doing now: members, partitions, lag, states, and what waits",
		Long: `Show the consumer group kafka.group as Kafka, PostgreSQL and the workers see it:
the members (instance id, client id, host, partitions); per partition the
position stored in PostgreSQL, Kafka's committed offset, the end offset
(last stable offset), the lag, and the state (running, paused, retrying,
stopped) with its cause as the owning worker reports it; and counts of parked
events, dead letters and outbox intents by state.

The workers' views come from their admin servers (GET /status): each member's
host with the port of http.addr, or the URLs given with --worker. Every source
is read on its own: while PostgreSQL is unreachable, status says so (address
and fix) and still shows Kafka's side and the workers' views. It exits 0 when
it could show the group, 1 when neither Kafka nor PostgreSQL answered.`,
		Example: `  effectively status
  effectively status --json
  effectively status --watch 2s
  effectively status --worker http://10.0.0.7:9090 --worker http://10.0.0.8:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.watch < 0 {
				return usageError{errors.New("--watch must be positive (e.g. 2s)")}
			}
			for {
				st := c.groupStatus(cmd.Context(), f.workers)
				var err error
				if f.asJSON {
					err = c.PrintJSON(st)
				} else {
					if f.watch > 0 {
						fmt.Fprint(c.stdout, "\x1b[H\x1b[2J") // clear the screen between frames
					}
					err = printStatus(c.stdout, st)
				}
				if err != nil {
					return err
				}
				if f.watch == 0 {
					if st.Kafka != "ok" && st.Postgres != "ok" {
						return errors.New("neither Kafka nor PostgreSQL could be read (see above)")
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(f.watch):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON (one document per refresh with --watch)")
	cmd.Flags().DurationVar(&f.watch, "watch", 0, "refresh every DURATION until interrupted (e.g. 2s)")
	cmd.Flags().StringSliceVar(&f.workers, "worker", nil, "a worker's admin server, e.g. http://10.0.0.7:9090 (repeatable; default: each member's host at the port of http.addr)")
	return cmd
}

// groupStatus reads the three sources concurrently; each failure is
// reported in the result, never returned.
func (c *CLI) groupStatus(ctx context.Context, workerURLs []string) GroupStatus {
	st := GroupStatus{Group: c.cfg.Kafka.Group, At: time.Now().UTC(), Kafka: "ok", Postgres: "ok"}
	var (
		wg        sync.WaitGroup
		stored    = map[string]map[int32]dedupe.Position{}
		committed kadm.OffsetResponses
		ends      kadm.ListedOffsets
		members   []replay.Member
	)
	wg.Go(func() {
		var err error
		members, committed, ends, err = c.kafkaStatus(ctx)
		if err != nil {
			st.Kafka = err.Error()
		}
	})
	wg.Go(func() {
		if err := c.postgresStatus(ctx, &st, stored); err != nil {
			st.Postgres = err.Error()
		}
	})
	wg.Wait()

	st.Members = make([]StatusMember, len(members))
	for i, m := range members {
		st.Members[i] = StatusMember{Member: m}
	}
	views := c.workerViews(ctx, &st, workerURLs)

	owners := map[string]string{}
	for _, m := range members {
		owner := m.InstanceID
		if owner == "" {
			owner = m.MemberID
		}
		for t, ps := range m.Partitions {
			for _, p := range ps {
				owners[tpKey(t, p)] = owner
			}
		}
	}
	for _, topic := range c.cfg.Kafka.Topics {
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
			sp := StatusPartition{Topic: topic, Partition: p, Owner: owners[tpKey(topic, p)], State: "unknown"}
			if pos, ok := stored[topic][p]; ok {
				sp.Stored = ptr(pos.Next)
			}
			if o, ok := committed.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
				sp.Committed = ptr(o.At)
			}
			if o, ok := ends.Lookup(topic, p); ok && o.Err == nil {
				sp.End = ptr(o.Offset)
			}
			v, seen := views[tpKey(topic, p)]
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
// prints them or the console shows them (see WorkerStatus.redact).
func (st *GroupStatus) redact() {
	st.Kafka, st.Postgres = redact.Text(st.Kafka), redact.Text(st.Postgres)
	for i := range st.Members {
		m := &st.Members[i]
		m.AdminError = redact.Text(m.AdminError)
		if m.Worker != nil {
			m.Worker.redact()
		}
	}
	for i := range st.Partitions {
		st.Partitions[i].Error = redact.Text(st.Partitions[i].Error)
	}
}

func tpKey(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

func ptr[T any](v T) *T { return &v }

// kafkaStatus describes the group and lists its committed and end offsets.
func (c *CLI) kafkaStatus(ctx context.Context) ([]replay.Member, kadm.OffsetResponses, kadm.ListedOffsets, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	kopts, err := broker.ClientOpts(c.cfg.Kafka, c.log.Named("kafka"))
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := kgo.NewClient(append(kopts, kgo.WithLogger(kzap.New(c.log.Named("kafka"), kzap.Level(kgo.LogLevelError))))...)
	if err != nil {
		return nil, nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	unreachable := func(what string, err error) error {
		return fmt.Errorf("cannot read %s from Kafka at %s (kafka.brokers): %w; fix: check the brokers are up, or set kafka.brokers / %s",
			what, strings.Join(c.cfg.Kafka.Brokers, ","), err, config.EnvName("kafka.brokers"))
	}
	members, err := replay.ActiveMembers(ctx, adm, c.cfg.Kafka.Group)
	if err != nil {
		return nil, nil, nil, unreachable("the group", err)
	}
	committed, err := adm.FetchOffsets(ctx, c.cfg.Kafka.Group)
	if err != nil {
		return members, nil, nil, unreachable("the committed offsets", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, c.cfg.Kafka.Topics...)
	if err != nil && len(ends) == 0 {
		return members, committed, nil, unreachable("the end offsets", err)
	}
	return members, committed, ends, nil
}

// postgresStatus reads the stored positions and the counts of what waits.
func (c *CLI) postgresStatus(ctx context.Context, st *GroupStatus, stored map[string]map[int32]dedupe.Position) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	pool, err := openPool(ctx, c.cfg.Postgres, 1, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, t := range c.cfg.Kafka.Topics {
		pos, err := dedupe.Positions(ctx, pool, c.cfg.Kafka.Group, t, nil)
		if err != nil {
			return postgresUnreachable(c.cfg.Postgres.URL, err)
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
func (c *CLI) workerViews(ctx context.Context, st *GroupStatus, urls []string) map[string]consumer.PartitionStatus {
	type target struct {
		member int // index in st.Members, or -1
		url    string
	}
	var targets []target
	if len(urls) > 0 {
		for _, u := range urls {
			targets = append(targets, target{-1, strings.TrimSuffix(u, "/") + "/status"})
		}
	} else if _, port, err := net.SplitHostPort(c.cfg.HTTP.Addr); err == nil && port != "0" {
		for i, m := range st.Members {
			host := strings.TrimPrefix(m.Host, "/")
			if host == "" {
				continue
			}
			targets = append(targets, target{i, "http://" + net.JoinHostPort(host, port) + "/status"})
		}
	}
	answers := make([]*WorkerStatus, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	client := &http.Client{Timeout: statusTimeout}
	for i, t := range targets {
		wg.Go(func() { answers[i], errs[i] = fetchWorkerStatus(ctx, client, t.url) })
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
			st.Members = append(st.Members, StatusMember{Admin: t.url, AdminError: errs[i].Error()})
		} else {
			st.Members = append(st.Members, StatusMember{Member: replay.Member{InstanceID: answers[i].InstanceID, ClientID: answers[i].ClientID}, Admin: t.url, Worker: answers[i]})
		}
		if answers[i] == nil {
			continue
		}
		for _, p := range answers[i].Partitions {
			views[tpKey(p.Topic, p.Partition)] = p
		}
	}
	return views
}

func fetchWorkerStatus(ctx context.Context, client *http.Client, url string) (*WorkerStatus, error) {
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
	var ws WorkerStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&ws); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return &ws, nil
}

func printStatus(w io.Writer, st GroupStatus) error {
	out := termsafe.NewWriter(w)
	fmt.Fprintf(out, "group %s at %s\n", st.Group, st.At.Format(time.RFC3339))
	if st.Kafka != "ok" {
		fmt.Fprintf(out, "Kafka: %s\n", st.Kafka)
	}
	if st.Postgres != "ok" {
		fmt.Fprintf(out, "PostgreSQL: %s\n", st.Postgres)
	}
	fmt.Fprintf(out, "\n%d member(s)\n", len(st.Members))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tCLIENT\tHOST\tPARTITIONS\tWORKER")
	for _, m := range st.Members {
		var parts []string
		for t, ps := range m.Partitions {
			for _, p := range ps {
				parts = append(parts, tpKey(t, p))
			}
		}
		sort.Strings(parts)
		worker := "-"
		switch {
		case m.Worker != nil:
			worker = "ok"
			if m.Worker.Closing {
				worker = "shutting down"
			}
			if m.Worker.Postgres != "ok" {
				worker += "; postgres: " + oneLine(m.Worker.Postgres, 60)
			}
		case m.AdminError != "":
			worker = "no answer: " + oneLine(m.AdminError, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(m.InstanceID), dash(m.ClientID), dash(m.Host), dash(strings.Join(parts, ",")), worker)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOWNER\tSTORED\tCOMMITTED\tEND\tLAG\tSTATE\tWHY")
	for _, p := range st.Partitions {
		state := p.State
		if p.Cause != "" {
			state += " (" + p.Cause + ")"
		}
		why := "-"
		if p.Error != "" {
			why = oneLine(p.Error, 80)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tpKey(p.Topic, p.Partition), dash(p.Owner),
			num(p.Stored), num(p.Committed), num(p.End), num(p.Lag), state, why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Parked != nil {
		fmt.Fprintf(out, "\nparked: %s", counts(st.Parked.ByState))
		if st.Parked.OldestParkedSeconds > 0 {
			fmt.Fprintf(out, " (oldest parked %s ago)", (time.Duration(st.Parked.OldestParkedSeconds) * time.Second).String())
		}
		fmt.Fprintln(out)
	}
	if st.DeadLetters != nil {
		fmt.Fprintf(out, "dead letters: %d unresolved, %d resolved, %d not yet published", st.DeadLetters.Unresolved, st.DeadLetters.Resolved, st.DeadLetters.Unpublished)
		if len(st.DeadLetters.UnresolvedByReason) > 0 {
			fmt.Fprintf(out, "; unresolved by reason: %s", counts(st.DeadLetters.UnresolvedByReason))
		}
		fmt.Fprintln(out)
	}
	if st.Outbox != nil {
		m := make(map[string]int64, len(st.Outbox))
		for k, v := range st.Outbox {
			m[string(k)] = v
		}
		fmt.Fprintf(out, "outbox intents: %s\n", counts(m))
	}
	if c := st.Claims; c != nil {
		fmt.Fprintf(out, "claims: ~%d kept; generation %d open since %s (%s ago)", c.Claims, c.Open, c.OpenedAt.UTC().Format(time.RFC3339), st.At.Sub(c.OpenedAt).Round(time.Second))
		if c.OldestClosedAt != nil {
			fmt.Fprintf(out, "; %d closed, the oldest closed %s ago (dropped once that is dedupe.retention)", c.Closed, st.At.Sub(*c.OldestClosedAt).Round(time.Second))
		}
		fmt.Fprintln(out)
	}
	return nil
}

func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
