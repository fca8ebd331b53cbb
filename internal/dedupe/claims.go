package dedupe

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/dedupe"
)

// Disposition is what became of an event (the public dedupe package's).
type Disposition = dedupe.Disposition

// The dispositions.
const (
	Applied      = dedupe.Applied
	Stale        = dedupe.Stale
	Parked       = dedupe.Parked
	DeadLettered = dedupe.DeadLettered
	Duplicate    = dedupe.Duplicate
	Skipped      = dedupe.Skipped
)

// Claim is one event key to claim.
type Claim struct {
	Key         string
	Strategy    string
	PayloadHash []byte
	Type        string
	Subject     string
	Topic       string
	Partition   int32
	Offset      int64
}

// Existing is a key that was already claimed, with the payload hash stored
// when it was.
type Existing struct {
	Key         string
	PayloadHash []byte
}

const claimSQL = `
INSERT INTO effectively_claims
    (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
SELECT k, s, h, t, subj, 'applied', $1, $2, $3, o, $10
FROM unnest($4::text[], $5::text[], $6::bytea[], $7::text[], $8::text[], $9::bigint[]) AS c(k, s, h, t, subj, o)
WHERE NOT EXISTS (SELECT 1 FROM effectively_claims p WHERE p.event_key = c.k AND p.generation < $10)
ORDER BY k
ON CONFLICT DO NOTHING
RETURNING event_key`

// ClaimAll claims every key in claims with one multi-row INSERT … ON
// CONFLICT DO NOTHING into generation gen, the open one (rows sorted by
// key, so two transactions never lock keys in opposite orders), of the keys
// no older generation holds (see generations.go), and returns the keys this
// transaction claimed. Claims start as applied; Record sets any other
// disposition before commit. Keys must be distinct and all claims of one
// topic and partition. When gen was closed meanwhile it returns
// ErrGenerationClosed.
func ClaimAll(ctx context.Context, tx pgx.Tx, gen int32, group string, claims []Claim) (map[string]bool, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	n := len(claims)
	keys, strategies, types, subjects := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes, offsets := make([][]byte, n), make([]int64, n)
	for i, c := range claims {
		keys[i], strategies[i], hashes[i], types[i], subjects[i], offsets[i] = c.Key, c.Strategy, c.PayloadHash, c.Type, c.Subject, c.Offset
	}
	rows, err := tx.Query(ctx, claimSQL, group, claims[0].Topic, claims[0].Partition, keys, strategies, hashes, types, subjects, offsets, gen)
	if err != nil {
		if closed := generationClosed(err, gen); closed != nil {
			return nil, closed
		}
		return nil, fmt.Errorf("claiming %d events: %w", n, err)
	}
	claimed := make(map[string]bool, n)
	var k string
	if _, err := pgx.ForEachRow(rows, []any{&k}, func() error { claimed[k] = true; return nil }); err != nil {
		if closed := generationClosed(err, gen); closed != nil {
			return nil, closed
		}
		return nil, fmt.Errorf("claiming %d events: %w", n, err)
	}
	return claimed, nil
}

const existingSQL = `SELECT event_key, payload_hash FROM effectively_claims WHERE event_key = ANY($1)`

// Lookup returns the stored payload hash of each key that has a claim. A key
// claimed by a concurrent transaction that committed after ClaimAll waited
// for it is visible here (a new statement, a new snapshot).
func Lookup(ctx context.Context, tx pgx.Tx, keys []string) (map[string][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, existingSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("reading %d existing claims: %w", len(keys), err)
	}
	out := make(map[string][]byte, len(keys))
	var k string
	var h []byte
	if _, err := pgx.ForEachRow(rows, []any{&k, &h}, func() error { out[k] = slices.Clone(h); return nil }); err != nil {
		return nil, fmt.Errorf("reading %d existing claims: %w", len(keys), err)
	}
	return out, nil
}

const setDispositionsSQL = `
UPDATE effectively_claims p SET disposition = d.disposition, updated_at = now()
FROM unnest($1::text[], $2::text[]) AS d(event_key, disposition)
WHERE p.event_key = d.event_key`

// QueueDispositions queues, on b, the update of claims whose disposition is
// not applied.
func QueueDispositions(b *pgx.Batch, keys []string, dispositions []Disposition) {
	if len(keys) == 0 {
		return
	}
	ds := make([]string, len(dispositions))
	for i, d := range dispositions {
		ds[i] = string(d)
	}
	b.Queue(setDispositionsSQL, keys, ds)
}

// LockClaim locks the claim of key in tx and returns its disposition (a
// redrive decides from it whether to run the handler again).
func LockClaim(ctx context.Context, tx pgx.Tx, key string) (Disposition, error) {
	var d string
	if err := tx.QueryRow(ctx, `SELECT disposition FROM effectively_claims WHERE event_key = $1 FOR UPDATE`, key).Scan(&d); err != nil {
		return "", fmt.Errorf("locking the claim of %s: %w", key, err)
	}
	return Disposition(d), nil
}
