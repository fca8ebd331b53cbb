package dedupe

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// StrategyChangeError refuses a topic's new key strategy while claims made
// with the old one are retained.
type StrategyChangeError struct {
	Topic    string
	Old, New string
}

func (e *StrategyChangeError) Error() string {
	return fmt.Sprintf("topic %s: key strategy changed from %s to %s while claims made with %s are retained: "+
		"a redelivered or replayed event would get a new key and be applied a second time; "+
		"fix: keep key_strategy %s for topic %s, or change it only after those claims have expired (dedupe.retention)",
		e.Topic, e.Old, e.New, e.Old, e.Old, e.Topic)
}

const (
	strategyOfSQL  = `SELECT key_strategy FROM topic_strategies WHERE topic = $1 FOR UPDATE`
	anyClaimSQL    = `SELECT EXISTS (SELECT 1 FROM effectively_claims WHERE topic = $1)`
	setStrategySQL = `INSERT INTO topic_strategies (topic, key_strategy) VALUES ($1, $2) ON CONFLICT (topic) DO UPDATE SET key_strategy = excluded.key_strategy, since = now()`
)

// RecordStrategies records the key strategy of each topic (topic →
// strategy), refusing a change while the topic has claims.
func RecordStrategies(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, strategies map[string]string) error {
	for topic, strategy := range strategies {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var old string
			err := tx.QueryRow(ctx, strategyOfSQL, topic).Scan(&old)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return fmt.Errorf("reading the key strategy of %s: %w", topic, err)
			case old == strategy:
				return nil
			default:
				var claimed bool
				if err := tx.QueryRow(ctx, anyClaimSQL, topic).Scan(&claimed); err != nil {
					return fmt.Errorf("looking for claims of %s: %w", topic, err)
				}
				if claimed {
					return &StrategyChangeError{Topic: topic, Old: old, New: strategy}
				}
			}
			if _, err := tx.Exec(ctx, setStrategySQL, topic, strategy); err != nil {
				return fmt.Errorf("recording the key strategy of %s: %w", topic, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
