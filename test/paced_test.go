package test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceThroughRestarts sends records at about rate records/s, in chunks
// of 100, while brokers may restart, and reports on the channel when all have
// landed (nil) or some still fail after guard. A failed record is sent
// again until it lands; one that landed after all is in the log twice — a
// duplicate, which is what the worker is for (count records where they
// land, not by what was sent).
func produceThroughRestarts(brokers []string, records []*kgo.Record, rate int, guard time.Duration) <-chan error {
	produced := make(chan error, 1)
	go func() {
		newProducer := func() (*kgo.Client, error) {
			// Not idempotent: an idempotent producer needs the broker's
			// transaction coordinator, which can take long to load after a
			// restart.
			return kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordRetries(1<<30), kgo.DisableIdempotentWrite())
		}
		cl, err := newProducer()
		if err != nil {
			produced <- err
			return
		}
		defer func() { cl.Close() }()
		const chunk = 100
		tick := time.Duration(float64(time.Second) * chunk / float64(rate))
		for i := 0; i < len(records); i += chunk {
			next := time.Now().Add(tick)
			pending := records[i:min(i+chunk, len(records))]
			// A broker going down can fail records (a connection cut right
			// after a request is not retried by the client).
			var lastErr error
			giveUp := time.Now().Add(guard)
			for len(pending) > 0 {
				if time.Now().After(giveUp) {
					produced <- fmt.Errorf("producing records from %d: %d still failing after %s: %w", i, len(pending), guard, lastErr)
					return
				}
				for _, r := range pending {
					// A produced record keeps the context it was produced with; a
					// retry under an expired one would fail at once.
					r.Partition, r.Offset, r.Context = 0, 0, nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				results := cl.ProduceSync(ctx, pending...)
				cancel()
				var failed []*kgo.Record
				for _, res := range results {
					if res.Err != nil {
						failed, lastErr = append(failed, res.Record), res.Err
					}
				}
				if len(failed) > 0 {
					// A fresh client: the failed one's state may refuse
					// every later attempt.
					cl.Close()
					time.Sleep(time.Second)
					if cl, err = newProducer(); err != nil {
						produced <- err
						return
					}
				}
				pending = failed
			}
			time.Sleep(time.Until(next))
		}
		produced <- nil
	}()
	return produced
}
