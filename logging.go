package weir

import (
	"context"
	"log/slog"
)

// minLevel passes the lines of h at level min and above, and drops the
// rest without building them. The default Config.Logger is one around
// slog.Default()'s handler at warning level: a silent default once hid an
// application that aborted every transaction while it looked healthy.
type minLevel struct {
	min slog.Level
	h   slog.Handler
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}

func (m minLevel) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < m.min { // a caller that did not ask Enabled
		return nil
	}
	return m.h.Handle(ctx, r)
}

func (m minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{min: m.min, h: m.h.WithAttrs(attrs)}
}

func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{min: m.min, h: m.h.WithGroup(name)}
}
