package processor

import (
	"context"
	"log/slog"

	"github.com/weirstream/weir/internal/graph"
)

// recordHandler is the handler of a processor's logger ([Context.Logger]):
// it adds the coordinates of the input record being processed (topic,
// partition, offset; never key or value) to each line when the line is
// logged, reading them from the task. So one logger per node instance
// serves every record: a record costs nothing when nobody logs, and a
// disabled level builds no log record at all.
type recordHandler struct {
	h   slog.Handler
	env graph.TaskEnv
}

func (h *recordHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.h.Enabled(ctx, l)
}

func (h *recordHandler) Handle(ctx context.Context, r slog.Record) error {
	if md, ok := h.env.Metadata(); ok {
		// r is the logger's own copy, made for this line alone.
		r.AddAttrs(slog.String("topic", md.Topic), slog.Int("partition", int(md.Partition)), slog.Int64("offset", md.Offset))
	}
	// Marked as the processor's: the operator console lists weir's own
	// lines only.
	return h.h.Handle(graph.UserLine(ctx), r)
}

func (h *recordHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recordHandler{h: h.h.WithAttrs(attrs), env: h.env}
}

// WithGroup keeps adding the coordinates, which then land in the group:
// a handler cannot add attributes outside the groups opened below it.
func (h *recordHandler) WithGroup(name string) slog.Handler {
	return &recordHandler{h: h.h.WithGroup(name), env: h.env}
}
