// Package graph is the untyped form of a topology that weir's runtime
// executes. The typed builders (package processor, and the DSL of package
// kstream on top of it) produce a [Graph]; the runtime splits it into
// sub-topologies, creates one set of node instances per task and feeds
// them records.
//
// Types stay out of this package on purpose: every node carries a
// constructor that closes over its type parameters, and the instances it
// builds talk to their children through typed interfaces, so the per-record
// path never goes through an interface{} assertion. The only untyped step is
// wiring children to parents once per task.
package graph

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/internal/statelog"
)

// Kind is the role of a node.
type Kind int

const (
	// KindSource reads one topic.
	KindSource Kind = iota
	// KindProcessor runs user code.
	KindProcessor
	// KindSink writes one topic.
	KindSink
)

func (k Kind) String() string {
	switch k {
	case KindSource:
		return "source"
	case KindProcessor:
		return "processor"
	case KindSink:
		return "sink"
	}
	return "unknown"
}

// Node is one node of the graph.
type Node struct {
	Name     string
	Kind     Kind
	Parents  []*Node
	Children []*Node

	// Topic is the topic a source reads or a sink writes. For an internal
	// topic it is the user-given name, and the real topic is
	// InternalTopic(applicationID, Topic).
	Topic    string
	Internal bool
	// Dynamic marks a sink that chooses its topic per record; its Topic
	// is empty, and its topics are neither checked nor created at start.
	Dynamic bool

	// Stores names the state stores a processor uses.
	Stores []string

	// Keys and Values are a sink's serdes when their bytes carry a schema
	// registry id (see [SchemaSerde]); nil otherwise and for other kinds.
	Keys, Values SchemaSerde

	// New creates the node's instance for one task. children holds the
	// instances of n.Children in the same order; each implements the typed
	// input interface that n forwards to. Called children first.
	New func(env TaskEnv, children []Instance) (Instance, error)
}

// Repartition is an internal topic between two sub-topologies.
type Repartition struct {
	Name       string // user-given; the topic is InternalTopic(app, Name)
	Partitions int32  // 0: the largest partition count of the writing sub-topology's sources
}

// StoreKind is the type of a state store.
type StoreKind string

const (
	KeyValueStore StoreKind = "key-value"
	WindowStore   StoreKind = "window"
	SessionStore  StoreKind = "session"
	// TTLStore is a key-value store whose entries expire by stream time
	// (processor.TTL); its changelog is compacted like a key-value
	// store's, expiry sending the tombstones.
	TTLStore StoreKind = "ttl"
	// VersionedStore is a key-value store that keeps each key's versions
	// (processor.Versioned), one entry per version; its changelog is
	// compacted like a key-value store's.
	VersionedStore StoreKind = "versioned"
)

// Store is a state store: local state of one sub-topology, partitioned
// like its tasks, with a changelog topic
// ChangelogTopic(applicationID, Name).
type Store struct {
	Name  string
	Kind  StoreKind
	Users []*Node // processors that use it
	// KeyFormat and ValueFormat identify the store's serdes (see
	// SerdeFormat), for the topology descriptor: a changed key format
	// means the stored keys cannot be found again.
	KeyFormat, ValueFormat string
	// Retention bounds window and session stores; 0 for key-value and
	// TTL stores.
	Retention time.Duration
	// Keys and Values are the store's serdes when their bytes carry a
	// schema registry id (see [SchemaSerde]); nil otherwise.
	Keys, Values SchemaSerde
	// Source, when set, is the input topic whose records are the store's
	// contents (a table read from a topic): when the topic is compacted
	// it serves as the store's changelog, and no changelog topic is
	// written (Layout.SourceChangelog).
	Source string
	// PartitionKeyed reports that the store's keys (the user key part of
	// a window, session or versioned store's) are the keys its
	// sub-topology's input is partitioned by, so that a rescale can move
	// each entry to the partition of its key.
	PartitionKeyed bool
	// KeyLayout, for a key-value store of the DSL's own whose keys embed
	// the partitioning key (suppression buffers, join buffers, foreign-key
	// subscriptions), says where that key sits; the zero layout says the
	// key is the whole stored key. Set through [KeyLayoutOf].
	KeyLayout KeyLayout
}

// SchemaSerde is what the runtime needs of a serde whose bytes carry the
// id of a schema in a schema registry, such as serde.AvroSerde: before any
// task starts, the runtime registers the serde's schema under the right
// subject and tells the serde the id to write. The graph holds serdes as
// this interface only, so nothing here depends on a serde package.
type SchemaSerde interface {
	// Schema returns the schema's text.
	Schema() string
	// Subject returns the subject the serde registers under for topic.
	Subject(topic string) string
	// UseID makes the serde write id for topic from now on, without
	// asking its registry.
	UseID(topic string, id int)
}

// SerdeFormat identifies a serde for the topology descriptor by its Go
// type ("serde.stringSerde", "*serde.AvroSerde[main.Profile]"). A registry
// serde's schema is left out: the registry checks its evolution (and a
// key schema's encoding) at start, and a schema's text changes with
// changes that keep its encoding, such as a doc.
func SerdeFormat(s any) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("%T", s)
}

// SchemaSerdeOf returns s as a SchemaSerde, or nil if it is not one.
func SchemaSerdeOf(s any) SchemaSerde {
	if ss, ok := s.(SchemaSerde); ok {
		return ss
	}
	return nil
}

// GlobalStore is a key-value store that every instance keeps whole: all
// partitions of Topic, read as they are (the topic is its changelog; a
// null value deletes its key), restored before any task starts and kept
// current while the application runs. Its processors read it from any
// task; none writes it.
type GlobalStore struct {
	Name  string
	Topic string
	Users []*Node // processors that read it
	// KeyFormat and ValueFormat identify the store's serdes (see
	// SerdeFormat).
	KeyFormat, ValueFormat string
	// Keys and Values are the store's serdes when their bytes carry a
	// schema registry id (see [SchemaSerde]); nil otherwise.
	Keys, Values SchemaSerde
}

// Graph is a whole topology, nodes in the order they were added.
type Graph struct {
	Nodes        []*Node
	Repartitions []*Repartition
	Stores       []*Store
	Globals      []*GlobalStore
}

// Global returns the global store name, nil if there is none.
func (g *Graph) Global(name string) *GlobalStore {
	for _, s := range g.Globals {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ChangelogTopic returns the changelog topic of store for application app:
// "<app>-<store>-changelog".
func ChangelogTopic(app, store string) string { return app + "-" + store + "-changelog" }

// RepartitionSuffix ends the names of repartition topics.
const RepartitionSuffix = "-repartition"

// InternalTopic returns the topic weir uses for the internal topic name of
// application app: "<app>-<name>-repartition".
func InternalTopic(app, name string) string { return app + "-" + name + RepartitionSuffix }

// Instance is a node's instance inside one task.
type Instance interface {
	// Init runs once after every instance of the task exists, parents first.
	Init() error
	// Close runs once when the task closes, parents first.
	Close() error
}

// RawRecord is a record as read from Kafka, before deserialization. Its
// byte slices belong to the runtime and are valid only during the call
// that receives them.
type RawRecord struct {
	Key, Value []byte
	Timestamp  time.Time
	Headers    []Header
	Topic      string
	Partition  int32
	Offset     int64
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// SourceInstance is the instance of a source node. The runtime decodes the
// head record of each of a task's partitions to learn its timestamp, then
// processes the one with the smallest timestamp.
type SourceInstance interface {
	Instance
	// Decode deserializes raw and extracts its event time, keeping the typed
	// record until Process. A *DecodeError tells what failed. raw is the
	// runtime's: Decode must not keep it (its byte slices it may).
	Decode(raw *RawRecord) (time.Time, error)
	// Process forwards the record of the last successful Decode.
	Process() error
}

// DecodeError is a record that could not be turned into a typed record.
type DecodeError struct {
	Stage string // "key", "value" or "timestamp"
	Err   error
}

func (e *DecodeError) Error() string { return "cannot decode " + e.Stage + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// PunctuationType selects the clock of a punctuator.
type PunctuationType int

const (
	// StreamTime punctuators fire as the task's stream time advances.
	StreamTime PunctuationType = iota
	// WallClockTime punctuators fire on the system clock.
	WallClockTime
)

// String returns "stream-time" or "wall-clock".
func (p PunctuationType) String() string {
	switch p {
	case StreamTime:
		return "stream-time"
	case WallClockTime:
		return "wall-clock"
	}
	return "unknown"
}

// Metadata describes the input record being processed.
type Metadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// TaskEnv is what the runtime gives a task's node instances.
type TaskEnv interface {
	// Context is cancelled when the task closes.
	Context() context.Context
	ApplicationID() string
	TaskID() string
	Partition() int32
	// Metadata returns the record being processed; false in a punctuator.
	Metadata() (Metadata, bool)
	// StreamTime is the largest event time the task has seen.
	StreamTime() time.Time
	// ResumedStreamTime is the stream time the task committed before it
	// started here (after a restart or a move), zero on a first start:
	// where the stream time a processor observes starts from (see
	// internal/streamtime).
	ResumedStreamTime() time.Time
	// InputKeyNull reports whether the Kafka key of the input record
	// being processed is null (see NullKeyGuard); false in a punctuator.
	InputKeyNull() bool
	// NextVersion returns a version for a table update the task emits:
	// larger than every version the task gave before, also across a
	// restart and a move to another instance.
	NextVersion() uint64
	// Schedule runs fn every interval on the chosen clock until cancel.
	Schedule(node string, interval time.Duration, typ PunctuationType, fn func(time.Time) error) (cancel func(), err error)
	// Send hands a serialized record to the task's producer. partition < 0
	// partitions by key with Kafka's murmur2 partitioner. internal means
	// topic is an internal topic name to be expanded.
	Send(topic string, internal bool, key, value []byte, ts time.Time, headers []Header, partition int32) error
	// PartitionCount returns the number of partitions of a sink's topic.
	PartitionCount(topic string, internal bool) (int32, error)
	// Store returns the task's partition of a state store that node may
	// use. The Bytes it returns implements NullKeyGuard. An error means
	// that the topology does not give node that store: a wiring mistake,
	// which the caller reports as a TopologyError.
	Store(node, name string) (statelog.Bytes, error)
	Logger() *slog.Logger
	// CountLate counts one input record dropped because it arrived after
	// its window had closed (weir_records_late_total{thread,task}).
	// Windowed operators call it once per dropped record; the caller logs.
	CountLate()
	// CacheBudget bounds the record caches of the instance; nil means
	// caching is off (Config.CacheMaxBytes 0, or a test driver).
	CacheBudget() *CacheBudget
}

// Flusher is a node instance that holds records back until its task
// commits (a record cache). The task calls Flush before each commit,
// parents first, as a punctuation named after the node; Close drops
// whatever is still held (the task went back to its last commit).
type Flusher interface {
	Instance
	Flush() error
	// NodeName names the node whose records a flush forwards.
	NodeName() string
}

// CacheBudget is the byte budget that the record caches of an instance
// share. It is safe for concurrent use.
type CacheBudget struct {
	max  int64
	used atomic.Int64
}

// NewCacheBudget returns a budget of max bytes.
func NewCacheBudget(max int64) *CacheBudget { return &CacheBudget{max: max} }

// Take counts n more bytes held and reports whether the budget is now
// exceeded: the caller should forward some of what it holds.
func (b *CacheBudget) Take(n int64) (over bool) { return b.used.Add(n) > b.max }

// Over reports whether more is held than the budget allows.
func (b *CacheBudget) Over() bool { return b.used.Load() > b.max }

// Give counts n bytes no longer held.
func (b *CacheBudget) Give(n int64) { b.used.Add(-n) }

// Used returns the bytes held now.
func (b *CacheBudget) Used() int64 { return b.used.Load() }

// NullKeyGuard applies the runtime's rule for records with a null Kafka
// key to the keys of a store. While such a record is processed, a write
// whose key is empty (the key serde's encoding of what a null key decodes
// to, such as serde.String's "") is dropped, counted and logged, and a read
// of the empty key is a miss: Kafka Streams drops null-key records before
// stateful operations, and storing them would pile every one of them onto
// one key.
//
// The Bytes that TaskEnv.Store returns applies the rule to the keys it is
// given, which for a key-value store are the user's keys. A window or
// session store gives it composite keys (a prefix, the user key and
// times), never empty, and its expiry deletes keys the record never named;
// so such a store asks the guard about the user key itself, before
// composing it.
type NullKeyGuard interface {
	// NullKey reports whether key, a serialized user key, is the empty key
	// of an input record whose Kafka key was null: a read of it is a miss.
	// False outside the processing of an input record (in punctuators).
	NullKey(key []byte) bool
	// DropNullKey reports the same for a write, which the caller then
	// skips; when it reports true, the runtime has counted and logged the
	// dropped write.
	DropNullKey(key []byte) bool
}

// NodeError is an error raised by a node; the runtime adds the task and the
// input record's coordinates.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return "node " + e.Node + ": " + e.Err.Error() }
func (e *NodeError) Unwrap() error { return e.Err }
