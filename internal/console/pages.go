package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/status"
)

// maxSelected bounds the dead letters one redrive takes.
const maxSelected = 1000

// fail shows an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, se *session, status int, err error) {
	c.render(w, r, status, "result", se, "Error", resultData{Outcome: OutcomeFailed, Lines: []string{err.Error()}})
}

type overviewData struct {
	Status status.Group
	Chart  Chart
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, se *session) {
	c.render(w, r, http.StatusOK, "overview", se, "Overview", overviewData{Status: status.Read(r.Context(), c.opts.Status, nil), Chart: c.opts.History.Chart()})
}

type deadLettersData struct {
	Letters []deadletter.DeadLetter
	Reason  string
	Topic   string
	Since   string
	All     bool
	Limit   int
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	d := deadLettersData{Reason: q.Get("reason"), Topic: q.Get("topic"), Since: q.Get("since"), All: q.Get("state") == "all", Limit: 500}
	f := deadletter.Filter{Reason: d.Reason, Topic: d.Topic, Unresolved: !d.All, Limit: d.Limit}
	if d.Since != "" {
		dur, err := time.ParseDuration(d.Since)
		if err != nil || dur <= 0 {
			c.fail(w, r, se, http.StatusBadRequest, fmt.Errorf("since %q is not a positive duration such as 24h or 30m", d.Since))
			return
		}
		f.Since = time.Now().Add(-dur)
	}
	ds, err := deadletter.List(r.Context(), c.opts.Pool, f)
	if err != nil {
		c.fail(w, r, se, http.StatusInternalServerError, err)
		return
	}
	d.Letters = ds
	c.render(w, r, http.StatusOK, "deadletters", se, "Dead letters", d)
}

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not an ID", r.PathValue("id"))
	}
	return id, nil
}

func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request, se *session) {
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	ds, err := deadletter.List(r.Context(), c.opts.Pool, deadletter.Filter{ID: id, Limit: 1})
	if err != nil {
		c.fail(w, r, se, http.StatusInternalServerError, err)
		return
	}
	if len(ds) == 0 {
		c.fail(w, r, se, http.StatusNotFound, fmt.Errorf("dead letter %d does not exist", id))
		return
	}
	c.render(w, r, http.StatusOK, "deadletter", se, fmt.Sprintf("Dead letter %d", id), ds[0])
}

// formIDs reads the form's id values.
func formIDs(r *http.Request) ([]int64, error) {
	if err := r.ParseForm(); err != nil {
		return nil, err
	}
	var ids []int64
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not an ID", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (c *Console) redrive(w http.ResponseWriter, r *http.Request, se *session) {
	ids, err := formIDs(r)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	if len(ids) == 0 {
		c.fail(w, r, se, http.StatusBadRequest, errors.New("no dead letter selected: tick the ones to redrive"))
		return
	}
	if len(ids) > maxSelected {
		c.fail(w, r, se, http.StatusBadRequest, fmt.Errorf("%d dead letters selected: redrive at most %d at once (or use the CLI's dlq redrive with a filter)", len(ids), maxSelected))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		var items []string
		fields := []field{{"confirm", "yes"}}
		for _, id := range ids {
			fields = append(fields, field{"id", strconv.FormatInt(id, 10)})
			ds, err := deadletter.List(r.Context(), c.opts.Pool, deadletter.Filter{ID: id, Limit: 1})
			switch {
			case err != nil:
				c.fail(w, r, se, http.StatusInternalServerError, err)
				return
			case len(ds) == 0:
				items = append(items, fmt.Sprintf("%d: does not exist", id))
			default:
				d := ds[0]
				state := "unresolved"
				if d.Resolution != nil {
					state = "already resolved (" + *d.Resolution + "): nothing will be done"
				}
				items = append(items, fmt.Sprintf("%d: %s/%d@%d, %s, %s", d.ID, d.Topic, d.Partition, d.Offset, d.Reason, state))
			}
		}
		c.render(w, r, http.StatusOK, "confirm", se, "Redrive dead letters?", confirmData{
			Consequence: []string{
				fmt.Sprintf("Each of these %d dead letters is applied again through the same claim as the worker (as the CLI's dlq redrive does), one transaction each:", len(ids)),
				"• one whose cause is fixed is applied once and marked resolved (applied, stale or parked);",
				"• one whose event was applied since is marked resolved as a duplicate: nothing applies twice;",
				"• one that fails again stays a dead letter, with the new error and one more attempt.",
				"Each redrive is recorded in the operator-action log under your name.",
			},
			Items: items, Action: Prefix + "dead-letters/redrive", Fields: fields,
			Button: fmt.Sprintf("Redrive %d dead letter(s)", len(ids)), Back: Prefix + "dead-letters",
		})
		return
	}
	res := resultData{Back: Prefix + "dead-letters", BackTo: "Dead letters", Outcome: OutcomeOK}
	resolved := 0
	for _, id := range ids {
		rr, err := c.opts.Redrive(r.Context(), id)
		target := fmt.Sprintf("dead letter %d", id)
		outcome, result := OutcomeOK, ""
		switch {
		case err != nil:
			outcome, result = OutcomeFailed, err.Error()
		case rr.Already:
			result = "already resolved (" + rr.Resolution + "): nothing done"
		case rr.Resolution != "":
			resolved++
			result = "resolved: " + rr.Resolution
		default:
			outcome, result = OutcomeFailed, "still dead: "+rr.Reason+": "+rr.Error
		}
		if outcome != OutcomeOK {
			res.Outcome = outcome
		}
		if err := c.record(r.Context(), se, "dlq.redrive", target, outcome, result); err != nil {
			res.Lines = append(res.Lines, "The action log could not record this: "+err.Error())
		}
		res.Rows = append(res.Rows, resultRow{Target: target, Outcome: outcome, Result: result})
	}
	res.Lines = append([]string{fmt.Sprintf("%d of %d redriven dead letters resolved.", resolved, len(ids))}, res.Lines...)
	c.render(w, r, http.StatusOK, "result", se, "Redrive", res)
}

type parkedData struct {
	Events   []pipeline.ParkedEvent
	Resource string
	EventKey string
}

func (c *Console) parked(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	d := parkedData{Resource: q.Get("resource"), EventKey: q.Get("event_key")}
	ps, err := pipeline.ListParked(r.Context(), c.opts.Pool, pipeline.ParkedFilter{Resource: d.Resource, EventKey: d.EventKey, Limit: 500})
	if err != nil {
		c.fail(w, r, se, http.StatusInternalServerError, err)
		return
	}
	d.Events = ps
	c.render(w, r, http.StatusOK, "parked", se, "Parked", d)
}

func parkedTarget(f pipeline.ParkedFilter) string {
	var parts []string
	if f.Resource != "" {
		parts = append(parts, "resource "+f.Resource)
	}
	if f.EventKey != "" {
		parts = append(parts, "event "+f.EventKey)
	}
	if len(parts) == 0 {
		return "every parked event"
	}
	return strings.Join(parts, ", ")
}

func (c *Console) parkedRelease(w http.ResponseWriter, r *http.Request, se *session) {
	f := pipeline.ParkedFilter{Resource: r.PostFormValue("resource"), EventKey: r.PostFormValue("event_key")}
	n, err := pipeline.RetryNow(r.Context(), c.opts.Pool, f)
	result := fmt.Sprintf("%d parked events are due now; a running worker's sweeper releases those whose prerequisite exists", n)
	if err != nil {
		result = err.Error()
	}
	c.finish(w, r, se, "parked.release", parkedTarget(f), err, result, Prefix+"parked", "Parked")
}

func (c *Console) parkedDrop(w http.ResponseWriter, r *http.Request, se *session) {
	f := pipeline.ParkedFilter{Resource: r.PostFormValue("resource"), EventKey: r.PostFormValue("event_key")}
	why := strings.TrimSpace(r.PostFormValue("reason"))
	if f.Resource == "" && f.EventKey == "" {
		c.fail(w, r, se, http.StatusBadRequest, errors.New("drop needs a resource or an event key"))
		return
	}
	if why == "" {
		c.fail(w, r, se, http.StatusBadRequest, errors.New("drop needs a reason: it is recorded in each dead letter"))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		ps, err := pipeline.ListParked(r.Context(), c.opts.Pool, pipeline.ParkedFilter{Resource: f.Resource, EventKey: f.EventKey, Limit: 100})
		if err != nil {
			c.fail(w, r, se, http.StatusInternalServerError, err)
			return
		}
		var items []string
		for _, p := range ps {
			items = append(items, fmt.Sprintf("%s %s (%s/%d@%d), %d attempts", p.Resource, p.Type, p.Topic, p.Partition, p.Offset, p.Attempts))
		}
		c.render(w, r, http.StatusOK, "confirm", se, "Drop parked events?", confirmData{
			Consequence: []string{
				fmt.Sprintf("The parked events of %s stop waiting for their prerequisite: each becomes a dead letter with reason dropped and the error %q (as the CLI's parked drop does).", parkedTarget(f), why),
				"Their effects are not applied. A dead letter can be redriven later, from the Dead letters page, once the prerequisite exists.",
			},
			Items: items, Action: Prefix + "parked/drop",
			Fields: []field{{"confirm", "yes"}, {"resource", f.Resource}, {"event_key", f.EventKey}, {"reason", why}},
			Button: "Drop and dead-letter them", Back: Prefix + "parked",
		})
		return
	}
	n, err := pipeline.DropParked(r.Context(), c.opts.Pool, f, why)
	result := fmt.Sprintf("%d parked events dead-lettered (reason dropped): %s", n, why)
	if err != nil {
		result = err.Error()
	}
	c.finish(w, r, se, "parked.drop", parkedTarget(f), err, result, Prefix+"parked", "Parked")
}

// finish records an action and shows its outcome.
func (c *Console) finish(w http.ResponseWriter, r *http.Request, se *session, action, target string, err error, result, back, backTo string) {
	outcome := outcomeOf(err)
	res := resultData{Outcome: outcome, Lines: []string{result}, Back: back, BackTo: backTo}
	if rerr := c.record(r.Context(), se, action, target, outcome, result); rerr != nil {
		res.Lines = append(res.Lines, "The action log could not record this: "+rerr.Error())
	}
	status := http.StatusOK
	switch outcome {
	case OutcomeRefused:
		status = http.StatusConflict
	case OutcomeFailed:
		status = http.StatusInternalServerError
	}
	c.render(w, r, status, "result", se, target, res)
}

type outboxData struct {
	Intents []outbox.Stored
	Counts  map[string]int64
	States  []string
	State   string
}

func (c *Console) outbox(w http.ResponseWriter, r *http.Request, se *session) {
	d := outboxData{State: r.URL.Query().Get("state"), Counts: map[string]int64{}}
	for _, st := range outbox.States {
		d.States = append(d.States, string(st))
	}
	is, err := outbox.List(r.Context(), c.opts.Pool, outbox.Filter{State: outbox.State(d.State), Limit: 500})
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, outbox.ErrBadFilter) {
			status = http.StatusBadRequest
		}
		c.fail(w, r, se, status, err)
		return
	}
	counts, err := outbox.Counts(r.Context(), c.opts.Pool)
	if err != nil {
		c.fail(w, r, se, http.StatusInternalServerError, err)
		return
	}
	for i := range is {
		is[i].Target = config.RedactURL(is[i].Target)
	}
	for st, n := range counts {
		d.Counts[string(st)] = n
	}
	d.Intents = is
	c.render(w, r, http.StatusOK, "outbox", se, "Outbox", d)
}

func (c *Console) intent(w http.ResponseWriter, r *http.Request, se *session) {
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	s, err := outbox.Get(r.Context(), c.opts.Pool, id)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, outbox.ErrNotFound) {
			status = http.StatusNotFound
		}
		c.fail(w, r, se, status, err)
		return
	}
	s.Target = config.RedactURL(s.Target)
	c.render(w, r, http.StatusOK, "intent", se, fmt.Sprintf("Outbox intent %d", id), s)
}

func (c *Console) resolve(w http.ResponseWriter, r *http.Request, se *session) {
	id, err := pathID(r)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	action := outbox.Action(r.PostFormValue("action"))
	if action != outbox.ResolveSent && action != outbox.ResolveResend {
		c.fail(w, r, se, http.StatusBadRequest, fmt.Errorf("action %q is neither sent nor resend", action))
		return
	}
	err = outbox.Resolve(r.Context(), c.opts.Pool, id, action)
	result := fmt.Sprintf("intent %d marked sent: nothing was called", id)
	if action == outbox.ResolveResend {
		result = fmt.Sprintf("intent %d queued: a running worker's dispatcher delivers it once", id)
	}
	if err != nil {
		result = err.Error()
		if errors.Is(err, outbox.ErrNotUnknown) {
			err = &RefusedError{err}
		}
	}
	c.finish(w, r, se, "outbox.resolve."+string(action), fmt.Sprintf("intent %d", id), err, result, Prefix+"outbox", "Outbox")
}

func (c *Console) retry(w http.ResponseWriter, r *http.Request, se *session) {
	ids, err := formIDs(r)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	state := outbox.State(r.PostFormValue("state"))
	if len(ids) == 0 && state == "" {
		c.fail(w, r, se, http.StatusBadRequest, errors.New("retry needs intents, or a state (dead_lettered, suppressed, pending)"))
		return
	}
	n, err := outbox.Retry(r.Context(), c.opts.Pool, outbox.Filter{State: state}, ids...)
	target := "intents " + strings.Trim(fmt.Sprint(ids), "[]")
	if len(ids) == 0 {
		target = "every " + string(state) + " intent"
	}
	result := fmt.Sprintf("%d intents queued: a running worker's dispatcher delivers them", n)
	if err != nil {
		result = err.Error()
		if errors.Is(err, outbox.ErrNotRetryable) || errors.Is(err, outbox.ErrBadFilter) {
			err = &RefusedError{err}
		}
	}
	c.finish(w, r, se, "outbox.retry", target, err, result, Prefix+"outbox", "Outbox")
}

// replayForm is the replay planner's form.
type replayForm struct {
	Group, Topic       string
	Mode               string // since, from_time, offsets, from_start
	Since, FromTime    string
	Offsets            string
	Topics             []string
	Planned            bool
	Plan               replay.Plan
	Members            []replay.Member
	Error              string
	ExecuteFields      []field
	NothingToReprocess bool
}

func (c *Console) readReplayForm(get func(string) string) (replayForm, replay.From, error) {
	f := replayForm{Group: get("group"), Topic: get("topic"), Mode: get("mode"), Since: get("since"), FromTime: get("from_time"),
		Offsets: get("offsets"), Topics: c.opts.Topics}
	if f.Group == "" {
		f.Group = c.opts.Group
	}
	if f.Topic == "" && len(c.opts.Topics) > 0 {
		f.Topic = c.opts.Topics[0]
	}
	if f.Mode == "" {
		f.Mode = "since"
	}
	var from replay.From
	switch f.Mode {
	case "since":
		d, err := time.ParseDuration(f.Since)
		if err != nil || d <= 0 {
			return f, from, fmt.Errorf("since %q: want a positive duration such as 24h", f.Since)
		}
		from.Time = time.Now().Add(-d)
	case "from_time":
		t, err := time.Parse(time.RFC3339, f.FromTime)
		if err != nil {
			return f, from, fmt.Errorf("from time %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", f.FromTime)
		}
		from.Time = t
	case "offsets":
		offs, err := replay.ParseOffsets(f.Offsets)
		if err != nil {
			return f, from, fmt.Errorf("offsets: %w", err)
		}
		from.Offsets = offs
	case "from_start":
		from.Start = true
	default:
		return f, from, fmt.Errorf("start %q: choose since, from_time, offsets or from_start", f.Mode)
	}
	return f, from, nil
}

func (f replayForm) fields() []field {
	return []field{{"group", f.Group}, {"topic", f.Topic}, {"mode", f.Mode}, {"since", f.Since}, {"from_time", f.FromTime}, {"offsets", f.Offsets}}
}

func (c *Console) replayPage(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	if q.Get("mode") == "" {
		f, _, _ := c.readReplayForm(func(string) string { return "" })
		f.Since = "1h"
		c.render(w, r, http.StatusOK, "replay", se, "Replay planner", f)
		return
	}
	f, from, err := c.readReplayForm(q.Get)
	if err != nil {
		f.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "replay", se, "Replay planner", f)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	plan, members, err := c.opts.ReplayPlan(ctx, f.Group, f.Topic, from)
	if err != nil {
		f.Error = err.Error()
		c.render(w, r, http.StatusOK, "replay", se, "Replay planner", f)
		return
	}
	f.Planned, f.Plan, f.Members = true, plan, members
	f.ExecuteFields = f.fields()
	f.NothingToReprocess = plan.Records == 0
	c.render(w, r, http.StatusOK, "replay", se, "Replay planner", f)
}

func (c *Console) replayExecute(w http.ResponseWriter, r *http.Request, se *session) {
	f, from, err := c.readReplayForm(r.PostFormValue)
	if err != nil {
		c.fail(w, r, se, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	plan, done, err := c.opts.ReplayExecute(ctx, f.Group, f.Topic, from)
	target := fmt.Sprintf("group %s, topic %s, from %s", f.Group, f.Topic, from)
	result := fmt.Sprintf("rewound: PostgreSQL %d partition(s), Kafka %d partition(s); the workers reprocess %d records when started (re-read events are duplicates and fire nothing again)",
		len(done.ResetEpochs), len(done.KafkaCommitted), plan.Records)
	if err != nil {
		result = "refused, nothing changed: " + err.Error()
		if outcomeOf(err) == OutcomeFailed {
			result = "failed: " + err.Error()
		}
	}
	c.finish(w, r, se, "replay.execute", target, err, result, Prefix+"replay?"+encode(f.fields()), "Replay planner")
}

func encode(fs []field) string {
	v := url.Values{}
	for _, f := range fs {
		v.Set(f.Name, f.Value)
	}
	return v.Encode()
}

type auditData struct {
	Topic, From, To string
	Topics          []string
	Report          *audit.Report
	Outcomes        []string
	Error           string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	d := auditData{Topic: q.Get("topic"), From: q.Get("from_time"), To: q.Get("to_time"), Topics: c.opts.Topics, Outcomes: audit.Outcomes}
	if d.Topic == "" {
		if len(c.opts.Topics) > 0 {
			d.Topic = c.opts.Topics[0]
		}
		if q.Get("run") == "" {
			c.render(w, r, http.StatusOK, "audit", se, "Audit", d)
			return
		}
	}
	var from, to time.Time
	var err error
	if d.From != "" {
		if from, err = time.Parse(time.RFC3339, d.From); err != nil {
			d.Error = fmt.Sprintf("from %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", d.From)
		}
	}
	if d.To != "" && d.Error == "" {
		if to, err = time.Parse(time.RFC3339, d.To); err != nil {
			d.Error = fmt.Sprintf("to %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", d.To)
		}
	}
	if d.Error == "" {
		ctx, cancel := context.WithTimeout(r.Context(), 12*time.Second)
		defer cancel()
		rep, err := c.opts.Audit(ctx, d.Topic, from, to)
		if err != nil {
			d.Error = err.Error()
		} else {
			d.Report = &rep
		}
	}
	c.render(w, r, http.StatusOK, "audit", se, "Audit", d)
}

func (c *Console) actions(w http.ResponseWriter, r *http.Request, se *session) {
	as, err := ListActions(r.Context(), c.opts.Pool, 200)
	if err != nil {
		c.fail(w, r, se, http.StatusInternalServerError, err)
		return
	}
	c.render(w, r, http.StatusOK, "actions", se, "Actions", as)
}
