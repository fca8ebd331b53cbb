package service

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/redact"
)

// newLogger builds the process logger: JSON for production, console for
// people, both on w (stderr), so stdout stays clean for command output.
// Every line is redacted on its way to w (redact.Writer): the defence for
// an error that holds a URL and was logged without being redacted where it
// was made.
func newLogger(cfg config.Log, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	var enc zapcore.Encoder
	switch cfg.Format {
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.TimeKey = "time"
		enc = zapcore.NewJSONEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(redact.Writer(w))), level)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel)), nil
}

// redactingLogger is a program's own logger for an embedded worker, with
// what the worker logs redacted before it reaches the program's core (its
// writer is the program's, so redact.Writer cannot be put in front of it):
// the message, and string, byte-string, stringer and error fields.
func redactingLogger(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return redactingCore{c} }))
}

type redactingCore struct{ zapcore.Core }

func (c redactingCore) With(fields []zapcore.Field) zapcore.Core {
	return redactingCore{c.Core.With(redactFields(fields))}
}

// Check lets the program's core decide (its level, sampling, hooks, tee
// branches) on the entry with its message redacted, and writes what it
// accepted with the fields redacted.
func (c redactingCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	ent.Message = redact.Text(ent.Message)
	inner := c.Core.Check(ent, nil)
	if inner == nil {
		return ce
	}
	return ce.AddCore(ent, checkedWriter{inner})
}

// checkedWriter writes an entry the program's core has checked, with the
// fields redacted.
type checkedWriter struct{ ce *zapcore.CheckedEntry }

func (w checkedWriter) Enabled(zapcore.Level) bool        { return true }
func (w checkedWriter) With([]zapcore.Field) zapcore.Core { return w }
func (w checkedWriter) Sync() error                       { return nil }
func (w checkedWriter) Write(_ zapcore.Entry, fields []zapcore.Field) error {
	w.ce.Write(redactFields(fields)...)
	return nil
}
func (w checkedWriter) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(ent, w)
}

func (c redactingCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	ent.Message = redact.Text(ent.Message)
	return c.Core.Write(ent, redactFields(fields))
}

func redactFields(fields []zapcore.Field) []zapcore.Field {
	out := make([]zapcore.Field, len(fields))
	for i, f := range fields {
		switch f.Type {
		case zapcore.StringType:
			f.String = redact.Text(f.String)
		case zapcore.ByteStringType:
			if b, ok := f.Interface.([]byte); ok {
				f.Interface = []byte(redact.Text(string(b)))
			}
		case zapcore.StringerType:
			if s, ok := f.Interface.(fmt.Stringer); ok {
				if text, ok := stringOf(s); ok {
					f = zap.String(f.Key, redact.Text(text))
				}
			}
		case zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok {
				f.Interface = redact.Error(err)
			}
		}
		out[i] = f
	}
	return out
}

// stringOf is s.String(), or false when it panics (a nil pointer): the
// field is then left for zap, which reports such a panic in the field.
func stringOf(s fmt.Stringer) (text string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return s.String(), true
}
