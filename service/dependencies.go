package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Dependency probing: every dependencyProbeInterval the worker asks
// PostgreSQL and the broker for an answer, within dependencyProbeTimeout.
// dependencyDownAfter failures in a row mark the dependency down (a single
// slow answer under latency is not an outage); one answer marks it up. The
// state is exported as effectively_dependency_up and makes /readyz fail, so
// that a member cut from a dependency says so whether or not anything
// probes it.
const (
	dependencyProbeInterval = 2 * time.Second
	dependencyProbeTimeout  = 5 * time.Second
	dependencyDownAfter     = 2
)

// dependencyMetric is effectively_dependency_up.
func dependencyMetric(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_dependency_up",
		Help: "1 while the dependency (postgres, kafka) answers this member's probes, 0 after it failed two probes in a row (5 s each, every 2 s).",
	}, []string{"dependency"})
	reg.MustRegister(g)
	return g
}

// dependency is one probed service.
type dependency struct {
	name  string
	probe func(context.Context) error
}

// dependencyState is what the probes found of one dependency.
type dependencyState struct {
	fails     int
	down      bool
	since     time.Time // when it went down
	lastError error
}

// dependencies probes its services and remembers their state.
type dependencies struct {
	list []dependency
	up   *prometheus.GaugeVec
	log  *zap.Logger

	mu    sync.Mutex
	state map[string]*dependencyState
}

func newDependencies(up *prometheus.GaugeVec, log *zap.Logger, list ...dependency) *dependencies {
	d := &dependencies{list: list, up: up, log: log, state: map[string]*dependencyState{}}
	for _, dep := range list {
		d.state[dep.name] = &dependencyState{}
		up.WithLabelValues(dep.name).Set(1) // reachable at start-up, or the worker would not have started
	}
	return d
}

// Run probes until ctx ends.
func (d *dependencies) Run(ctx context.Context) error {
	t := time.NewTicker(dependencyProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, dep := range d.list {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, dependencyProbeTimeout)
				err := dep.probe(pctx)
				cancel()
				if ctx.Err() == nil {
					d.note(dep.name, err)
				}
			}()
		}
		wg.Wait()
	}
}

// note records a probe's outcome.
func (d *dependencies) note(name string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state[name]
	if err == nil {
		if s.down {
			d.log.Info("dependency reachable again", zap.String("dependency", name), zap.Duration("down_for", time.Since(s.since).Round(time.Millisecond)))
		}
		*s = dependencyState{}
		d.up.WithLabelValues(name).Set(1)
		return
	}
	s.fails++
	s.lastError = err
	if !s.down && s.fails >= dependencyDownAfter {
		s.down, s.since = true, time.Now()
		d.up.WithLabelValues(name).Set(0)
		d.log.Warn("dependency unreachable: this member is unready until it answers again", zap.String("dependency", name), zap.Error(err))
	}
}

// check is nil while name is up, else why it is down.
func (d *dependencies) check(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state[name]
	if s == nil || !s.down {
		return nil
	}
	return fmt.Errorf("unreachable for %s: %w", time.Since(s.since).Round(time.Second), s.lastError)
}

// pgProbe pings PostgreSQL on a connection of its own (one beyond
// postgres.max_conns), kept open between probes, so that a probe costs one round trip and never waits behind the
// pool's batches or for a new connection's handshake (seconds over a slow
// link, which is not a cut). A failed probe drops the connection; the next
// one connects again.
type pgProbe struct {
	cfg  *pgx.ConnConfig
	mu   sync.Mutex
	conn *pgx.Conn
}

func newPGProbe(pool *pgxpool.Pool) *pgProbe {
	return &pgProbe{cfg: pool.Config().ConnConfig.Copy()}
}

// Ping is the probe.
func (p *pgProbe) Ping(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		// Connecting takes several round trips (TLS, SCRAM): it gets the
		// pool's connect bound, not the probe's, so a slow link that works
		// is not reported down.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(p.cfg.ConnectTimeout, dependencyProbeTimeout))
		conn, err := pgx.ConnectConfig(cctx, p.cfg)
		cancel()
		if err != nil {
			return err
		}
		p.conn = conn
	}
	if err := p.conn.Ping(ctx); err != nil {
		_ = p.conn.Close(context.WithoutCancel(ctx))
		p.conn = nil
		return err
	}
	return nil
}

// Close closes the probe's connection.
func (p *pgProbe) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}
