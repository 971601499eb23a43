package processor

import (
	"context"
	"log/slog"
	"time"

	"github.com/weirstream/weir/internal/graph"
)

// Processor is user code in a topology: it receives records of type
// Record[KIn, VIn] and forwards records of type Record[KOut, VOut] through
// its Context.
//
// weir creates one Processor per task from the supplier given to
// [Topology.AddProcessor] and calls it from one goroutine. An error from
// any method stops the application with the error, the node's name and the
// input record's coordinates (never its contents): a weir.RecordError when
// Process fails. A mistake in the topology's wiring that shows only while
// it runs (see [Context.ForwardTo]) is a weir.TopologyError instead, since
// no record is to blame.
type Processor[KIn, VIn, KOut, VOut any] interface {
	// Init runs once before the first record, after the task's stores are
	// ready; it is the place to schedule punctuators.
	Init(ctx Context[KOut, VOut]) error
	// Process handles one record.
	Process(ctx Context[KOut, VOut], rec Record[KIn, VIn]) error
	// Close runs once when the task closes (on rebalance or shutdown).
	Close() error
}

// Context is a processor's view of its task.
//
// It is a context.Context, cancelled when the task closes, to hand to the
// calls a processor makes. A Context is valid only inside the Processor
// methods and punctuators of the processor it was given to.
type Context[K, V any] interface {
	context.Context

	// Forward sends rec to every child of the processor, in the order they
	// were added, and returns the first error. A processor should return
	// that error; if it does not, the runtime still sees the failure (a
	// record Kafka refused or could not take is never committed past, see
	// weir.Config.ProductionErrors): ignoring it only hides its cause.
	Forward(rec Record[K, V]) error
	// ForwardTo sends rec to one child only, named by a handle taken with
	// [Node.Child] while the topology was built (so weir.New has checked
	// that the child exists), and returns its error as Forward does. A
	// zero handle, or one of another node, is the topology's fault: the
	// application stops with a weir.TopologyError, whatever the processor
	// does with the error ForwardTo returns, and it is never reported as a
	// failed record. Kafka Streams' forward(record, childName).
	ForwardTo(child Child[K, V], rec Record[K, V]) error
	// Metadata describes the input record being processed. It reports
	// false inside a punctuator, which runs outside any record.
	Metadata() (Metadata, bool)
	// StreamTime is the largest event time the task has processed.
	StreamTime() time.Time
	// NextVersion returns a new version for an update of a table the
	// processor emits, as the DSL's tables stamp theirs (see
	// [VersionHeader]): larger than every version the task gave before,
	// across restarts, moves between instances and a reset or fork of
	// the application. Every key of a task draws from the one sequence,
	// and a key belongs to one task, so a key's versions increase.
	NextVersion() uint64
	// Schedule calls fn every interval, on the task's stream time or on the
	// wall clock, until the returned cancel function is called or the task
	// closes. fn gets the time that triggered it. Stream-time punctuators
	// fire only when records advance stream time: at most once per record,
	// however far it jumps. interval must be at least 1 ms.
	Schedule(interval time.Duration, typ PunctuationType, fn Punctuator) (cancel func(), err error)
	// ApplicationID returns the application's id.
	ApplicationID() string
	// TaskID names the task, "<sub-topology>_<partition>".
	TaskID() string
	// Logger returns the processor's logger: weir.Config.Logger with the
	// attributes thread, task and node, and on each line logged while an
	// input record is processed (in Process, and in a child's Process it
	// forwards to) that record's topic, partition and offset, never its
	// key or value; what else a line carries is up to the processor. The
	// logger is made once per node and task: taking it, or not logging,
	// costs nothing per record. Like the Context, use it from the
	// processor's methods and punctuators only.
	Logger() *slog.Logger

	// StoreContext lets store specs open the task's stores.
	StoreContext
}

// Punctuator is a function scheduled with [Context.Schedule].
type Punctuator func(t time.Time) error

// PunctuationType selects the clock that drives a punctuator.
type PunctuationType int

const (
	// StreamTime punctuators fire as the task's stream time (event time)
	// passes each interval boundary. Kafka Streams' STREAM_TIME.
	StreamTime = PunctuationType(graph.StreamTime)
	// WallClockTime punctuators fire on the system clock, checked between
	// records. Kafka Streams' WALL_CLOCK_TIME.
	WallClockTime = PunctuationType(graph.WallClockTime)
)

// String returns "stream-time" or "wall-clock".
func (p PunctuationType) String() string { return graph.PunctuationType(p).String() }

// Func returns a supplier of stateless processors that call fn for every
// record and need no Init or Close.
func Func[KIn, VIn, KOut, VOut any](fn func(ctx Context[KOut, VOut], rec Record[KIn, VIn]) error) func() Processor[KIn, VIn, KOut, VOut] {
	return func() Processor[KIn, VIn, KOut, VOut] { return funcProcessor[KIn, VIn, KOut, VOut](fn) }
}

type funcProcessor[KIn, VIn, KOut, VOut any] func(ctx Context[KOut, VOut], rec Record[KIn, VIn]) error

func (funcProcessor[KIn, VIn, KOut, VOut]) Init(Context[KOut, VOut]) error { return nil }
func (f funcProcessor[KIn, VIn, KOut, VOut]) Process(ctx Context[KOut, VOut], rec Record[KIn, VIn]) error {
	return f(ctx, rec)
}
func (funcProcessor[KIn, VIn, KOut, VOut]) Close() error { return nil }
