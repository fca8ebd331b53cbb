package dedupe_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// Many members claim the same keys, in batches, while the generations
// rotate every few milliseconds; a zombie holds a cached generation across
// a rotation. Every key has exactly one effect, every losing claim finds
// the winner's payload hash (so a different payload is still detected as a
// conflict), and the zombie's stale claim is refused, not applied.
func TestClaimsStayExactAcrossGenerationRotations(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE fx (event_key text NOT NULL, member int NOT NULL, hash bytea NOT NULL)`)
	require.NoError(t, err)

	const (
		members = 6
		keys    = 1500
		batch   = 40
	)
	// Member 0 sends a different payload for every tenth key.
	hashOf := func(member, k int) []byte {
		h := sha256.Sum256(fmt.Appendf(nil, "payload-%d", k))
		if member == 0 && k%10 == 0 {
			h = sha256.Sum256(fmt.Appendf(nil, "other-%d", k))
		}
		return h[:]
	}
	type attempt struct {
		member, key int
		stored      []byte // the hash found when the claim was taken
	}
	var (
		mu       sync.Mutex
		lost     []attempt
		closed   atomic.Int64 // claims refused by a closed generation
		finished atomic.Int64
	)

	// The rotator: close the open generation and open the next, again and
	// again, while the members work.
	rotations := make(chan int, 1)
	go func() {
		conn, err := db.Pool.Acquire(ctx)
		if err != nil {
			rotations <- -1
			return
		}
		defer conn.Release()
		n := 0
		for finished.Load() < members {
			pass, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Nanosecond, Retention: 24 * time.Hour}, false)
			if err == nil && pass.Opened != nil {
				n++
			}
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		}
		rotations <- n
	}()

	claimBatch := func(pool *pgxpool.Pool, gens *dedupe.Generations, member int, ks []int) error {
		for {
			var gen int32
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				if gen, err = gens.Open(ctx, tx); err != nil {
					return err
				}
				claims := make([]dedupe.Claim, len(ks))
				for i, k := range ks {
					claims[i] = dedupe.Claim{Key: fmt.Sprintf("k%05d", k), Strategy: "cloudevents", PayloadHash: hashOf(member, k),
						Type: "t", Subject: "s", Topic: "topic", Partition: int32(member), Offset: int64(k)}
				}
				got, err := dedupe.ClaimAll(ctx, tx, gen, "g", claims)
				if err != nil {
					return err
				}
				var taken []string
				for _, c := range claims {
					if got[c.Key] {
						if _, err := tx.Exec(ctx, `INSERT INTO fx VALUES ($1, $2, $3)`, c.Key, member, c.PayloadHash); err != nil {
							return err
						}
					} else {
						taken = append(taken, c.Key)
					}
				}
				stored, err := dedupe.Lookup(ctx, tx, taken)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, c := range claims {
					if got[c.Key] {
						continue
					}
					h, ok := stored[c.Key]
					if !ok {
						return fmt.Errorf("claim of %s neither inserted nor found", c.Key)
					}
					var k int
					fmt.Sscanf(c.Key, "k%d", &k)
					lost = append(lost, attempt{member: member, key: k, stored: h})
				}
				return nil
			})
			if errors.Is(err, dedupe.ErrGenerationClosed) {
				closed.Add(1)
				if _, err := gens.Refresh(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, members+1)
	for m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			// A member of its own: its own cache of the open generation.
			gens := dedupe.NewGenerations(db.Pool)
			order := rand.Perm(keys)
			for i := 0; i < len(order); i += batch {
				ks := append([]int(nil), order[i:min(i+batch, len(order))]...)
				// Claims go in key order within a batch (as the applier's
				// ORDER BY does); the batch's keys are random.
				if err := claimBatch(db.Pool, gens, m, ks); err != nil {
					errs <- fmt.Errorf("member %d: %w", m, err)
					return
				}
			}
		}()
	}

	// The zombie: it reads the open generation, then sits in an open
	// transaction past a rotation, then claims keys nobody else has — with
	// its stale generation. It must be refused.
	wg.Add(1)
	go func() {
		defer wg.Done()
		gens := dedupe.NewGenerations(db.Pool)
		stale, err := gens.Open(ctx, db.Pool)
		if err != nil {
			errs <- err
			return
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			errs <- err
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			var passed bool
			if err := db.Pool.QueryRow(ctx, `SELECT closed_at IS NOT NULL FROM claim_generations WHERE generation = $1`, stale).Scan(&passed); err != nil {
				errs <- err
				return
			}
			if passed {
				break
			}
			if time.Now().After(deadline) {
				errs <- errors.New("no rotation passed the zombie in a minute")
				return
			}
		}
		_, err = dedupe.ClaimAll(ctx, tx, stale, "g", []dedupe.Claim{{Key: "zombie-only", Strategy: "cloudevents", PayloadHash: hashOf(9, 1),
			Type: "t", Subject: "s", Topic: "topic", Partition: 99, Offset: 1}})
		if !errors.Is(err, dedupe.ErrGenerationClosed) {
			errs <- fmt.Errorf("the zombie's claim into closed generation %d: got %v, want ErrGenerationClosed", stale, err)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n := <-rotations
	t.Logf("%d rotations, %d claims refused by a closed generation and redone, %d lost claims", n, closed.Load(), len(lost))
	require.Greater(t, n, 5, "the generations rotated while the members claimed")

	// One effect per key, and one claim.
	require.Equal(t, int64(keys), db.Count(t, `SELECT count(*) FROM fx`))
	require.Equal(t, int64(keys), db.Count(t, `SELECT count(DISTINCT event_key) FROM fx`))
	require.Equal(t, int64(keys), db.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(keys), db.Count(t, `SELECT count(DISTINCT event_key) FROM effectively_claims`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key = 'zombie-only'`))
	require.Greater(t, db.Count(t, `SELECT count(DISTINCT generation) FROM effectively_claims`), int64(3), "the claims are spread over generations")

	// Every losing claim saw the winner's hash: a different payload is a
	// conflict whichever member won.
	winner := map[int][]byte{}
	rows, err := db.Pool.Query(ctx, `SELECT event_key, hash FROM fx`)
	require.NoError(t, err)
	var key string
	var h []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &h}, func() error {
		var k int
		fmt.Sscanf(key, "k%d", &k)
		winner[k] = append([]byte(nil), h...)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, lost, keys*(members-1), "every key was lost by all members but its winner")
	conflicts := 0
	for _, a := range lost {
		require.Equal(t, winner[a.key], a.stored, "member %d's lost claim of k%05d", a.member, a.key)
		if !bytes.Equal(hashOf(a.member, a.key), a.stored) {
			conflicts++
		}
	}
	require.Positive(t, conflicts, "member 0's different payloads were detected as conflicts")
}

// A pass whose rotation finds the open generation busy (a vacuum holds
// it) still expires an old generation: its parked claim moves into the
// generation that is open, not into the next one, which is not open yet
// (a claim there would be invisible to the open generation's claims).
func TestParkedClaimsMoveIntoTheOpenGenerationWhenTheRotationIsBusy(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO effectively_claims (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
		VALUES ('p1', 'cloudevents', decode(repeat('00', 32), 'hex'), 'line.added', 'a', 'parked', 'g', 't', 0, 1, `+pgtest.OpenGeneration+`)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event) VALUES ('p1', 'g', 't', 0, 1, 'a', 'line.added', '{}')`)
	require.NoError(t, err)
	db.AgeClaims(t, 30*24*time.Hour)
	open := int32(db.Count(t, `SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`))

	// What a vacuum holds: the open generation's table is busy.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // the lock goes with it
	_, err = holder.Exec(ctx, fmt.Sprintf(`LOCK TABLE effectively_claims_g%d IN SHARE UPDATE EXCLUSIVE MODE`, open))
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pass, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Nanosecond, Retention: 14 * 24 * time.Hour}, false)
	require.NoError(t, err)
	require.Nil(t, pass.Opened, "the rotation waited for the next pass")
	require.NotEmpty(t, pass.Busy)
	require.Len(t, pass.Dropped, 1)
	require.Equal(t, int64(1), pass.Dropped[0].Parked)
	require.Equal(t, int64(open), db.Count(t, `SELECT generation FROM effectively_claims WHERE event_key = 'p1'`), "the parked claim is in the open generation")
}

// An expired generation is detached in one transaction and dropped in
// another, so claims never wait for its files to go: here a reader holds
// the detached table, the drop waits for it (busy, the next pass finishes
// it), and a claim commits meanwhile. Dropped in the detach's transaction,
// the table would keep the parent locked and the claim would wait for the
// reader too. Not parallel: it sets a package hook.
func TestClaimsGoOnWhileAnExpiredGenerationIsDropped(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	hash := sha256.Sum256([]byte("payload"))
	claim := func(ctx context.Context, key string) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			gen, err := dedupe.NewGenerations(db.Pool).Open(ctx, tx)
			if err != nil {
				return err
			}
			_, err = dedupe.ClaimAll(ctx, tx, gen, "g", []dedupe.Claim{{Key: key, Strategy: "cloudevents", PayloadHash: hash[:],
				Type: "t", Subject: "s", Topic: "topic", Partition: 0, Offset: 1}})
			return err
		})
	}
	require.NoError(t, claim(ctx, "old"))
	expired := db.RotateClaims(t)
	db.AgeClosedClaims(t, 30*24*time.Hour)
	table := fmt.Sprintf("effectively_claims_g%d", expired)

	var (
		reader              pgx.Tx
		readerErr, claimErr error
		detached            int64 = -1
	)
	// Everything in the hook is bounded: had the detach not committed, the
	// reader and the claim would wait for it, and the test would hang.
	restore := dedupe.SetAfterDetach(func(n int32) {
		hookCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if reader, readerErr = db.Pool.Begin(ctx); readerErr == nil {
			_, readerErr = reader.Exec(hookCtx, `LOCK TABLE `+table+` IN ACCESS SHARE MODE`)
		}
		if readerErr != nil {
			return
		}
		detached = db.Count(t, `SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass($1)`, table)
		claimErr = claim(hookCtx, "new")
	})
	defer restore()

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pol := dedupe.GenerationPolicy{Interval: time.Hour, Retention: 14 * 24 * time.Hour, LockTimeout: 200 * time.Millisecond}
	pass, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), pol, false)
	require.NoError(t, err)
	require.NotNil(t, reader, "the generation was detached")
	defer reader.Rollback(ctx) //nolint:errcheck // the lock goes with it
	require.NoError(t, readerErr, "a reader locks the detached table at once")
	require.Equal(t, int64(0), detached, "the table is no partition of effectively_claims once detached")
	require.NoError(t, claimErr, "a claim commits while the detached table waits to be dropped")
	require.Len(t, pass.Dropped, 1)
	require.NotEmpty(t, pass.Busy, "the drop waits for the reader")
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key = 'new'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM `+table), "still there while the reader holds it")

	require.NoError(t, reader.Rollback(ctx))
	_, err = dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), pol, false)
	require.NoError(t, err)
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, table), "the next pass drops it")
}
