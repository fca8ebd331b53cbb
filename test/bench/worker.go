package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// worker is a running bin/effectively process.
type worker struct {
	cmd   *exec.Cmd
	log   *os.File // its stdout and stderr
	done  chan struct{}
	http  string // its http.addr
	start time.Time
}

// freeAddr returns a localhost address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startWorker runs `effectively run` for group on topic and schema d, with
// the defaults except for extraEnv. Its environment is clean (PATH and HOME
// only), so the developer's EFFECTIVELY_* variables never leak in.
func (b *bench) startWorker(d *db, group, topic string, extraEnv ...string) (*worker, error) {
	return b.startWorkerArgs(d, group, topic, nil, extraEnv...)
}

// startWorkerArgs is startWorker with extra arguments to `run` (--config).
func (b *bench) startWorkerArgs(d *db, group, topic string, args []string, extraEnv ...string) (*worker, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp("", "effectively-bench-worker-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.bin, append([]string{"run"}, args...)...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(b.brokers, ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + d.url,
		"EFFECTIVELY_HTTP_ADDR=" + addr,
	}, extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	w := &worker{cmd: cmd, log: logf, done: make(chan struct{}), http: addr}
	w.start = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.Remove(logf.Name())
		return nil, fmt.Errorf("starting %s: %w", b.opts.bin, err)
	}
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	// A bench interrupted mid-run must not leave the worker behind.
	b.onCleanup(func(context.Context) { w.stop(5 * time.Second) })
	return w, nil
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM (a graceful drain) and waits up to grace, then kills.
// It returns the exit code, -1 when killed. Calling it again is harmless.
func (w *worker) stop(grace time.Duration) int {
	if !w.exited() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(grace):
			progress("warning: worker %d did not stop within %s of SIGTERM; killing it", w.cmd.Process.Pid, grace)
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	}
	if w.log != nil {
		w.log.Close()
		os.Remove(w.log.Name())
		w.log = nil
	}
	return w.cmd.ProcessState.ExitCode()
}

// tail returns the last n lines of the worker's output.
func (w *worker) tail(n int) string {
	if w.log == nil {
		return ""
	}
	b, err := os.ReadFile(w.log.Name())
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failed wraps err with the worker's last log lines.
func (w *worker) failed(err error) error {
	return fmt.Errorf("%w; worker output (tail):\n%s", err, w.tail(30))
}

// waitReady waits until /readyz answers 200: database reachable and the
// group joined.
func (w *worker) waitReady(ctx context.Context, guard time.Duration) error {
	deadline := time.Now().Add(guard)
	for {
		if w.exited() {
			return w.failed(errors.New("the worker exited before it was ready"))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.http+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return w.failed(fmt.Errorf("the worker was not ready after %s", guard))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// progressWait is how long a run may go without any stored position moving
// before it is declared hung.
const progressWait = 3 * time.Minute

// waitApplied polls the stored positions every 100 ms until they sum to at
// least target. It returns when the first record was seen applied (the
// first poll with a non-zero sum), when the target was reached, and the sum
// then.
func (w *worker) waitApplied(ctx context.Context, d *db, group, topic string, target int64) (first, done time.Time, n int64, err error) {
	lastMove := time.Now()
	var last int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if w.exited() {
			return first, done, last, w.failed(errors.New("the worker exited"))
		}
		n, err := d.applied(ctx, group, topic)
		now := time.Now()
		if err != nil {
			return first, done, last, fmt.Errorf("reading positions: %w", err)
		}
		if n > 0 && first.IsZero() {
			first = now
		}
		if n >= target {
			return first, now, n, nil
		}
		if n != last {
			last, lastMove = n, now
		} else if now.Sub(lastMove) > progressWait {
			return first, done, last, w.failed(fmt.Errorf("%w for %s at %d of %d records", errStalled, progressWait, n, target))
		}
		select {
		case <-ctx.Done():
			return first, done, last, ctx.Err()
		case <-tick.C:
		}
	}
}

// workerRun is one measured run of the binary.
type workerRun struct {
	// total is from process start to done; steady from the first applied
	// record to done.
	total, steady time.Duration
	records       int64
	rss           int64 // VmHWM, bytes
	cpu           cpuUse
	metrics       []sample
	problems      []string // correctness check (E and E-sink)
	pid           int      // the worker's process
	sink          *sinkCheck
}

// sampleWorker waits until the worker w has applied target records of topic,
// samples its times, peak RSS, CPU (since before) and metrics, stops it and
// deletes its group.
func (b *bench) sampleWorker(ctx context.Context, w *worker, d *db, group, topic string, target int64, before cpuSnapshot) (workerRun, error) {
	var r workerRun
	first, done, n, err := w.waitApplied(ctx, d, group, topic, target)
	if err != nil {
		return r, err
	}
	r.total, r.steady, r.records, r.pid = done.Sub(w.start), done.Sub(first), n, w.cmd.Process.Pid
	if r.rss, err = peakRSS(w.cmd.Process.Pid); err != nil {
		progress("warning: reading the worker's peak RSS: %v", err)
	}
	r.cpu = cpuBetween(before, takeCPUSnapshot())
	if r.metrics, err = scrape(ctx, w.http); err != nil {
		progress("warning: %v", err)
	}
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	return r, nil
}

// runWorker runs the binary on the main topic (fresh schema and group) until
// target records are applied, then samples it and stops it.
func (b *bench) runWorker(ctx context.Context, kind string, target int64, check bool, extraEnv ...string) (workerRun, error) {
	var r workerRun
	d, err := b.newDB(ctx, kind, migrateWorker)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name(kind)

	before := takeCPUSnapshot()
	w, err := b.startWorker(d, group, b.topic, extraEnv...)
	if err != nil {
		return r, err
	}
	defer w.stop(time.Minute)
	if r, err = b.sampleWorker(ctx, w, d, group, b.topic, target, before); err != nil {
		return r, err
	}
	if check {
		if r.problems, err = d.check(ctx, b.exp); err != nil {
			return r, err
		}
	}
	return r, nil
}
