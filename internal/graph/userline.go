package graph

import "context"

// userLine is the context key that marks a log line user code wrote
// through processor.Context.Logger.
type userLine struct{}

// UserLine returns ctx marked as the context of a line that user code
// logged (processor.Context.Logger passes it to the handler), so that a
// handler of weir's own can tell the lines weir writes, which carry no
// record data, from those a processor writes, whose contents are the
// processor's choice: the operator console lists only weir's.
func UserLine(ctx context.Context) context.Context { return context.WithValue(ctx, userLine{}, true) }

// IsUserLine reports whether ctx is the context of a line user code
// logged (see UserLine).
func IsUserLine(ctx context.Context) bool {
	v, _ := ctx.Value(userLine{}).(bool)
	return v
}
