package config

import (
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/outbox"
)

// The defaults of the outbound keys: the engine's own, named here for the
// configuration (one value each).
const (
	// OutboxMaxAttemptsDefault (outbox.max_attempts) is a backstop for
	// short waits: at the default retry.max of 30 s, 10,000 attempts take
	// longer than outbox.max_age, so the age decides.
	OutboxMaxAttemptsDefault = outbox.MaxAttemptsDefault
	// OutboxMaxAgeDefault (outbox.max_age) gives a target as long to come
	// back as upstream producers are given to retry one event
	// (upstream.max_retry_horizon's default).
	OutboxMaxAgeDefault = outbox.MaxAgeDefault
	// PrefetchMaxAttemptsDefault (prefetch.max_attempts): the first failure
	// is not counted, so with the default retry backoff (100 ms growing
	// ×1.5 to retry.max) one failing resource holds its partition for 11
	// attempts, about 15 s; when its batch-mates' reads land after its own
	// in some rounds, those rounds count in the next one, up to 21 attempts
	// (a few minutes).
	PrefetchMaxAttemptsDefault = handlers.PrefetchMaxAttemptsDefault
)

func (c Config) validateOutbound(v *validator) {
	if c.Outbox.MaxAttempts <= 0 {
		v.intBetween("outbox.max_attempts", int64(c.Outbox.MaxAttempts), 1, 1<<31-1)
	}
	v.positiveDuration("outbox.max_age", c.Outbox.MaxAge)
	if c.Prefetch.MaxAttempts <= 0 {
		v.intBetween("prefetch.max_attempts", int64(c.Prefetch.MaxAttempts), 1, 1<<31-1)
	}
}
