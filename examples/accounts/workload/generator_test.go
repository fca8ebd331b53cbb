package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
)

var testStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testConfig is the workload most tests examine: 100k records over 1,000
// accounts, so that every account sees enough events to be swapped.
func testConfig() Config {
	return Config{
		Accounts:   1000,
		Events:     100_000,
		Duplicates: 0.1,
		OutOfOrder: 0.1,
		Seed:       7,
		StartTime:  testStart,
		TimeSpan:   48 * time.Hour,
	}
}

// decoded is one generated record with its decoding.
type decoded struct {
	rec Record
	ev  event.Event
	seq uint64 // the n of the event ID "evt-<seed>-<n>": generation order
}

type eventData struct {
	Name        string `json:"name"`
	Email       string `json:"email"`
	Plan        string `json:"plan"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

type stream struct {
	cfg  Config
	recs []decoded
	exp  Expected
}

// testStream generates and decodes testConfig's workload once; tests only
// read it.
var testStream = sync.OnceValues(func() (*stream, error) {
	return generateDecoded(testConfig())
})

// generateDecoded generates cfg's workload and decodes every record, on
// all cores (decoding under the race detector is slow).
func generateDecoded(cfg Config) (*stream, error) {
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: "t"})
	if err != nil {
		return nil, err
	}
	s := &stream{cfg: cfg}
	s.exp, err = Generate(cfg, func(r Record) error {
		s.recs = append(s.recs, decoded{rec: r})
		return nil
	})
	if err != nil {
		return nil, err
	}
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(s.recs); i += workers {
				d := &s.recs[i]
				ev, err := dec.Decode(event.Record{
					Topic: "t", Offset: int64(i), Key: d.rec.Key, Value: d.rec.Value, Timestamp: d.rec.Timestamp,
					Headers: []event.Header{{Key: "content-type", Value: []byte(ContentType)}},
				})
				if err != nil {
					errs[w] = fmt.Errorf("record %d: %w", i, err)
					return
				}
				d.ev = ev
				n := strings.LastIndexByte(d.ev.ID, '-')
				if d.seq, err = strconv.ParseUint(d.ev.ID[n+1:], 10, 64); err != nil {
					errs[w] = fmt.Errorf("record %d: id %s: %w", i, d.ev.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return s, errors.Join(errs...)
}

func setup(t *testing.T) *stream {
	t.Helper()
	s, err := testStream()
	require.NoError(t, err, "every generated record decodes")
	return s
}

// streamHash hashes everything a producer would send.
func streamHash(t *testing.T, cfg Config) ([32]byte, Expected) {
	t.Helper()
	h := sha256.New()
	var n [8]byte
	exp, err := Generate(cfg, func(r Record) error {
		for _, b := range [][]byte{r.Key, r.Value} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
		binary.BigEndian.PutUint64(n[:], uint64(r.Timestamp.UnixMilli()))
		h.Write(n[:])
		return nil
	})
	require.NoError(t, err)
	return [32]byte(h.Sum(nil)), exp
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Events = 20_000
	a, expA := streamHash(t, cfg)
	b, expB := streamHash(t, cfg)
	require.Equal(t, a, b, "same config and seed: identical bytes")
	require.Equal(t, expA, expB)

	cfg.Seed++
	c, _ := streamHash(t, cfg)
	require.NotEqual(t, a, c, "another seed: another stream")

	// Next and Generate walk the same stream.
	g, err := NewGenerator(testConfig())
	require.NoError(t, err)
	s := setup(t)
	for i := range s.recs {
		r, ok := g.Next()
		require.True(t, ok)
		require.Equal(t, s.recs[i].rec, r, "record %d", i)
	}
	_, ok := g.Next()
	require.False(t, ok)
	require.Equal(t, s.exp, g.Expected())
}

func TestRecordsDecode(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.Len(t, s.recs, s.cfg.Events)
	type first struct {
		value []byte
		hash  [32]byte
	}
	seen := make(map[string]first)
	resends := 0
	for i, d := range s.recs {
		// Plain comparisons: require in a 100k loop is slow under -race.
		if string(d.rec.Key) != d.ev.Subject || d.ev.Source != DefaultSource {
			t.Fatalf("record %d: key %s, subject %s, source %s: want the subject to be the key, the default source", i, d.rec.Key, d.ev.Subject, d.ev.Source)
		}
		orig, dup := seen[d.ev.Key]
		if d.rec.Resend != dup {
			t.Fatalf("record %d: resend %v, key seen before %v: want a re-send exactly when its key was seen", i, d.rec.Resend, dup)
		}
		if dup {
			resends++
			if orig.hash != d.ev.PayloadHash || !bytes.Equal(orig.value, d.rec.Value) {
				t.Fatalf("record %d: a re-send differs from its original:\n%s\n%s", i, d.rec.Value, orig.value)
			}
			continue
		}
		if !d.rec.Timestamp.Equal(d.ev.Time) {
			t.Fatalf("record %d: time %v, record timestamp %v: want them equal in an original", i, d.ev.Time, d.rec.Timestamp)
		}
		seen[d.ev.Key] = first{value: d.rec.Value, hash: d.ev.PayloadHash}
	}
	require.Equal(t, s.exp.Distinct, len(seen))
	require.Equal(t, s.exp.Duplicates, resends)
	require.Equal(t, s.exp.Records, len(s.recs))
	require.Equal(t, s.exp.Records, s.exp.Distinct+s.exp.Duplicates)
}

func TestFractions(t *testing.T) {
	t.Parallel()
	s := setup(t)
	e := s.exp
	eligible := e.Distinct - e.ByType[TypeAccountOpened]
	ledger := e.ByType[TypeLedgerCredited] + e.ByType[TypeLedgerDebited]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"duplicates", float64(e.Duplicates) / float64(e.Records), s.cfg.Duplicates},
		{"out of order", float64(e.OutOfOrder) / float64(eligible), s.cfg.OutOfOrder},
		{"ledger share", float64(ledger) / float64(e.Distinct), DefaultLedgerShare},
	} {
		require.InDelta(t, c.want, c.got, 0.02, c.name)
	}
	require.Len(t, e.Accounts, s.cfg.Accounts, "every account is opened")
	require.Equal(t, s.cfg.Accounts, e.ByType[TypeAccountOpened])
	require.Positive(t, e.ByType[TypeAccountClosed])
	require.Positive(t, e.StaleExpected)
}

// TestArrivalOrder checks, from the decoded stream alone, that every
// account opens with its first record and that the swaps and stale
// arrivals are what Expected says.
func TestArrivalOrder(t *testing.T) {
	t.Parallel()
	s := setup(t)
	type acct struct {
		maxSeq     uint64
		maxVersion int64
	}
	accts := make(map[string]*acct)
	late, stale := 0, 0
	for i, d := range s.recs {
		if d.rec.Resend {
			continue
		}
		a, ok := accts[d.ev.Subject]
		if !ok {
			if d.ev.Type != TypeAccountOpened || d.ev.Version != 1 {
				t.Fatalf("record %d: %s version %d is the first event of %s: want account.opened version 1", i, d.ev.Type, d.ev.Version, d.ev.Subject)
			}
			accts[d.ev.Subject] = &acct{maxSeq: d.seq, maxVersion: 1}
			continue
		}
		if d.ev.Type == TypeAccountOpened {
			t.Fatalf("record %d: %s opened twice", i, d.ev.Subject)
		}
		if d.seq < a.maxSeq {
			late++
		}
		a.maxSeq = max(a.maxSeq, d.seq)
		if d.ev.Version > 0 {
			if d.ev.Version < a.maxVersion {
				stale++
			}
			a.maxVersion = max(a.maxVersion, d.ev.Version)
		}
	}
	require.Positive(t, late)
	require.Equal(t, s.exp.OutOfOrder, late)
	require.Equal(t, s.exp.StaleExpected, stale)
}

func TestFinalState(t *testing.T) {
	t.Parallel()
	s := setup(t)
	accounts := make(map[string]AccountState)
	balances := make(map[string]map[string]int64)
	totals := make(map[string]int64)
	byType := make(map[string]int)
	for _, d := range s.recs {
		if d.rec.Resend {
			continue
		}
		byType[d.ev.Type]++
		var data eventData
		if err := json.Unmarshal(d.ev.Data, &data); err != nil {
			t.Fatalf("%s: %v", d.ev.Data, err)
		}
		switch d.ev.Type {
		case TypeAccountOpened, TypeAccountUpdated, TypeAccountClosed:
			if !slices.Contains(plans[:], data.Plan) || data.Name == "" || !strings.Contains(data.Email, "@") {
				t.Fatalf("invalid account data %s", d.ev.Data)
			}
			if d.ev.Version <= accounts[d.ev.Subject].Version {
				continue
			}
			status := StatusOpen
			if d.ev.Type == TypeAccountClosed {
				status = StatusClosed
			}
			accounts[d.ev.Subject] = AccountState{Version: d.ev.Version, Name: data.Name, Email: data.Email, Plan: data.Plan, Status: status}
		case TypeLedgerCredited, TypeLedgerDebited:
			if d.ev.Version != 0 || data.AmountCents <= 0 || !slices.Contains(currencies[:], data.Currency) {
				t.Fatalf("invalid ledger event: version %d, data %s", d.ev.Version, d.ev.Data)
			}
			amount := data.AmountCents
			if d.ev.Type == TypeLedgerDebited {
				amount = -amount
			}
			if balances[d.ev.Subject] == nil {
				balances[d.ev.Subject] = make(map[string]int64)
			}
			balances[d.ev.Subject][data.Currency] += amount
			totals[data.Currency] += amount
		default:
			t.Fatalf("unexpected type %s", d.ev.Type)
		}
	}
	require.Equal(t, accounts, s.exp.Accounts)
	require.Equal(t, balances, s.exp.Balances)
	require.Equal(t, totals, s.exp.LedgerTotal)
	require.Equal(t, byType, s.exp.ByType)
}

func TestTimestamps(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.Equal(t, testStart, s.recs[0].rec.Timestamp)
	require.Equal(t, testStart.Add(s.cfg.TimeSpan), s.recs[len(s.recs)-1].rec.Timestamp)
	for i := 1; i < len(s.recs); i++ {
		if s.recs[i].rec.Timestamp.Before(s.recs[i-1].rec.Timestamp) {
			t.Fatalf("record %d: timestamp %v before the previous one's", i, s.recs[i].rec.Timestamp)
		}
	}

	// A zero span gives every record the start time, truncated to
	// milliseconds as Kafka keeps it.
	start := testStart.Add(1234567 * time.Nanosecond)
	_, err := Generate(Config{Accounts: 3, Events: 10, StartTime: start}, func(r Record) error {
		require.Equal(t, start.Truncate(time.Millisecond), r.Timestamp)
		return nil
	})
	require.NoError(t, err)
}

func TestValueSize(t *testing.T) {
	t.Parallel()
	s := setup(t)
	total := 0
	for _, d := range s.recs {
		total += len(d.rec.Value)
	}
	avg := float64(total) / float64(len(s.recs))
	t.Logf("average value: %.0f bytes", avg)
	require.InDelta(t, 300, avg, 50)
}

func TestLedgerShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		share float64
		want  float64 // of the events other than openings
	}{
		{-1, 0},
		{1, 1},
		{0.25, 0.25 * 20_000 / (20_000 - 100)},
	} {
		e, err := Generate(Config{Accounts: 100, Events: 20_000, LedgerShare: c.share, Seed: 3, StartTime: testStart}, func(Record) error { return nil })
		require.NoError(t, err)
		ledger := e.ByType[TypeLedgerCredited] + e.ByType[TypeLedgerDebited]
		require.InDelta(t, c.want, float64(ledger)/float64(e.Distinct-e.ByType[TypeAccountOpened]), 0.02, "share %v", c.share)
		if c.share < 0 {
			require.Empty(t, e.Balances)
			require.Empty(t, e.LedgerTotal)
		}
	}
}

func TestSmallStreams(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Accounts: 10, Events: 0},
		{Accounts: 10, Events: 1, Duplicates: 0.9, OutOfOrder: 0.5},
		{Accounts: 100, Events: 30, Duplicates: 0.5, OutOfOrder: 0.5},
		{Accounts: 1, Events: 500, Duplicates: 0.3, OutOfOrder: 0.5, LedgerShare: 1},
	} {
		cfg.StartTime = testStart
		s, err := generateDecoded(cfg)
		require.NoError(t, err, "%+v", cfg)
		require.Len(t, s.recs, cfg.Events)
		require.Equal(t, cfg.Events, s.exp.Records)
		require.Equal(t, s.exp.Records, s.exp.Distinct+s.exp.Duplicates)
		require.NotNil(t, s.exp.Accounts)
		require.LessOrEqual(t, len(s.exp.Accounts), cfg.Accounts)
		opened := make(map[string]bool)
		for _, d := range s.recs {
			if !opened[d.ev.Subject] {
				require.Equal(t, TypeAccountOpened, d.ev.Type)
				opened[d.ev.Subject] = true
			}
		}
		require.Len(t, s.exp.Accounts, len(opened))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Accounts: 1, Events: 1}
	for _, c := range []struct {
		name   string
		modify func(*Config)
		err    string
	}{
		{"valid", func(*Config) {}, ""},
		{"no accounts", func(c *Config) { c.Accounts = 0 }, "accounts 0"},
		{"negative events", func(c *Config) { c.Events = -1 }, "events -1"},
		{"duplicates 1", func(c *Config) { c.Duplicates = 1 }, "duplicates 1"},
		{"duplicates NaN", func(c *Config) { c.Duplicates = math.NaN() }, "duplicates NaN"},
		{"negative duplicates", func(c *Config) { c.Duplicates = -0.1 }, "duplicates -0.1"},
		{"out of order above half", func(c *Config) { c.OutOfOrder = 0.6 }, "out-of-order 0.6"},
		{"ledger share above 1", func(c *Config) { c.LedgerShare = 1.5 }, "ledger-share 1.5"},
		{"negative span", func(c *Config) { c.TimeSpan = -time.Second }, "time-span -1s"},
		{"control character in source", func(c *Config) { c.Source = "urn:a\nb" }, "U+000A"},
		{"invalid UTF-8 in source", func(c *Config) { c.Source = "urn:\xff" }, "UTF-8"},
	} {
		cfg := ok
		c.modify(&cfg)
		_, err := NewGenerator(cfg)
		if c.err == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.err, c.name)
	}
}

func TestSourceAndNames(t *testing.T) {
	t.Parallel()
	// A source that needs JSON escaping still decodes to itself.
	src := `https://accounts.example/"quoted"\path`
	s, err := generateDecoded(Config{Accounts: 5, Events: 50, Source: src, StartTime: testStart})
	require.NoError(t, err)
	for _, d := range s.recs {
		require.Equal(t, src, d.ev.Source)
	}
	// render copies the tables unescaped: nothing in them may need escaping.
	var all []string
	for _, p := range firstNames {
		all = append(all, p.display, p.slug)
	}
	for _, p := range lastNames {
		all = append(all, p.display, p.slug)
	}
	all = append(all, domains[:]...)
	for _, v := range all {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, `"`+v+`"`, string(b), "%q needs no escaping", v)
	}
	require.LessOrEqual(t, len(firstNames), 256, "indexes are uint8")
	require.LessOrEqual(t, len(lastNames), 256, "indexes are uint8")
	require.LessOrEqual(t, len(domains), 256, "indexes are uint8")
}

func BenchmarkGenerate(b *testing.B) {
	cfg := Config{
		Accounts: 100_000, Events: 1_000_000, Duplicates: 0.1, OutOfOrder: 0.1,
		Seed: 1, StartTime: testStart, TimeSpan: 48 * time.Hour,
	}
	g, err := NewGenerator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var bytes, n int
	b.ReportAllocs()
	for b.Loop() {
		r, ok := g.Next()
		if !ok {
			g, _ = NewGenerator(cfg)
			r, _ = g.Next()
		}
		bytes += len(r.Value)
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(bytes)/float64(n), "B/record")
}
