package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"
)

// Event types of the reference domain.
const (
	TypeAccountOpened  = "account.opened"
	TypeAccountUpdated = "account.updated"
	TypeAccountClosed  = "account.closed"
	TypeLedgerCredited = "ledger.credited"
	TypeLedgerDebited  = "ledger.debited"
)

// ContentType is the content-type header value of every generated record:
// CloudEvents in JSON structured mode.
const ContentType = "application/cloudevents+json"

// Defaults for Config fields left zero.
const (
	// DefaultSource is the CloudEvents source of generated events.
	DefaultSource = "urn:effectively:workload"
	// DefaultLedgerShare is the fraction of logical events that are ledger
	// events.
	DefaultLedgerShare = 0.5
)

// resendWindow is how many of the latest original records a re-send picks
// from (uniformly): re-sends land up to this many originals after the first
// copy, rarely right after it.
const resendWindow = 1024

// Tuning of the logical stream. Not configurable: they shape a plausible
// account lifecycle, and the tests and verifiers do not depend on them.
const (
	closeChance  = 0.08 // an account change of an open account closes it
	creditChance = 0.55 // a ledger event is a credit rather than a debit
	homeChance   = 0.85 // a ledger event is in the account's home currency
)

// Config describes a workload. The zero values of Source, LedgerShare and
// StartTime select defaults; everything else is taken as given.
type Config struct {
	// Accounts is how many accounts the stream opens (≥ 1). Openings are
	// spread evenly over the first half of the logical events; a stream
	// with fewer logical events than Accounts opens only as many.
	Accounts int
	// Events is the number of records to emit, re-sends included (≥ 0).
	Events int
	// Duplicates is the fraction of records that are re-sends of an earlier
	// record, from 0 up to (not including) 1.
	Duplicates float64
	// OutOfOrder is the fraction of account.updated, account.closed and
	// ledger events that are swapped with the account's next event, from 0
	// to 0.5 (a swap moves two events, so at most half can be the late
	// one).
	OutOfOrder float64
	// LedgerShare is the fraction of logical events that are ledger events,
	// at most 1. Zero selects DefaultLedgerShare; a negative value means no
	// ledger events at all.
	LedgerShare float64
	// Seed selects the stream: the same Config, Seed included, yields the
	// same bytes. It is part of every event ID ("evt-<seed>-<n>"), so
	// streams of different seeds never share an ID, and producing one seed
	// twice to a topic produces nothing but duplicates.
	Seed uint64
	// Source is the CloudEvents source; empty selects DefaultSource.
	Source string
	// StartTime is the first record's timestamp (and CloudEvents time),
	// truncated to milliseconds as Kafka keeps them. Zero selects the time
	// NewGenerator is called, which makes the stream differ from run to
	// run; set it for byte-identical streams.
	StartTime time.Time
	// TimeSpan spreads the record timestamps evenly from StartTime to
	// StartTime+TimeSpan (the last record's). Zero gives every record
	// StartTime.
	TimeSpan time.Duration
}

// Validate reports the first field out of range, named as the produce
// command's flags name it.
func (c Config) Validate() error {
	switch {
	case c.Accounts < 1:
		return fmt.Errorf("accounts %d: want at least 1", c.Accounts)
	case c.Events < 0:
		return fmt.Errorf("events %d: want 0 or more", c.Events)
	case !(c.Duplicates >= 0 && c.Duplicates < 1):
		return fmt.Errorf("duplicates %v: want a fraction from 0 up to (not including) 1", c.Duplicates)
	case !(c.OutOfOrder >= 0 && c.OutOfOrder <= 0.5):
		return fmt.Errorf("out-of-order %v: want a fraction from 0 to 0.5 (a swap moves two events)", c.OutOfOrder)
	case math.IsNaN(c.LedgerShare) || c.LedgerShare > 1:
		return fmt.Errorf("ledger-share %v: want a fraction up to 1 (0: the default %v, negative: none)", c.LedgerShare, DefaultLedgerShare)
	case c.TimeSpan < 0:
		return fmt.Errorf("time-span %v: want 0 or more", c.TimeSpan)
	}
	if !utf8.ValidString(c.Source) {
		return errors.New("source: not valid UTF-8")
	}
	for _, r := range c.Source {
		// The characters CloudEvents forbids; the decoder refuses them.
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe {
			return fmt.Errorf("source %q: contains %U, which CloudEvents strings must not", c.Source, r)
		}
	}
	return nil
}

// Record is one generated Kafka record. Its slices are never modified after
// Next returns them, and a re-send shares its original's Key and Value.
type Record struct {
	// Key is the account ID, equal to the event's subject.
	Key []byte
	// Value is the CloudEvent in JSON structured mode; send it with the
	// header content-type: ContentType.
	Value []byte
	// Timestamp is the record timestamp (millisecond precision, UTC). For
	// an original it equals the event's time attribute; a re-send carries
	// its original's value, time included, at a later timestamp.
	Timestamp time.Time
	// Resend marks a re-send of an earlier record.
	Resend bool
}

// Generator emits a workload's records one at a time and keeps the Expected
// end state of what it emitted. It is not safe for concurrent use.
type Generator struct {
	cfg      Config
	rng      *rand.Rand
	accounts []account

	head    []byte // `{"specversion":"1.0","id":"evt-<seed>-`
	srcType []byte // `","source":<source>,"type":"`

	startMs    int64
	spanMs     uint64
	timeSec    int64  // the second timePrefix holds
	timePrefix []byte // "2006-01-02T15:04:05" of timeSec

	// The logical stream, in arrival order (swaps applied).
	seq        uint64 // logical events generated so far; the next event's number
	opened     int    // accounts opened by the logical stream
	openTarget int
	openSpan   uint64
	pLedger    float64
	pHold      float64
	ready      []logicalEvent
	readyHead  int

	// The record stream.
	emitted  int
	ring     [resendWindow]original
	ringLen  int
	ringNext int

	exp counters
}

// account is one account's generation state (after its last generated
// event) and its expected state (after its last emitted one).
type account struct {
	key []byte

	version     int64
	first, last uint8
	middle      uint8 // a second given name: 0 none, else firstNames[middle-1]
	initial     byte  // a middle initial (when no middle name), or 0
	last2       uint8 // a double-barrelled surname: 0 none, else lastNames[last2-1]
	domain      uint8
	style       uint8 // the email's local part: see emailOf
	number      uint16
	plan        uint8
	home        uint8 // the currency most of its ledger events use
	closed      bool
	name, email string
	held        logicalEvent // a late event waiting for the account's next one
	hasHeld     bool
	exp         expectedAccount // version 0 until an account event is emitted
	currencies  uint8           // bit i: a ledger event in currencies[i] was emitted
	balances    [len(currencies)]int64
}

type expectedAccount struct {
	version     int64
	name, email string
	plan        uint8
	closed      bool
}

// kind is an event type, as an index into types.
type kind uint8

const (
	kindOpened kind = iota
	kindUpdated
	kindClosed
	kindCredited
	kindDebited
	numKinds
)

var types = [numKinds]string{TypeAccountOpened, TypeAccountUpdated, TypeAccountClosed, TypeLedgerCredited, TypeLedgerDebited}

func (k kind) ledger() bool { return k == kindCredited || k == kindDebited }

// logicalEvent is one logical event.
type logicalEvent struct {
	seq         uint64
	acct        int32
	kind        kind
	late        bool // swapped behind the account's next event
	plan        uint8
	currency    uint8
	version     int64
	amount      int64
	name, email string
}

type original struct{ key, value []byte }

type counters struct {
	records, distinct, duplicates, outOfOrder, stale int
	byType                                           [numKinds]int
	ledgerTotal                                      [len(currencies)]int64
	currencies                                       uint8
}

var (
	plans      = [...]string{"free", "pro", "enterprise"}
	currencies = [...]string{"EUR", "USD", "GBP"}
)

// NewGenerator validates cfg and returns a generator at the start of its
// stream.
func NewGenerator(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	switch {
	case cfg.LedgerShare == 0:
		cfg.LedgerShare = DefaultLedgerShare
	case cfg.LedgerShare < 0:
		cfg.LedgerShare = 0
	}
	if cfg.StartTime.IsZero() {
		cfg.StartTime = time.Now()
	}
	g := &Generator{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		startMs: cfg.StartTime.UnixMilli(),
		spanMs:  uint64(cfg.TimeSpan.Milliseconds()),
	}
	g.head = strconv.AppendUint([]byte(`{"specversion":"1.0","id":"evt-`), cfg.Seed, 10)
	g.head = append(g.head, '-')
	src, err := json.Marshal(cfg.Source)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	g.srcType = append(append([]byte(`","source":`), src...), `,"type":"`...)

	// Plan the logical stream: about Events×(1-Duplicates) events, the
	// first openTarget of them openings spread over the first half.
	logical := max(cfg.Events-int(math.Round(float64(cfg.Events)*cfg.Duplicates)), 1)
	g.openTarget = min(cfg.Accounts, logical)
	g.openSpan = uint64(max(g.openTarget, logical/2))
	if rest := logical - g.openTarget; rest > 0 {
		g.pLedger = min(cfg.LedgerShare*float64(logical)/float64(rest), 1)
	}
	// A held event's partner is never held itself, so holding with chance
	// q makes a fraction q/(1+q) of the eligible events late.
	g.pHold = cfg.OutOfOrder / (1 - cfg.OutOfOrder)

	width := max(6, len(strconv.Itoa(cfg.Accounts)))
	g.accounts = make([]account, g.openTarget)
	for i := range g.accounts {
		k := strconv.AppendInt(make([]byte, 0, 5+width), int64(i+1), 10)
		pad := width - len(k)
		key := make([]byte, 0, 5+width)
		key = append(key, "acct-"...)
		for range pad {
			key = append(key, '0')
		}
		g.accounts[i].key = append(key, k...)
	}
	return g, nil
}

// Generate runs a generator for cfg to the end, calling fn with each record,
// and returns the Expected state. It stops at fn's first error.
func Generate(cfg Config, fn func(Record) error) (Expected, error) {
	g, err := NewGenerator(cfg)
	if err != nil {
		return Expected{}, err
	}
	for {
		r, ok := g.Next()
		if !ok {
			return g.Expected(), nil
		}
		if err := fn(r); err != nil {
			return g.Expected(), err
		}
	}
}

// Next returns the next record, false after the last one.
func (g *Generator) Next() (Record, bool) {
	if g.emitted >= g.cfg.Events {
		return Record{}, false
	}
	ms := g.timestampMs(g.emitted)
	ts := time.UnixMilli(ms).UTC()
	g.emitted++
	g.exp.records++
	if g.ringLen > 0 && g.cfg.Duplicates > 0 && g.rng.Float64() < g.cfg.Duplicates {
		back := g.rng.IntN(g.ringLen)
		o := g.ring[(g.ringNext-1-back+resendWindow)%resendWindow]
		g.exp.duplicates++
		return Record{Key: o.key, Value: o.value, Timestamp: ts, Resend: true}, true
	}
	e := g.nextEvent()
	acc := &g.accounts[e.acct]
	value := g.render(e, acc.key, ts)
	g.record(e, acc)
	g.ring[g.ringNext] = original{key: acc.key, value: value}
	g.ringNext = (g.ringNext + 1) % resendWindow
	g.ringLen = min(g.ringLen+1, resendWindow)
	return Record{Key: acc.key, Value: value, Timestamp: ts}, true
}

// timestampMs returns record i's timestamp: i/(Events-1) of the way through
// the span, in 128-bit arithmetic so that no span overflows.
func (g *Generator) timestampMs(i int) int64 {
	if g.cfg.Events <= 1 || g.spanMs == 0 {
		return g.startMs
	}
	hi, lo := bits.Mul64(g.spanMs, uint64(i))
	q, _ := bits.Div64(hi, lo, uint64(g.cfg.Events-1)) // i < Events, so q ≤ spanMs
	return g.startMs + int64(q)
}

// nextEvent returns the next logical event in arrival order.
func (g *Generator) nextEvent() logicalEvent {
	for g.readyHead == len(g.ready) {
		g.ready, g.readyHead = g.ready[:0], 0
		g.generate()
	}
	e := g.ready[g.readyHead]
	g.ready[g.readyHead] = logicalEvent{}
	g.readyHead++
	return e
}

// generate makes the next logical event and queues zero, one or two events
// for arrival: none when it is held back, two when it releases the
// account's held event behind itself.
func (g *Generator) generate() {
	n := g.seq
	g.seq++
	if g.opened < g.openTarget && n >= uint64(g.opened)*g.openSpan/uint64(g.openTarget) {
		a := g.opened
		g.opened++
		g.ready = append(g.ready, g.open(a, n))
		return
	}
	a := g.rng.IntN(g.opened)
	var e logicalEvent
	if g.rng.Float64() < g.pLedger {
		e = g.ledger(a, n)
	} else {
		e = g.change(a, n)
	}
	acc := &g.accounts[a]
	switch {
	case acc.hasHeld:
		held := acc.held
		held.late = true
		acc.held, acc.hasHeld = logicalEvent{}, false
		g.ready = append(g.ready, e, held)
	case g.pHold > 0 && g.rng.Float64() < g.pHold:
		acc.held, acc.hasHeld = e, true
	default:
		g.ready = append(g.ready, e)
	}
}

func (g *Generator) open(a int, n uint64) logicalEvent {
	acc := &g.accounts[a]
	acc.version = 1
	acc.first = uint8(g.rng.IntN(len(firstNames)))
	g.surname(acc)
	switch g.rng.IntN(10) {
	case 0, 1, 2, 3:
		acc.middle = uint8(1 + g.rng.IntN(len(firstNames)))
	case 4, 5:
		acc.initial = byte('A' + g.rng.IntN(26))
	}
	acc.domain = uint8(g.rng.IntN(len(domains)))
	acc.style = uint8(g.rng.IntN(numStyles))
	acc.number = uint16(1 + g.rng.IntN(999))
	acc.plan = uint8(g.rng.IntN(len(plans)))
	acc.home = uint8(g.rng.IntN(len(currencies)))
	acc.name, acc.email = nameOf(acc), emailOf(acc)
	return g.accountEvent(acc, a, n, kindOpened)
}

// change makes an account.updated or account.closed event: the account's
// whole new state, one version up.
func (g *Generator) change(a int, n uint64) logicalEvent {
	acc := &g.accounts[a]
	acc.version++
	if !acc.closed && g.rng.Float64() < closeChance {
		acc.closed = true
		return g.accountEvent(acc, a, n, kindClosed)
	}
	acc.closed = false // an update of a closed account reopens it
	switch r := g.rng.IntN(10); {
	case r < 5:
		acc.plan = uint8((int(acc.plan) + 1 + g.rng.IntN(len(plans)-1)) % len(plans))
	case r < 8:
		acc.domain = uint8(g.rng.IntN(len(domains)))
		acc.style = uint8(g.rng.IntN(numStyles))
		acc.number = uint16(1 + g.rng.IntN(999))
		acc.email = emailOf(acc)
	default:
		g.surname(acc)
		acc.name, acc.email = nameOf(acc), emailOf(acc)
	}
	return g.accountEvent(acc, a, n, kindUpdated)
}

// surname picks a new surname, double-barrelled a third of the time.
func (g *Generator) surname(acc *account) {
	acc.last = uint8(g.rng.IntN(len(lastNames)))
	acc.last2 = 0
	if g.rng.IntN(3) == 0 {
		acc.last2 = uint8(1 + g.rng.IntN(len(lastNames)))
	}
}

func (g *Generator) accountEvent(acc *account, a int, n uint64, k kind) logicalEvent {
	return logicalEvent{seq: n, acct: int32(a), kind: k, version: acc.version, plan: acc.plan, name: acc.name, email: acc.email}
}

func (g *Generator) ledger(a int, n uint64) logicalEvent {
	acc := &g.accounts[a]
	k := kindDebited
	if g.rng.Float64() < creditChance {
		k = kindCredited
	}
	cur := acc.home
	if g.rng.Float64() >= homeChance {
		cur = uint8(g.rng.IntN(len(currencies)))
	}
	// Log-uniform-ish: most amounts are small, a few reach thousands.
	amount := 1 + g.rng.Int64N(int64(1)<<(7+g.rng.IntN(12)))
	return logicalEvent{seq: n, acct: int32(a), kind: k, currency: cur, amount: amount}
}

// render writes e as a CloudEvent in JSON structured mode. The strings it
// copies unquoted (names, emails, keys, types) come from this package's own
// tables and need no escaping.
func (g *Generator) render(e logicalEvent, key []byte, ts time.Time) []byte {
	b := make([]byte, 0, 384)
	b = append(b, g.head...)
	b = strconv.AppendUint(b, e.seq, 10)
	b = append(b, g.srcType...)
	b = append(b, types[e.kind]...)
	b = append(b, `","subject":"`...)
	b = append(b, key...)
	b = append(b, `","time":"`...)
	b = g.appendTime(b, ts)
	b = append(b, `","datacontenttype":"application/json"`...)
	if e.kind.ledger() {
		b = append(b, `,"data":{"amount_cents":`...)
		b = strconv.AppendInt(b, e.amount, 10)
		b = append(b, `,"currency":"`...)
		b = append(b, currencies[e.currency]...)
		return append(b, `"}}`...)
	}
	b = append(b, `,"resourceversion":`...)
	b = strconv.AppendInt(b, e.version, 10)
	b = append(b, `,"data":{"name":"`...)
	b = append(b, e.name...)
	b = append(b, `","email":"`...)
	b = append(b, e.email...)
	b = append(b, `","plan":"`...)
	b = append(b, plans[e.plan]...)
	return append(b, `"}}`...)
}

// appendTime appends ts (UTC, whole milliseconds) in RFC 3339 with
// milliseconds. Timestamps only grow, so the formatted second is cached:
// time.AppendFormat would be a fifth of the generator's time.
func (g *Generator) appendTime(b []byte, ts time.Time) []byte {
	if sec := ts.Unix(); sec != g.timeSec || g.timePrefix == nil {
		g.timeSec = sec
		g.timePrefix = ts.Truncate(time.Second).AppendFormat(g.timePrefix[:0], "2006-01-02T15:04:05")
	}
	b = append(b, g.timePrefix...)
	ms := ts.Nanosecond() / int(time.Millisecond)
	return append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// record folds an emitted original into the expected state, as the worker
// should: account events through the version gate, ledger events summed.
func (g *Generator) record(e logicalEvent, acc *account) {
	x := &g.exp
	x.distinct++
	x.byType[e.kind]++
	if e.late {
		x.outOfOrder++
	}
	if e.kind.ledger() {
		amount := e.amount
		if e.kind == kindDebited {
			amount = -amount
		}
		acc.balances[e.currency] += amount
		acc.currencies |= 1 << e.currency
		x.ledgerTotal[e.currency] += amount
		x.currencies |= 1 << e.currency
		return
	}
	if e.version <= acc.exp.version {
		x.stale++
		return
	}
	acc.exp = expectedAccount{version: e.version, name: e.name, email: e.email, plan: e.plan, closed: e.kind == kindClosed}
}

// Expected returns the expected state of what has been emitted so far: after
// the last record, the state a worker should end with.
func (g *Generator) Expected() Expected {
	x := &g.exp
	e := Expected{
		Records:       x.records,
		Distinct:      x.distinct,
		Duplicates:    x.duplicates,
		OutOfOrder:    x.outOfOrder,
		StaleExpected: x.stale,
		ByType:        make(map[string]int, numKinds),
		Accounts:      make(map[string]AccountState, g.opened),
		Balances:      make(map[string]map[string]int64),
		LedgerTotal:   make(map[string]int64, len(currencies)),
	}
	for k, n := range x.byType {
		if n > 0 {
			e.ByType[types[k]] = n
		}
	}
	for c, total := range x.ledgerTotal {
		if x.currencies&(1<<c) != 0 {
			e.LedgerTotal[currencies[c]] = total
		}
	}
	for i := range g.accounts[:g.opened] {
		acc := &g.accounts[i]
		id := string(acc.key)
		if acc.exp.version > 0 { // an account event was emitted
			status := StatusOpen
			if acc.exp.closed {
				status = StatusClosed
			}
			e.Accounts[id] = AccountState{
				Version: acc.exp.version, Name: acc.exp.name, Email: acc.exp.email,
				Plan: plans[acc.exp.plan], Status: status,
			}
		}
		if acc.currencies != 0 {
			bal := make(map[string]int64, len(currencies))
			for c, v := range acc.balances {
				if acc.currencies&(1<<c) != 0 {
					bal[currencies[c]] = v
				}
			}
			e.Balances[id] = bal
		}
	}
	return e
}

// Names and addresses: realistic lengths, a few non-ASCII letters (valid
// UTF-8, no JSON escaping needed), and only reserved example domains.
type namePart struct{ display, slug string }

var firstNames = [...]namePart{
	{"Amelia", "amelia"}, {"Oliver", "oliver"}, {"Sofia", "sofia"}, {"Mateo", "mateo"},
	{"Hannah", "hannah"}, {"Lukas", "lukas"}, {"Chloé", "chloe"}, {"Rafael", "rafael"},
	{"Ingrid", "ingrid"}, {"Kenji", "kenji"}, {"Amara", "amara"}, {"Tomasz", "tomasz"},
	{"Priya", "priya"}, {"Santiago", "santiago"}, {"Freya", "freya"}, {"Dmitri", "dmitri"},
	{"Aoife", "aoife"}, {"Jonas", "jonas"}, {"Leila", "leila"}, {"Emeka", "emeka"},
	{"Margarethe", "margarethe"}, {"Björn", "bjoern"}, {"Zoë", "zoe"}, {"Anaïs", "anais"},
	{"Joaquín", "joaquin"}, {"Siobhán", "siobhan"}, {"Nikolai", "nikolai"}, {"Yuki", "yuki"},
	{"Fatima", "fatima"}, {"Gabriel", "gabriel"}, {"Eleanor", "eleanor"}, {"Maximilian", "maximilian"},
	{"Isabella", "isabella"}, {"Sebastian", "sebastian"}, {"Charlotte", "charlotte"}, {"Alexander", "alexander"},
	{"Valentina", "valentina"}, {"Benedikt", "benedikt"}, {"Francesca", "francesca"}, {"Théo", "theo"},
	{"Oluwaseun", "oluwaseun"}, {"Guinevere", "guinevere"}, {"Bartholomew", "bartholomew"}, {"Anastasia", "anastasia"},
}

var lastNames = [...]namePart{
	{"Okafor", "okafor"}, {"Lindqvist", "lindqvist"}, {"Fernández-Ruiz", "fernandez-ruiz"}, {"Nakamura", "nakamura"},
	{"O'Sullivan", "osullivan"}, {"Kowalczyk", "kowalczyk"}, {"Abernathy", "abernathy"}, {"van den Berg", "vandenberg"},
	{"Rossi", "rossi"}, {"Müller", "mueller"}, {"Haddad", "haddad"}, {"Papadopoulos", "papadopoulos"},
	{"Ivanova", "ivanova"}, {"Dubois", "dubois"}, {"Schmidt-Hoffmann", "schmidt-hoffmann"}, {"Castellanos", "castellanos"},
	{"Mwangi", "mwangi"}, {"Johansson", "johansson"}, {"Bianchi", "bianchi"}, {"Novak", "novak"},
	{"Fitzgerald", "fitzgerald"}, {"Takahashi", "takahashi"}, {"Ramírez", "ramirez"}, {"Andersen", "andersen"},
	{"Kaczmarek", "kaczmarek"}, {"Oyelaran-Whitfield", "oyelaran-whitfield"}, {"Montgomery", "montgomery"}, {"Castillo", "castillo"},
	{"Nieminen", "nieminen"}, {"Bergström", "bergstroem"}, {"Chakraborty", "chakraborty"}, {"Villanueva", "villanueva"},
	{"Wójcik", "wojcik"}, {"Ó Briain", "obriain"}, {"Delacroix-Martin", "delacroix-martin"}, {"Szabó", "szabo"},
	{"Achterberg", "achterberg"}, {"Nwachukwu", "nwachukwu"}, {"Hargreaves", "hargreaves"}, {"Quintero", "quintero"},
}

var domains = [...]string{
	"example.com", "example.org", "example.net", "mail.example.com", "customers.example.org",
	"northwind-traders.example", "finance.contoso-holdings.example", "acme-industries.example",
	"fabrikam-logistics.example", "eu.tailspin-toys.example", "wingtip-partners.example",
	"accounts.woodgrove-bank.example", "litware-consulting.example", "adventure-works-cycles.example",
}

// numStyles counts the email local-part styles of emailOf.
const numStyles = 4

func nameOf(acc *account) string {
	b := make([]byte, 0, 64)
	b = append(b, firstNames[acc.first].display...)
	switch {
	case acc.middle != 0:
		b = append(append(b, ' '), firstNames[acc.middle-1].display...)
	case acc.initial != 0:
		b = append(b, ' ', acc.initial, '.')
	}
	b = append(append(b, ' '), lastNames[acc.last].display...)
	if acc.last2 != 0 {
		b = append(append(b, '-'), lastNames[acc.last2-1].display...)
	}
	return string(b)
}

func emailOf(acc *account) string {
	first := firstNames[acc.first].slug
	b := make([]byte, 0, 80)
	switch acc.style {
	case 0:
		b = append(append(b, first...), '.')
		b = appendSurname(b, acc)
	case 1:
		b = append(append(b, first...), '.')
		b = appendSurname(b, acc)
		b = strconv.AppendUint(b, uint64(acc.number), 10)
	case 2:
		b = append(b, first[0], '.')
		if acc.middle != 0 {
			b = append(b, firstNames[acc.middle-1].slug[0], '.')
		}
		b = appendSurname(b, acc)
	default:
		b = append(append(b, first...), '_')
		b = appendSurname(b, acc)
	}
	b = append(b, '@')
	b = append(b, domains[acc.domain]...)
	return string(b)
}

func appendSurname(b []byte, acc *account) []byte {
	b = append(b, lastNames[acc.last].slug...)
	if acc.last2 != 0 {
		b = append(append(b, '-'), lastNames[acc.last2-1].slug...)
	}
	return b
}
