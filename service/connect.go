package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/deadline"
	"github.com/effectively-io/effectively/schema"
)

// startupTimeout bounds each dependency check at start-up: a worker that
// cannot reach its database or broker says so and exits, rather than
// retrying silently forever.
const startupTimeout = 15 * time.Second

// pgAddr names the host and port a postgres URL points at, for messages.
func pgAddr(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparseable postgres.url)"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func postgresUnreachable(url string, err error) error {
	if explained := explainPostgresTLS(url, err); explained != nil {
		return explained
	}
	return fmt.Errorf("cannot reach PostgreSQL at %s (postgres.url): %w; fix: start it (make stack-up) or set postgres.url / %s",
		pgAddr(url), err, config.EnvName("postgres.url"))
}

// checkPostgres connects once, bounded by startupTimeout.
func checkPostgres(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return postgresUnreachable(url, err)
	}
	return conn.Close(ctx)
}

// checkSchema connects once and checks that the engine's and the build's
// migrations are applied, naming the fix with the build's name.
func (a *App) checkSchema(ctx context.Context, cfg config.Config) error {
	url := cfg.Postgres.URL
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return postgresUnreachable(url, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = schema.Check(ctx, conn, a.schemaSets(cfg)...)
	if privilegeDenied(err) {
		return workerPrivilegeDenied(url, err)
	}
	var nm *schema.NotMigratedError
	if errors.As(err, &nm) {
		return fmt.Errorf("%w; fix: run `%s migrate` or start with `%s run --migrate`", err, a.name(), a.name())
	}
	return err
}

// openPool opens the worker's pool. Every session bounds how long it may wait
// for a lock, run a statement, or sit idle inside a transaction, so a paused
// (SIGSTOPped) member cannot hold a claim's row lock forever.
// tracer, when not nil, traces the pool's statements (tracing's pgx tracer).
func openPool(ctx context.Context, pc config.Postgres, partitions int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(pc.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres.url: %w", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	rp := cfg.ConnConfig.RuntimeParams
	setDefault(rp, "lock_timeout", "10s")
	setDefault(rp, "statement_timeout", "60s")
	setDefault(rp, "idle_in_transaction_session_timeout", "30s")
	setDefault(rp, "application_name", "effectively")
	answer, err := answerTimeout(pc.AnswerTimeout, rp["statement_timeout"])
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.DialFunc = deadline.Dialer(answer, "PostgreSQL (postgres.answer_timeout)", cfg.ConnConfig.DialFunc)
	if cfg.ConnConfig.ConnectTimeout == 0 && !strings.Contains(pc.URL, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = connectTimeoutDefault
	}
	// pgxpool pings a connection idle for over a second before handing it
	// out; a dead one must not cost a whole answer timeout.
	cfg.PingTimeout = min(answer, 5*time.Second)
	if pc.MaxConns > 0 {
		cfg.MaxConns = pc.MaxConns
	} else {
		// One per owned partition, plus the dispatcher, relay, pruner and
		// sweeper (the readiness probe has a connection of its own).
		cfg.MaxConns = int32(max(partitions, 4) + 4)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres.url: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, postgresUnreachable(pc.URL, err)
	}
	return pool, nil
}

// connectTimeoutDefault bounds a connection's TCP connect, TLS and start-up
// when postgres.url sets no connect_timeout.
const connectTimeoutDefault = 10 * time.Second

// answerTimeout is postgres.answer_timeout, or when 0 the session's
// statement_timeout plus 15 s. A set value must exceed statement_timeout:
// the server may legitimately take that long to answer.
func answerTimeout(set time.Duration, statementTimeout string) (time.Duration, error) {
	st, err := pgDuration(statementTimeout)
	if err != nil {
		return 0, fmt.Errorf("postgres.url: statement_timeout %q: %w", statementTimeout, err)
	}
	if set == 0 {
		if st == 0 { // no statement timeout: bound the wait all the same
			return time.Hour, nil
		}
		return st + 15*time.Second, nil
	}
	if st != 0 && set <= st {
		return 0, fmt.Errorf("postgres.answer_timeout (%s) must exceed the session's statement_timeout (%s), or the worker gives up on statements the server is still running; fix: raise %s or unset it (0 derives it)",
			set, st, config.EnvName("postgres.answer_timeout"))
	}
	return set, nil
}

// pgDuration reads a PostgreSQL time setting whose base unit is the
// millisecond (statement_timeout) as the server does: an integer (decimal,
// or hexadecimal / octal as C reads them) or a decimal number, optionally
// followed by a unit (us, ms, s, min, h, d), rounded to a whole
// millisecond, at most 2147483647 ms; 0 means no timeout.
func pgDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, per := s, time.Millisecond
	for _, u := range []struct {
		suffix string
		per    time.Duration
	}{{"min", time.Minute}, {"ms", time.Millisecond}, {"us", time.Microsecond}, {"s", time.Second}, {"h", time.Hour}, {"d", 24 * time.Hour}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, per = strings.TrimSpace(rest), u.per
			break
		}
	}
	var f float64
	if n, err := strconv.ParseInt(num, 0, 64); err == nil {
		f = float64(n)
	} else if f, err = strconv.ParseFloat(num, 64); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errors.New("want a number of milliseconds or a number with a unit (us, ms, s, min, h, d)")
	}
	ms := math.RoundToEven(f * float64(per) / float64(time.Millisecond)) // rint(), as the server does
	if ms < 0 || ms > math.MaxInt32 {
		return 0, errors.New("out of PostgreSQL's range (0 to 2147483647 ms)")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func setDefault(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// checkKafka pings the brokers and checks that every topic exists, bounded
// by startupTimeout. It returns the partition count of each topic.
func checkKafka(ctx context.Context, cl *kgo.Client, k config.Kafka, topics []string) (map[string]int, error) {
	brokers := k.Brokers
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		if explained := broker.Explain(err, k); explained != err {
			return nil, explained
		}
		return nil, fmt.Errorf("cannot reach Kafka at %s (kafka.brokers): %w; fix: start the broker (make stack-up) or set kafka.brokers / %s",
			strings.Join(brokers, ","), err, config.EnvName("kafka.brokers"))
	}
	details, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing topics on %s: %w", strings.Join(brokers, ","), broker.Explain(err, k))
	}
	counts := make(map[string]int, len(topics))
	var missing []string
	for _, t := range topics {
		d, ok := details[t]
		if ok && errors.Is(d.Err, kerr.TopicAuthorizationFailed) {
			return nil, &broker.Denied{Principal: broker.Principal(k), Operation: "READ", ResourceType: "topic", Resource: t, Err: d.Err}
		}
		if !ok || d.Err != nil {
			missing = append(missing, t)
			continue
		}
		counts[t] = len(d.Partitions)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("topic %s does not exist on %s (kafka.topics); fix: create it (the produce command creates it) or correct kafka.topics / %s",
			strings.Join(missing, ", "), strings.Join(brokers, ","), config.EnvName("kafka.topics"))
	}
	return counts, nil
}

// Connect opens one connection to postgres.url for a command of the
// build's own; its error names the address and the fix.
func (c *CLI) Connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.cfg.Postgres.URL)
	if err != nil {
		return nil, postgresUnreachable(c.cfg.Postgres.URL, err)
	}
	return conn, nil
}
