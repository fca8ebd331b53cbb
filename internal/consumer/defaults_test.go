package consumer_test

import (
	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/consumer"
)

// withDefaults fills the options a test leaves unset with the configuration
// defaults, as the worker's composition root does.
func withDefaults(o consumer.Options) consumer.Options {
	def := config.Default()
	if o.BatchMaxRecords == 0 {
		o.BatchMaxRecords = def.Consumer.BatchMaxRecords
	}
	if o.RevokeTimeout == 0 {
		o.RevokeTimeout = def.Consumer.RevokeTimeout
	}
	if o.MetadataMaxAge == 0 {
		o.MetadataMaxAge = def.Kafka.MetadataMaxAge
	}
	if o.RetryInitial == 0 {
		o.RetryInitial = def.Retry.Initial
	}
	if o.RetryMax == 0 {
		o.RetryMax = def.Retry.Max
	}
	return o
}
