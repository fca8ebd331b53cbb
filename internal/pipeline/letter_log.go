package pipeline

import (
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/event"
)

// LetterRef names a dead-lettered record without its content.
type LetterRef struct {
	Topic     string
	Partition int32
	Offset    int64
	EventKey  string
	Reason    event.Reason
}

// logLetters logs one line per dead letter of a committed batch: where it
// came from, its event key and reason, never its payload or error text
// (either can carry data; `dlq show` has them).
func (a *Applier) logLetters(letters []LetterRef) {
	for _, l := range letters {
		a.log.Warn("event dead-lettered; see `dlq list --reason` and `dlq show ID`",
			zap.String("reason", string(l.Reason)), zap.String("event_id", truncateKey(l.EventKey)),
			zap.String("topic", l.Topic), zap.Int32("partition", l.Partition), zap.Int64("offset", l.Offset))
	}
}
