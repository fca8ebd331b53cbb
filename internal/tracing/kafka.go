package tracing

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
)

// KafkaHooks are franz-go's kotel hooks for a client: a "<topic> receive"
// span per fetched record (a child of the producer's span when the record
// has a traceparent header) and a "<topic> publish" span per produced
// record, whose context the record then carries in its traceparent header
// (the dead-letter relay's). Off, nil.
func (t *Tracing) KafkaHooks(group string) []kgo.Hook {
	if !t.Enabled() {
		return nil
	}
	opts := []kotel.TracerOpt{kotel.TracerProvider(t.tp), kotel.TracerPropagator(t.prop)}
	if group != "" {
		opts = append(opts, kotel.ConsumerGroup(group))
	}
	return kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(opts...))).Hooks()
}
