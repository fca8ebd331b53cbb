package consumer

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kerr"
)

// retry calls fn until it succeeds or ctx is done, sleeping a capped,
// jittered exponential backoff between attempts.
func retry(ctx context.Context, initial, maxInterval time.Duration, fn func() error) error {
	bo := newBackoff(initial, maxInterval)
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// newBackoff is the capped, jittered exponential backoff every retry of the
// consumer uses.
func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = initial
	bo.MaxInterval = maxInterval
	bo.RandomizationFactor = 0.5
	return bo
}

func kerrForCode(code int16) error { return kerr.ErrorForCode(code) }
