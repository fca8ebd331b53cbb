package service

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressEvery is how often a long command reports its progress.
const progressEvery = 2 * time.Second

// progress reports a long command's progress on stderr, at most every
// progressEvery, as plain lines (they read the same in a terminal, a log
// and CI), never on stdout, which --json keeps for the result.
type progress struct {
	w     io.Writer
	what  string
	total int64 // 0: unknown

	mu    sync.Mutex
	n     int64
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, what string, total int64) *progress {
	now := time.Now()
	return &progress{w: w, what: what, total: total, start: now, last: now}
}

// add counts n more done, and reports when progressEvery has passed.
func (p *progress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if time.Since(p.last) >= progressEvery {
		p.last = time.Now()
		p.report("")
	}
}

// set reports a running total (for callers that count themselves).
func (p *progress) set(n int64) {
	p.mu.Lock()
	p.n = n
	p.mu.Unlock()
	p.add(0)
}

// done reports the final count once, if the command took long enough to
// have reported progress at all.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.start) >= progressEvery {
		p.report(" (done)")
	}
}

func (p *progress) report(suffix string) {
	el := time.Since(p.start).Round(time.Second)
	if p.total > 0 {
		fmt.Fprintf(p.w, "%s: %d of %d (%.0f%%) in %s%s\n", p.what, p.n, p.total, 100*float64(p.n)/float64(p.total), el, suffix)
		return
	}
	fmt.Fprintf(p.w, "%s: %d in %s%s\n", p.what, p.n, el, suffix)
}
