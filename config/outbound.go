package config

import "time"

// Prefetch bounds fetch-on-event: the reads a prefetcher (a doorbell) makes
// from a target before its event's transaction.
type Prefetch struct {
	// MaxAttempts is how many times one event's prefetch may fail
	// transiently (5xx, 429, timeout, connection refused) while the source
	// answers other events' prefetches, before the event is dead-lettered
	// with reason source_unavailable (its partition moves on; dlq redrive
	// re-applies it). Failures while the source answers nobody (an outage)
	// do not count: the batch is retried with backoff, as for any transient
	// fault.
	MaxAttempts int `mapstructure:"max_attempts"`
}

// The defaults of the outbound keys.
const (
	// OutboxMaxAttemptsDefault (outbox.max_attempts) is a backstop for
	// short waits: at the default retry.max of 30 s, 10,000 attempts take
	// longer than outbox.max_age, so the age decides.
	OutboxMaxAttemptsDefault = 10000
	// OutboxMaxAgeDefault (outbox.max_age) gives a target as long to come
	// back as upstream producers are given to retry one event
	// (upstream.max_retry_horizon's default).
	OutboxMaxAgeDefault = 72 * time.Hour
	// PrefetchMaxAttemptsDefault (prefetch.max_attempts): with the default
	// retry backoff (100 ms, ×1.5, jittered), ten counted failures hold a
	// partition for about ten seconds.
	PrefetchMaxAttemptsDefault = 10
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
