package console

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/internal/graph"
)

// Bounds of one captured log line: its message and each attribute's
// value are cut at these many bytes, and at most maxEventAttrs
// attributes are kept.
const (
	maxEventMessage = 512
	maxEventValue   = 256
	maxEventAttrs   = 16
)

// Events keeps the last warnings and errors an instance logged, for the
// console's list of the last errors. Capture wraps a log handler so that
// it records into Events.
type Events struct{ r *ring[capturedEvent] }

// capturedEvent is an Event with its error text, which Instance sends only
// to requests allowed to see it.
type capturedEvent struct{ Event }

// NewEvents returns a record of the last n warnings and errors.
func NewEvents(n int) *Events { return &Events{r: newRing[capturedEvent](n)} }

// Last returns the events, newest first; without details their error
// text is left out.
func (e *Events) Last(details bool) []Event {
	all := e.r.all()
	out := make([]Event, 0, len(all))
	for _, ev := range slices.Backward(all) {
		v := ev.Event
		if !details {
			v.Error = ""
		}
		out = append(out, v)
	}
	return out
}

// Capture returns a handler that passes every record to h, as h would
// handle it, and records each of level Warn or above into e, except the
// lines user code logged through processor.Context.Logger (marked by
// graph.UserLine): what those carry is the processor's choice, and the
// console shows only weir's own lines, which carry coordinates and no
// record data.
func (e *Events) Capture(h slog.Handler) slog.Handler { return &captureHandler{h: h, e: e} }

// captureHandler is the handler of Events.Capture.
type captureHandler struct {
	h      slog.Handler
	e      *Events
	attrs  []slog.Attr // from WithAttrs, their keys qualified by groups
	groups string      // the open groups, "a.b."
}

func (c *captureHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || c.h.Enabled(ctx, l)
}

func (c *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && !graph.IsUserLine(ctx) {
		ev := Event{Time: r.Time.UnixMilli(), Level: r.Level.String(), Message: cut(r.Message, maxEventMessage)}
		if r.Time.IsZero() {
			ev.Time = time.Now().UnixMilli()
		}
		for _, a := range c.attrs {
			ev.add(a, "")
		}
		r.Attrs(func(a slog.Attr) bool {
			ev.add(a, c.groups)
			return true
		})
		c.e.r.push(capturedEvent{ev})
	}
	if c.h.Enabled(ctx, r.Level) {
		return c.h.Handle(ctx, r)
	}
	return nil
}

func (c *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	cp := *c
	cp.h = c.h.WithAttrs(as)
	cp.attrs = slices.Clone(c.attrs)
	for _, a := range as {
		a.Key = c.groups + a.Key
		cp.attrs = append(cp.attrs, a)
	}
	return &cp
}

func (c *captureHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return c
	}
	cp := *c
	cp.h = c.h.WithGroup(name)
	cp.groups = c.groups + name + "."
	return &cp
}

// add records attribute a, its key prefixed: an error value becomes the
// event's Error, a group its members.
func (ev *Event) add(a slog.Attr, prefix string) {
	v := a.Value.Resolve()
	key := prefix + a.Key
	switch {
	case v.Kind() == slog.KindGroup:
		for _, g := range v.Group() {
			ev.add(g, key+".")
		}
		return
	case a.Key == "error" || a.Key == "err":
		if ev.Error == "" {
			ev.Error = cut(v.String(), maxEventMessage)
		}
		return
	case v.Kind() == slog.KindAny:
		if err, ok := v.Any().(error); ok {
			if err != nil && ev.Error == "" {
				ev.Error = cut(err.Error(), maxEventMessage)
			}
			return
		}
	}
	if a.Key == "" || len(ev.Attrs) >= maxEventAttrs {
		return
	}
	if ev.Attrs == nil {
		ev.Attrs = map[string]string{}
	}
	ev.Attrs[key] = cut(v.String(), maxEventValue)
}

// cut returns s cut to at most n bytes, on a rune boundary, marked "…"
// when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
