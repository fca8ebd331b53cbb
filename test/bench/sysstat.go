package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// this runs on (the kernel's ABI keeps it fixed).
const clockTicks = 100

// loadAvg returns the 1, 5 and 15 minute load averages as printed by uptime.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM") }

// currentRSS returns the process's resident set size now (VmRSS) in bytes.
func currentRSS(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// procStatusBytes reads a field in kB of /proc/<pid>/status, in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// procKey identifies a process across snapshots even if its pid is reused.
type procKey struct {
	pid   int
	start uint64
}

// cpuSnapshot is the CPU time of every process by name, and of the machine.
type cpuSnapshot struct {
	at      time.Time
	procs   map[procKey]procCPU
	busy    uint64 // machine ticks not idle or iowait, all CPUs
	total   uint64 // machine ticks, all CPUs
	selfPid int
}

type procCPU struct {
	comm  string
	ppid  int
	ticks uint64
	// cticks are the CPU ticks of its children that exited (cutime +
	// cstime): a postmaster's short-lived backends.
	cticks uint64
}

func takeCPUSnapshot() cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), procs: map[procKey]procCPU{}, selfPid: os.Getpid()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line))
		if len(f) > 5 && f[0] == "cpu" {
			for i, v := range f[1:] {
				n, _ := strconv.ParseUint(v, 10, 64)
				if i >= 8 { // guest time is already counted in user
					break
				}
				s.total += n
				if i != 3 && i != 4 { // idle, iowait
					s.busy += n
				}
			}
		}
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range dirs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited
		}
		pid, ppid, comm, ticks, start, ok := parseStat(b)
		if !ok {
			continue
		}
		if pid == s.selfPid {
			comm = "bench (this process)"
		}
		s.procs[procKey{pid, start}] = procCPU{comm: comm, ppid: ppid, ticks: ticks, cticks: exitedChildTicks(b)}
	}
	return s
}

// parseStat reads pid, ppid, comm, utime+stime and starttime from
// /proc/<pid>/stat. comm may contain spaces and parentheses: it ends at the
// last ')'.
func parseStat(b []byte) (pid, ppid int, comm string, ticks, start uint64, ok bool) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return 0, 0, "", 0, 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return 0, 0, "", 0, 0, false
	}
	comm = string(b[open+1 : closing])
	f := strings.Fields(string(b[closing+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// starttime 22.
	if len(f) < 20 {
		return 0, 0, "", 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return pid, ppid, comm, ut + st, start, true
}

// exitedChildTicks reads cutime + cstime (fields 16 and 17) of
// /proc/<pid>/stat.
func exitedChildTicks(b []byte) uint64 {
	closing := bytes.LastIndexByte(b, ')')
	if closing < 0 {
		return 0
	}
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 15 {
		return 0
	}
	cu, _ := strconv.ParseUint(f[13], 10, 64)
	cs, _ := strconv.ParseUint(f[14], 10, 64)
	return cu + cs
}

// parentOf returns the parent pid and comm of pid.
func parentOf(pid int) (int, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	_, ppid, _, _, _, ok := parseStat(b)
	if !ok {
		return 0, "", fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid))
	if err != nil {
		return 0, "", err
	}
	_, _, comm, _, _, ok := parseStat(b)
	if !ok {
		return 0, "", fmt.Errorf("cannot parse /proc/%d/stat", ppid)
	}
	return ppid, comm, nil
}

// cpuUse is the CPU spent between two snapshots.
type cpuUse struct {
	wall time.Duration
	// byName is CPU seconds per process name (processes alive at the second
	// snapshot; one that started in between counts in full).
	byName map[string]float64
	// busy and capacity are machine-wide CPU seconds.
	busy, capacity float64
	// procs is CPU seconds per process (alive at the second snapshot).
	procs map[int]procDelta
}

type procDelta struct {
	ppid int
	secs float64
	// csecs is the CPU of its children that exited in between.
	csecs float64
}

// pid is the CPU seconds of one process.
func (u cpuUse) pid(pid int) float64 { return u.procs[pid].secs }

// tree is the CPU seconds of root and its children: a postmaster and its
// backends and auxiliary processes, those that exited in between included.
func (u cpuUse) tree(root int) float64 {
	s := u.procs[root].csecs
	for pid, p := range u.procs {
		if pid == root || p.ppid == root {
			s += p.secs
		}
	}
	return s
}

func cpuBetween(a, b cpuSnapshot) cpuUse {
	u := cpuUse{wall: b.at.Sub(a.at), byName: map[string]float64{}, procs: map[int]procDelta{}}
	for k, p := range b.procs {
		d, cd := p.ticks, uint64(0)
		if prev, ok := a.procs[k]; ok {
			d -= min(prev.ticks, d)
			cd = p.cticks - min(prev.cticks, p.cticks)
		}
		if d > 0 || cd > 0 {
			u.byName[p.comm] += float64(d) / clockTicks
			u.procs[k.pid] = procDelta{ppid: p.ppid, secs: float64(d) / clockTicks, csecs: float64(cd) / clockTicks}
		}
	}
	// A child that exited in between moved its whole CPU time into its
	// parent's cutime; what it had at a is already counted (it was alive
	// then), so only the rest is new.
	for k, p := range a.procs {
		if _, alive := b.procs[k]; alive {
			continue
		}
		for pk, parent := range b.procs {
			if pk.pid == p.ppid {
				d := u.procs[pk.pid]
				d.csecs = max(0, d.csecs-float64(p.ticks)/clockTicks)
				if _, ok := u.procs[pk.pid]; ok || d.csecs > 0 {
					d.ppid = parent.ppid
					u.procs[pk.pid] = d
				}
			}
		}
	}
	u.busy = float64(b.busy-min(a.busy, b.busy)) / clockTicks
	u.capacity = float64(b.total-min(a.total, b.total)) / clockTicks
	return u
}

// String lists the biggest consumers: "effectively 12.1s postgres 18.3s …
// machine 38.0s busy of 40.2s".
func (u cpuUse) String() string {
	names := make([]string, 0, len(u.byName))
	for n := range u.byName {
		names = append(names, n)
	}
	slices.SortFunc(names, func(x, y string) int {
		switch {
		case u.byName[x] > u.byName[y]:
			return -1
		case u.byName[x] < u.byName[y]:
			return 1
		}
		return strings.Compare(x, y)
	})
	var sb strings.Builder
	var shown float64
	for i, n := range names {
		if i == 4 || u.byName[n] < 0.05 {
			break
		}
		fmt.Fprintf(&sb, "%s %.1fs, ", n, u.byName[n])
		shown += u.byName[n]
	}
	fmt.Fprintf(&sb, "other %.1fs; machine busy %.1fs of %.1fs (%.0f%%)",
		max(u.busy-shown, 0), u.busy, u.capacity, 100*u.busy/max(u.capacity, 1e-9))
	return sb.String()
}
