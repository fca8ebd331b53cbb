package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/status"
)

// memberProbeTimeout bounds the look at a member's admin server.
const memberProbeTimeout = 3 * time.Second

// memberProbe is what the admin server at a member's address said.
type memberProbe struct {
	// running: a worker there answered as this very member (its group and
	// instance ID): the member runs.
	running bool
	// unidentified: something answered HTTP there, but not as a worker
	// (an older build without /status, another program): it may be the
	// member, so not even the operator's word removes it.
	unidentified bool
	// seen says what happened, for messages ("http://10.0.0.7:9410/status
	// refused the connection").
	seen string
}

// probeMember asks the admin server at the member's host, on the port of
// http.addr, who it is (GET /status). It proves one thing only: that the
// member runs, when a worker there answers as this group's member with
// this instance ID; an HTTP answer that is not a worker's cannot rule it
// out. Nothing it sees proves the member stopped: a refused
// or unanswered connection means only that nothing listens at that
// address, and the member's admin server may listen on another port (its
// own http.addr), on none (http.addr empty), or behind an address the
// broker does not see (NAT, a proxy); an answer from another process means
// the address is not, or no longer, the member's.
func probeMember(ctx context.Context, group string, m replay.Member, adminAddr string) memberProbe {
	host := strings.TrimPrefix(m.Host, "/")
	_, port, err := net.SplitHostPort(adminAddr)
	switch {
	case err != nil || port == "" || port == "0":
		return memberProbe{seen: "http.addr names no port to probe"}
	case host == "":
		return memberProbe{seen: "the broker reports no host for it"}
	}
	url := "http://" + net.JoinHostPort(host, port) + "/status"
	ctx, cancel := context.WithTimeout(ctx, memberProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return memberProbe{seen: fmt.Sprintf("%s: %v", url, err)}
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return memberProbe{seen: url + " refused the connection"}
	case err != nil:
		return memberProbe{seen: url + " did not answer"}
	}
	defer resp.Body.Close()
	var st status.Worker
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil {
		return memberProbe{unidentified: true, seen: fmt.Sprintf("%s answered %s, not as a worker", url, resp.Status)}
	}
	if st.Group == group && st.InstanceID == m.InstanceID {
		return memberProbe{running: true, seen: url + " answers as it"}
	}
	return memberProbe{seen: fmt.Sprintf("%s answers as another worker (group %s, instance %q)", url, st.Group, st.InstanceID)}
}

// removeStopped removes, before a rewind, the static members proven
// stopped. The broker cannot tell: it lists a stopped static member like a
// running one until kafka.session_timeout passes (measured on Kafka 4.4, in
// both group protocols: same epoch, same assignment), and an address that
// refuses proves nothing (see probeMember). So the proof is the operator's
// statement (--remove-member ID), and the check is the other way round:
// a member whose admin server answers as itself is running and is never
// removed. With --remove-stopped-members every static member is looked
// at, and any that is not named is reported as not proven stopped, with
// the fix; nothing is removed then, so a refusal leaves the group as it
// was.
func (r *replayer) removeStopped(ctx context.Context, f *replayFlags) error {
	members, err := replay.ActiveMembers(ctx, r.adm, f.group)
	if err != nil {
		return err
	}
	var remove, running, unproven, unprovenIDs []string
	named := map[string]bool{}
	for _, id := range f.removeMembers {
		named[id] = true
	}
	for _, m := range members {
		if m.InstanceID == "" || (!named[m.InstanceID] && !f.removeStopped) {
			continue
		}
		p := probeMember(ctx, f.group, m, r.c.cfg.HTTP.Addr)
		switch {
		case p.running:
			running = append(running, fmt.Sprintf("%s (its admin server %s)", m.InstanceID, p.seen))
		case p.unidentified && named[m.InstanceID]:
			running = append(running, fmt.Sprintf("%s (something answers at its address and cannot say whose it is: %s; if it is not this member, wait kafka.session_timeout)", m.InstanceID, p.seen))
		case named[m.InstanceID]:
			remove = append(remove, m.InstanceID)
		default:
			unproven = append(unproven, fmt.Sprintf("%s at %s (%s)", m.InstanceID, strings.TrimPrefix(m.Host, "/"), p.seen))
			unprovenIDs = append(unprovenIDs, m.InstanceID)
		}
		delete(named, m.InstanceID)
	}
	if len(running) > 0 {
		return fmt.Errorf("refusing to remove running member(s) of group %s: %s; nothing was removed; fix: stop them first (a running member would redo its partitions past the rewind)",
			f.group, strings.Join(running, "; "))
	}
	if len(unproven) > 0 {
		slices.Sort(unproven)
		slices.Sort(unprovenIDs)
		flags := make([]string, len(unprovenIDs))
		for i, id := range unprovenIDs {
			flags[i] = "--remove-member " + id
		}
		return fmt.Errorf("not removing static member(s) of group %s that are not proven stopped: %s; nothing was removed. "+
			"The broker lists a stopped static member like a running one until its session expires, and an admin address that refuses or does not answer may only mean that the worker's admin server listens elsewhere; "+
			"fix: check that they are stopped (e.g. kubectl get pod %s), then name them: %s; or wait kafka.session_timeout (%s here) and run this again; "+
			"kafka.leave_on_shutdown: true makes a stopping worker leave the group itself",
			f.group, strings.Join(unproven, "; "), strings.Join(unprovenIDs, " "), strings.Join(flags, " "), r.c.cfg.Kafka.SessionTimeout)
	}
	for id := range named {
		r.c.log.Info("--remove-member names no static member of the group (already gone)", zap.String("instance_id", id))
	}
	if len(remove) == 0 {
		return nil
	}
	slices.Sort(remove)
	if err := replay.RemoveStatic(ctx, r.adm, f.group, remove...); err != nil {
		return err
	}
	fmt.Fprintf(r.c.stderr, "removed stopped static member(s) from group %s: %s\n", f.group, strings.Join(remove, ", "))
	return nil
}
