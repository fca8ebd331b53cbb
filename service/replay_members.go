package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/effectively-io/effectively/replay"
)

// memberProbeTimeout bounds the look at a member's admin server.
const memberProbeTimeout = 3 * time.Second

// A member's admin server, as `replay --remove-…` sees it.
const (
	adminAnswers = "answers" // a process serves it: the worker runs
	adminRefused = "refused" // nothing listens at the address: the process is gone
	adminUnknown = "unknown" // no answer either way (timeout, unroutable, no address)
)

// probeAdmin looks at a member's admin server (its host, the port of
// http.addr). A worker's admin server is up before it joins the group and
// stays up until it has left or closed its client, so a refused connection
// at the member's host means no worker process is there any more.
func probeAdmin(ctx context.Context, host, adminAddr string) (string, string) {
	_, port, err := net.SplitHostPort(adminAddr)
	host = strings.TrimPrefix(host, "/")
	if err != nil || port == "0" || host == "" {
		return adminUnknown, ""
	}
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, memberProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return adminUnknown, url
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	switch {
	case err == nil:
		resp.Body.Close()
		return adminAnswers, url
	case errors.Is(err, syscall.ECONNREFUSED):
		return adminRefused, url
	}
	return adminUnknown, url
}

// removeStopped removes, before a rewind, the static members the flags
// name (--remove-member) or that are provably stopped
// (--remove-stopped-members: their admin server refuses connections). A
// member whose admin server answers is running and is never removed: the
// rewind would be undone by its next batch.
func (r *replayer) removeStopped(ctx context.Context, f *replayFlags) error {
	members, err := replay.ActiveMembers(ctx, r.adm, f.group)
	if err != nil {
		return err
	}
	var remove, running, unproven []string
	named := map[string]bool{}
	for _, id := range f.removeMembers {
		named[id] = true
	}
	for _, m := range members {
		if m.InstanceID == "" || (!named[m.InstanceID] && !f.removeStopped) {
			continue
		}
		state, url := probeAdmin(ctx, m.Host, r.c.cfg.HTTP.Addr)
		switch {
		case state == adminAnswers:
			running = append(running, fmt.Sprintf("%s (its admin server %s answers)", m.InstanceID, url))
		case named[m.InstanceID] || state == adminRefused:
			remove = append(remove, m.InstanceID)
		default:
			unproven = append(unproven, m.InstanceID)
		}
		delete(named, m.InstanceID)
	}
	if len(running) > 0 {
		return fmt.Errorf("refusing to remove running member(s) of group %s: %s; fix: stop them first (a running member would redo its partitions past the rewind)",
			f.group, strings.Join(running, "; "))
	}
	for id := range named {
		r.c.log.Info("--remove-member names no static member of the group (already gone)", zap.String("instance_id", id))
	}
	if len(unproven) > 0 {
		slices.Sort(unproven)
		fmt.Fprintf(r.c.stderr, "not removed, not provably stopped (their admin server did not answer either way at the port of http.addr): %s; "+
			"if you know they are stopped, name them with --remove-member\n", strings.Join(unproven, ", "))
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
