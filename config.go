package weir

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/hostport"
	"github.com/weirstream/weir/schema"
)

// Config configures an application. The zero value of every field means
// its documented default; ApplicationID and Brokers are required.
type Config struct {
	// ApplicationID names the application: it is the consumer group id and
	// the prefix of every internal topic and of the state directory. Kafka
	// Streams' application.id. Letters, digits, '.', '_' and '-'.
	ApplicationID string

	// Brokers are the bootstrap servers, host:port. Required.
	Brokers []string

	// StateDir holds local state, under StateDir/<ApplicationID>. One
	// running instance per directory: a second one fails at start. Default
	// filepath.Join(os.TempDir(), "weir"). Kafka Streams' state.dir.
	StateDir string

	// Threads is the number of stream threads of this instance, each a
	// consumer group member with its own tasks. Default 1.
	Threads int

	// Guarantee is the processing guarantee. Default ExactlyOnce.
	Guarantee Guarantee

	// CommitInterval is how often a thread commits while it keeps up with
	// its input. Default 100 ms under ExactlyOnce and 30 s under
	// AtLeastOnce, as in Kafka Streams' commit.interval.ms. Minimum 1 ms.
	CommitInterval time.Duration

	// MaxCommitInterval bounds how far a thread that is behind spaces its
	// commits. A thread is behind when it had input to process for the
	// whole interval since its last commit, never waiting for more: it
	// then doubles the interval to its next commit, up to
	// MaxCommitInterval; the first time it waits for input, it commits
	// every CommitInterval again. Fewer commits while catching up mean
	// fewer transactions' round trips and, with record caches, fewer
	// updates of a key written (each key's latest per commit), so a
	// backlog is worked off sooner; what it costs is up to
	// MaxCommitInterval before results of records that were waiting in
	// the backlog anyway are visible. Kafka Streams' caches fold updates
	// over its similarly stretched commits under load.
	//
	// Default max(CommitInterval, 1 s): 1 s under ExactlyOnce's default,
	// no change to AtLeastOnce's 30 s (and at most half a
	// TransactionTimeout that is set). Set it to CommitInterval to commit
	// at a fixed interval. It must not be below CommitInterval, and must
	// be below TransactionTimeout.
	MaxCommitInterval time.Duration

	// TransactionTimeout bounds an exactly-once transaction: the broker
	// aborts one left open longer, which is how long read_committed readers
	// wait behind an instance that died mid-transaction without restarting
	// (a restart aborts it at once). It must exceed MaxCommitInterval.
	// Default 10 s, or twice MaxCommitInterval when that is longer.
	// Kafka's transaction.timeout.ms.
	TransactionTimeout time.Duration

	// MaxTaskIdle is how long a task with several input partitions waits
	// for an empty partition before it processes the others, so records
	// are processed in timestamp order across partitions. Default 0: never
	// wait. Kafka Streams' max.task.idle.ms.
	//
	// Whatever its value, when a partition's claim starts and its log
	// holds records the claim has not delivered yet, the task waits for
	// them, at most 1 s (as Kafka Streams waits for every partition's
	// first fetch, KIP-695): a table's rows are read before the stream
	// records that join them.
	MaxTaskIdle time.Duration

	// Queue bounds the records fetched and not yet processed, per input
	// partition. A full queue stops fetching that partition.
	Queue QueueConfig

	// StaticMemberID turns on static group membership (KIP-345): thread i
	// joins with group.instance.id "<StaticMemberID>-<i>", so a restart
	// within Consumer.SessionTimeout does not rebalance the group. It must
	// be unique per instance and stable across its restarts.
	StaticMemberID string

	// StaticMembership turns on static group membership with ids derived
	// from the instance's process id, which the state directory keeps:
	// thread i joins as "<process id>-<i>", so a restart on the same state
	// directory is recognised without any configuration per instance.
	// StaticMemberID, when set, names the members instead.
	//
	// It is off by default. A static member does not leave the group when
	// it stops: its tasks stay assigned to it until it comes back or
	// Consumer.SessionTimeout passes. That makes a rolling restart quiet
	// (no rebalance, no task moves), and it makes a deliberate stop slow
	// to hand over: stop an instance that is not coming back with
	// App.Leave, which removes its members from the group at once (KIP-345).
	// Without static membership a stopping instance leaves the group and
	// its tasks move at once, which is the safer default when stops are
	// not known to be restarts.
	StaticMembership bool

	// StandbyReplicas is how many standby copies of each stateful task's
	// stores the group keeps, each on another instance than the task and
	// than each other (default 0, none). A standby applies the stores'
	// changelogs as they are written (read_committed), so when its task
	// fails over to its instance the restore replays only what the
	// standby had not applied yet (weir_standby_lag_records), not the
	// whole changelog. The group leader places them, spreading the
	// standbys of one instance's tasks over the other instances (so that
	// each survivor of a failure has room for the tasks it holds copies
	// of), then preferring instances that hold the task's state already;
	// the failover goes to the instance most caught up. A task gets fewer copies when the
	// group has fewer other instances. All instances of an application
	// should use the same value: the leader's counts.
	//
	// Each instance updates its standbys on one goroutine, in turn,
	// every 250 ms while they are caught up, reading at most two restore
	// batches at a time; they share the instance's Badger database and
	// its restore client, and their state stays on disk when they are
	// moved away, dropped after Stores.CleanupDelay like a task's.
	StandbyReplicas int

	// MaxWarmups bounds the warm-up tasks one instance holds at a time
	// (default 2; negative: no warm-ups). When the group's balanced plan
	// would move a stateful task from an instance running it to one whose
	// state of it is more than AcceptableRecoveryLag records behind (a
	// new instance, typically), the group leader keeps the task where it
	// runs, beyond balance, and gives the target a warm-up of it
	// instead: a standby that copies the task's stores in the background.
	// Once the warm-up is within AcceptableRecoveryLag, its instance
	// starts a probing rebalance, and the task moves to it and restores
	// only the tail. So scaling out never stops a task for a full
	// restore; the group is balanced once its warm-ups have caught up.
	// A task whose instance failed, and stateless tasks, move at once.
	// Kafka Streams' max.warmup.replicas (KIP-441) bounds the warm-ups of
	// the whole group instead; bounding them per instance bounds what
	// each instance copies at a time, whatever the group's size. All
	// instances of an application should use the same values: the
	// leader's count.
	//
	// Without warm-ups, a task moves where the balanced plan puts it and
	// restores there before it processes again.
	MaxWarmups int

	// AcceptableRecoveryLag is how far behind, in changelog records, an
	// instance's state of a task may be for the task to move to it at
	// once; further behind, it gets a warm-up (MaxWarmups). Default
	// 10,000, as Kafka Streams'. It is compared with the offsets the
	// owner and the target checkpointed, summed over the task's stores;
	// an instance without state of the task is behind by the owner's
	// whole sum, so a task whose changelogs hold fewer records moves at
	// once (its restore is short).
	AcceptableRecoveryLag int64

	// ProbingRebalanceInterval is how often an instance holding warm-ups
	// starts a probing rebalance although none of them has caught up
	// (default 10 minutes): a backstop, since a warm-up that catches up
	// starts one at once. Probes of one instance are at least a second
	// apart.
	ProbingRebalanceInterval time.Duration

	// AdvertisedAddr is the "host:port" at which this instance serves
	// queries of its stores over HTTP: ktable.Handler, mounted by the
	// application at ktable.HandlerPath next to its metrics. Every
	// instance tells the group leader its address, and the leader hands
	// all of them, with the tasks each runs, to every instance, so that a
	// ktable view can forward a lookup to the instance owning the key
	// (StoreReader.Owner, ktable.View.Lookup). Empty (the default): the
	// instance serves no queries and views read only locally.
	AdvertisedAddr string

	// Authorizer decides who may read what through weir's HTTP handlers:
	// the stores the query handler (ktable.Handler) serves, the failure
	// text of /healthz and /readyz (HealthDetails), and the operator
	// console (ConsoleResource). Default nil: every such request is
	// refused (403), and the health endpoints answer with the state's
	// name only. AllowAll opens them to whoever reaches the port; see
	// docs/security.md, "Queries over HTTP".
	Authorizer Authorizer

	// Console configures the operator console that App.Handler serves at
	// /weir/: off unless Console.Enabled is set. See [ConsoleConfig].
	Console ConsoleConfig

	// ClientID starts the client id of every broker connection weir
	// opens: "<ClientID>-<thread>" for thread i's group member,
	// "<ClientID>-<thread>-producer" for its producer, "<ClientID>-admin"
	// and "<ClientID>-restore". Brokers log it and apply quotas by it; set
	// it per instance to tell instances apart there. Default
	// ApplicationID.
	ClientID string

	// Consumer tunes group membership and fetching.
	Consumer ConsumerConfig

	// Topics configures the internal topics weir creates.
	Topics TopicConfig

	// CacheMaxBytes turns record caching on and bounds it: the bytes the
	// record caches of this instance may hold, shared by all its threads.
	// The DSL's aggregations (Count, Reduce, Aggregate, keyed and
	// windowed) and processors that forward through a
	// processor.RecordCache then hold their latest record per key and
	// forward it at the next commit, so a key updated many times in a
	// commit interval produces one output record; past the bound a cache
	// forwards its least recently updated records early. Default 0:
	// caching off, every update forwarded at once (and what weirtest
	// shows is what the broker gets). Kafka Streams'
	// statestore.cache.max.bytes, whose default is 10 MiB (10 << 20).
	CacheMaxBytes int64

	// Stores configures the local state stores: Badger's bounds,
	// encryption at rest, the write buffer, restores and the cleanup of
	// moved tasks' state.
	Stores StoresConfig

	// State is Stores.
	//
	// Deprecated: use Stores (State names the App's lifecycle: [State]).
	// It is read only when Stores is left zero; setting both is refused.
	State StoresConfig

	// AllowDropState names stores whose state this start may drop when
	// the topology changed in a way that would lose or misread it: the
	// store was removed, or its type, key serde or partition count
	// changed (see [CompareDescriptors]). Such a store's changelog topic
	// and local state are deleted and it starts empty (logged). Without
	// it, Run refuses the start with an [*UpgradeError] listing every
	// difference and changes nothing. Meant for one deploy: remove the
	// name once it ran.
	AllowDropState []string

	// Security secures connections to the brokers: TLS and SASL (PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512) for every client weir creates.
	Security Security

	// Net configures connections to the brokers.
	Net NetConfig

	// DeserializationErrors is the policy for input records whose key or
	// value does not deserialize: bad bytes, a wrong magic byte, an
	// unknown schema id. Default Fail. Under Skip and DeadLetter the
	// record never reaches the topology. Kafka Streams'
	// default.deserialization.exception.handler.
	DeserializationErrors ErrorPolicy

	// TimestampErrors is the policy for records whose timestamp extractor
	// fails or gives a negative time. Default Fail.
	TimestampErrors ErrorPolicy

	// ProcessingErrors is the policy for input records on which a
	// processor (or a sink's serde) returns an error. Default Fail: Run
	// returns a *RecordError naming the record and the node. Kafka
	// Streams' processing.exception.handler (KIP-1033).
	//
	// Under ExactlyOnce, Skip and DeadLetter leave no trace of the failed
	// record but the dead-letter record: the transaction is aborted, the
	// tasks replay from their last commit, and the replay passes over the
	// record (each such record costs one aborted transaction, which does
	// not count towards MaxConsecutiveAborts). At least once, what the
	// record did before the error stays (its output was sent, its state
	// changes kept), as in Kafka Streams.
	ProcessingErrors ErrorPolicy

	// MaxConsecutiveAborts bounds the transactions a thread may abort in a
	// row without one committing: a sink topic deleted at run time, or a
	// broker refusing every transaction, must not leave an application
	// aborting forever while it looks alive. Past the bound the thread
	// fails, and with it Run, with the last cause; until then State
	// reports StateDegraded and /readyz fails. Default 10. Exactly once
	// only.
	MaxConsecutiveAborts int

	// ProductionErrors is the policy for output and repartition records
	// that Kafka refuses (a *ProductionError): too large for the topic or
	// the producer, without key for a compacted topic, or invalid. Fail
	// (the default) stops the application with the input record's
	// coordinates; nothing after that record is committed. Skip drops the
	// refused record, logs its coordinates and counts it
	// (weir_records_skipped_total{reason="production"}); the rest of the
	// input record's effects stay. DeadLetter drops it too and writes the
	// input record that produced it to the dead-letter topic, its headers
	// naming the sink and the error; a punctuator's refused record has no
	// input record, and its dead-letter record has headers only. A refused
	// changelog record always fails: state cannot skip a change. Kafka
	// Streams' default.production.exception.handler.
	//
	// Size and compaction are checked before a record is sent, from the
	// topic configurations read at start, so a skipped record costs
	// nothing. A refusal only the broker finds aborts the transaction
	// under exactly once; with Skip the thread's tasks then replay from
	// their last commit without that record (a punctuator's record cannot
	// be recognised in a replay: the punctuator runs again and may produce
	// it again).
	ProductionErrors ErrorPolicy

	// TopicErrors overrides the error policies above for the records of
	// single topics, by topic name: the Deserialization, Timestamp and
	// Processing policies apply to records read from a source topic, the
	// Production policy to records written to a sink topic. A zero policy
	// in ErrorPolicies keeps the application's. For example, dead-letter
	// the poison records of one external feed and fail on the rest:
	//
	//	TopicErrors: map[string]weir.ErrorPolicies{
	//		"partner-orders": {Deserialization: weir.DeadLetter("partner-orders-dlq")},
	//	}
	TopicErrors map[string]ErrorPolicies

	// Registry is the schema registry that checks the schemas of the
	// topology's registry serdes ([github.com/weirstream/weir/serde.Avro]) before Run touches
	// anything; the zero value means no registry, and then a topology
	// with such a serde fails in New. Use the registry the serdes use:
	// weir registers their schemas and they write the ids it gets.
	//
	// At start, before any topic is created, offset committed or state
	// touched, Run registers (or finds) every schema: a store's value
	// schema under "<application id>-<store>-value", whose compatibility
	// level it sets to BACKWARD_TRANSITIVE first (state written by every
	// earlier version must stay readable); a store's key schema under
	// "<application id>-<store>-key", refused if it differs from the
	// latest registered one, since keys are compared as bytes; a sink's
	// schemas under the serde's subject for the topic (TopicNameStrategy
	// by default, "<topic>-key|value"; a key serde left with the default
	// Part gets "<topic>-key"), under the level the registry has for it,
	// and the same rule for keys. A refusal stops Run with a
	// [*SchemaError] and registers nothing. Confluent's
	// schema.registry.url and auto.register.schemas, checked at start.
	Registry schema.Config

	// Logger receives weir's logs and the lines processors log through
	// processor.Context.Logger. weir itself never logs record keys or
	// values. Default: warnings and errors go to the handler of
	// slog.Default() (as it is when New runs), and info and debug lines
	// are dropped, so an application that sets no logger still sees
	// aborted transactions and failed threads. Set a logger to see weir's
	// lifecycle lines (info) or to keep its output apart from yours.
	Logger *slog.Logger

	// Metrics is where the App registers its Prometheus metrics (all named
	// weir_*, labelled with the application id). Default: a registry of
	// the App's own, which App.Handler serves at /metrics, and which also
	// holds the Go runtime and process collectors (go_*, process_*). On a
	// Registerer given here weir registers only its own metrics: add
	// those collectors yourself if you want them (prometheus.DefaultRegisterer
	// has them already). Registering two Apps with the same ApplicationID
	// on one registry fails in New.
	Metrics prometheus.Registerer

	// tls is Security.TLS loaded, set by New: the files are read once.
	tls *tls.Config
}

// QueueConfig bounds one input partition's queue.
type QueueConfig struct {
	// MaxRecords is the most records queued. Default 1000.
	MaxRecords int
	// MaxBytes is the most key and value bytes queued; a single larger
	// record is still admitted into an empty queue. Default 16 MiB.
	MaxBytes int
}

// ConsumerConfig tunes the consumer group.
type ConsumerConfig struct {
	// SessionTimeout is how long the group waits for a silent member
	// before it moves its tasks away. Default 10 s. Kafka's
	// session.timeout.ms.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often members heartbeat. Default a third
	// of SessionTimeout.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds how long a member may take to commit and
	// release revoked tasks. Default 60 s. Kafka's max.poll.interval.ms
	// plays this role in the Java client.
	RebalanceTimeout time.Duration
	// FetchMaxWait is how long the broker holds a fetch for more data.
	// Default 50 ms, short enough for sub-second rebalances.
	FetchMaxWait time.Duration
}

// TopicConfig configures internal topics.
type TopicConfig struct {
	// ReplicationFactor of internal topics. Default 0: the broker's
	// default.replication.factor.
	ReplicationFactor int16
	// PurgeInterval is how often consumed records are deleted from
	// repartition topics (up to the committed offsets). Default 30 s.
	// Kafka Streams' repartition.purge.interval.ms.
	PurgeInterval time.Duration
}

// NetConfig configures broker connections; Config.Security secures them.
type NetConfig struct {
	// DialTimeout bounds connecting to a broker. Default 30 s.
	DialTimeout time.Duration
	// RequestTimeout bounds how long a request waits for the broker's
	// response (sarama's Net.ReadTimeout and WriteTimeout); the
	// connection is then closed and the request's outcome is unknown (a
	// commit whose response is lost is ambiguous: the producer is rebuilt,
	// see the txn package). Fetches wait Consumer.FetchMaxWait on top.
	// Default 30 s; at least 1 s.
	RequestTimeout time.Duration
	// StartupTimeout bounds how long Run waits at start for a broker to
	// answer, so that an orchestrator may start services and brokers in
	// any order, as Kafka Streams waits for its brokers. Run tries again
	// after 200 ms, doubling to at most 10 s, and logs each failed attempt
	// at warn level; meanwhile State is starting and Ready is not closed,
	// and cancelling Run's context ends the wait (Run returns nil). A
	// refused password or certificate (ErrAuthentication, ErrTLS) fails at
	// once: trying the same again cannot succeed. Default 0: wait until
	// the context ends. A negative value tries once.
	StartupTimeout time.Duration
}

const (
	defaultThreads            = 1
	defaultCommitIntervalEOS  = 100 * time.Millisecond
	defaultCommitIntervalALOS = 30 * time.Second
	defaultMaxCommitInterval  = time.Second
	defaultTransactionTimeout = 10 * time.Second
	defaultQueueRecords       = 1000
	defaultQueueBytes         = 16 << 20
	defaultSessionTimeout     = 10 * time.Second
	defaultRebalanceTimeout   = 60 * time.Second
	defaultFetchMaxWait       = 50 * time.Millisecond
	defaultPurgeInterval      = 30 * time.Second
	defaultDialTimeout        = 30 * time.Second
	defaultRequestTimeout     = 30 * time.Second
	defaultMaxAborts          = 10
	defaultMaxWarmups         = 2
	defaultAcceptableLag      = 10_000
	defaultProbingInterval    = 10 * time.Minute
)

// Validate reports every problem of c at once, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("weir: Config.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !reflect.ValueOf(c.State).IsZero() && !reflect.ValueOf(c.Stores).IsZero() {
		bad("State", "deprecated name of Stores; set Stores only")
	}
	c.validateIdentity(bad)
	c.validateCommits(bad)
	c.validateClients(bad)
	c.validatePlacement(bad)
	st := c.stores()
	st.validate(bad)
	c.Security.validate(bad)
	if c.Registry != (schema.Config{}) {
		if err := c.Registry.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("weir: Config.Registry: %w", err))
		}
	}
	c.validatePolicies(bad)
	c.Console.validate(bad)
	return errors.Join(errs...)
}

// complaint reports a bad Config field: its name and what is wrong.
type complaint = func(field, format string, args ...any)

// validateIdentity checks what names the application and reaches its
// cluster.
func (c *Config) validateIdentity(bad complaint) {
	switch {
	case c.ApplicationID == "":
		bad("ApplicationID", "required")
	case !graph.LegalName(c.ApplicationID):
		bad("ApplicationID", "%q: use only letters, digits, '.', '_' and '-'", c.ApplicationID)
	case len(c.ApplicationID) > 200:
		bad("ApplicationID", "longer than 200 characters; internal topic names would exceed Kafka's limit")
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "required")
	}
	for _, b := range c.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			bad("Brokers", "%q is not host:port", b)
		}
	}
	if c.Threads < 0 {
		bad("Threads", "negative (%d)", c.Threads)
	}
	if c.StaticMemberID != "" && !graph.LegalName(c.StaticMemberID) {
		bad("StaticMemberID", "%q: use only letters, digits, '.', '_' and '-'", c.StaticMemberID)
	}
}

// validateCommits checks the guarantee and the commit's timing.
func (c *Config) validateCommits(bad complaint) {
	if c.Guarantee != ExactlyOnce && c.Guarantee != AtLeastOnce {
		bad("Guarantee", "unknown value %d", int(c.Guarantee))
	}
	if c.CommitInterval < 0 || c.CommitInterval > 0 && c.CommitInterval < time.Millisecond {
		bad("CommitInterval", "%v is below 1ms", c.CommitInterval)
	}
	if c.TransactionTimeout < 0 {
		bad("TransactionTimeout", "negative (%v)", c.TransactionTimeout)
	}
	if c.TransactionTimeout > 0 && c.TransactionTimeout < time.Second {
		bad("TransactionTimeout", "%v is below 1s", c.TransactionTimeout)
	}
	if c.TransactionTimeout > 0 && c.CommitInterval >= c.TransactionTimeout {
		bad("TransactionTimeout", "%v is not above CommitInterval %v", c.TransactionTimeout, c.CommitInterval)
	}
	if c.MaxCommitInterval < 0 {
		bad("MaxCommitInterval", "negative (%v)", c.MaxCommitInterval)
	}
	if c.MaxCommitInterval > 0 {
		ci := c.CommitInterval
		if ci == 0 {
			ci = defaultCommitIntervalEOS
			if c.Guarantee == AtLeastOnce {
				ci = defaultCommitIntervalALOS
			}
		}
		if c.MaxCommitInterval < ci {
			bad("MaxCommitInterval", "%v is below CommitInterval %v", c.MaxCommitInterval, ci)
		}
		if c.TransactionTimeout > 0 && c.MaxCommitInterval >= c.TransactionTimeout {
			bad("TransactionTimeout", "%v is not above MaxCommitInterval %v", c.TransactionTimeout, c.MaxCommitInterval)
		}
	}
	if c.MaxTaskIdle < 0 {
		bad("MaxTaskIdle", "negative (%v)", c.MaxTaskIdle)
	}
	if c.MaxConsecutiveAborts < 0 {
		bad("MaxConsecutiveAborts", "negative (%d)", c.MaxConsecutiveAborts)
	}
	if c.CacheMaxBytes < 0 {
		bad("CacheMaxBytes", "negative (%d); 0 turns caching off", c.CacheMaxBytes)
	}
}

// validateClients checks the queues and the Kafka clients' settings.
func (c *Config) validateClients(bad complaint) {
	if c.Queue.MaxRecords < 0 {
		bad("Queue.MaxRecords", "negative (%d)", c.Queue.MaxRecords)
	}
	if c.Queue.MaxBytes < 0 {
		bad("Queue.MaxBytes", "negative (%d)", c.Queue.MaxBytes)
	}
	if c.Consumer.SessionTimeout < 0 || c.Consumer.HeartbeatInterval < 0 || c.Consumer.RebalanceTimeout < 0 || c.Consumer.FetchMaxWait < 0 {
		bad("Consumer", "durations must not be negative")
	}
	if c.Consumer.HeartbeatInterval > 0 && c.Consumer.SessionTimeout > 0 && c.Consumer.HeartbeatInterval >= c.Consumer.SessionTimeout {
		bad("Consumer.HeartbeatInterval", "%v is not below SessionTimeout %v", c.Consumer.HeartbeatInterval, c.Consumer.SessionTimeout)
	}
	if c.Net.RequestTimeout < 0 || (c.Net.RequestTimeout > 0 && c.Net.RequestTimeout < time.Second) {
		bad("Net.RequestTimeout", "%v is below 1s", c.Net.RequestTimeout)
	}
	if c.Topics.ReplicationFactor < 0 {
		bad("Topics.ReplicationFactor", "negative (%d)", c.Topics.ReplicationFactor)
	}
	if c.Topics.PurgeInterval < 0 {
		bad("Topics.PurgeInterval", "negative (%v)", c.Topics.PurgeInterval)
	}
}

// validatePlacement checks the advertised address and the standbys'
// settings.
func (c *Config) validatePlacement(bad complaint) {
	if c.AdvertisedAddr != "" {
		if err := hostport.Check(c.AdvertisedAddr); err != nil {
			bad("AdvertisedAddr", "%q: want a plain host:port (a DNS name or an IP address, and a port from 1 to 65535): %v", c.AdvertisedAddr, err)
		}
	}
	if c.StandbyReplicas < 0 {
		bad("StandbyReplicas", "%d: must be 0 (no standbys) or more", c.StandbyReplicas)
	}
	if c.AcceptableRecoveryLag < 0 {
		bad("AcceptableRecoveryLag", "%d: must be 0 (the default) or more", c.AcceptableRecoveryLag)
	}
	if c.ProbingRebalanceInterval < 0 {
		bad("ProbingRebalanceInterval", "%s: must be 0 (the default) or more", c.ProbingRebalanceInterval)
	}
}

// validate checks the stores' settings.
func (st *StoresConfig) validate(bad complaint) {
	if st.MaxBufferBytes < 0 {
		bad("Stores.MaxBufferBytes", "negative (%d)", st.MaxBufferBytes)
	}
	if st.CleanupDelay < 0 {
		bad("Stores.CleanupDelay", "negative (%v)", st.CleanupDelay)
	}
	if st.MaxConcurrentRestores < 0 {
		bad("Stores.MaxConcurrentRestores", "negative (%d)", st.MaxConcurrentRestores)
	}
	if n := len(st.EncryptionKey); n != 0 && n != 16 && n != 24 && n != 32 {
		bad("Stores.EncryptionKey", "%d bytes; want 16, 24 or 32 (AES-128, -192 or -256)", n)
	}
	if len(st.Badger.EncryptionKey) != 0 {
		bad("Stores.Badger.EncryptionKey", "set Stores.EncryptionKey instead")
	}
	if st.EncryptionKeyRotation < 0 {
		bad("Stores.EncryptionKeyRotation", "negative (%v)", st.EncryptionKeyRotation)
	}
}

// validatePolicies checks every error policy, the application's and each
// topic's.
func (c *Config) validatePolicies(bad complaint) {
	check := func(field string, p ErrorPolicies) {
		for _, f := range []struct {
			field  string
			policy ErrorPolicy
		}{
			{"DeserializationErrors", p.Deserialization},
			{"TimestampErrors", p.Timestamp},
			{"ProcessingErrors", p.Processing},
			{"ProductionErrors", p.Production},
		} {
			if field != "" {
				f.field = field + "." + strings.TrimSuffix(f.field, "Errors")
			}
			if !f.policy.Valid() {
				bad(f.field, "unknown policy %q (want Fail, Skip or DeadLetter(topic))", string(f.policy))
			}
		}
	}
	check("", c.defaultPolicies())
	for topic, p := range c.TopicErrors {
		if topic == "" {
			bad("TopicErrors", "an empty topic name")
		}
		check(fmt.Sprintf("TopicErrors[%q]", topic), p)
	}
}

// stores returns Stores, or the deprecated State when Stores is zero.
func (c *Config) stores() StoresConfig {
	if reflect.ValueOf(c.Stores).IsZero() {
		return c.State
	}
	return c.Stores
}

// orDefault sets *p to def when it is the zero value.
func orDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Stores, c.State = c.stores(), StoresConfig{}
	orDefault(&c.StateDir, filepath.Join(os.TempDir(), "weir"))
	orDefault(&c.Threads, defaultThreads)
	if c.CommitInterval == 0 {
		c.CommitInterval = defaultCommitIntervalEOS
		if c.Guarantee == AtLeastOnce {
			c.CommitInterval = defaultCommitIntervalALOS
		}
	}
	if c.MaxCommitInterval == 0 {
		// Within a TransactionTimeout the application chose.
		longest := defaultMaxCommitInterval
		if c.TransactionTimeout > 0 {
			longest = min(longest, c.TransactionTimeout/2)
		}
		c.MaxCommitInterval = max(c.CommitInterval, longest)
	}
	orDefault(&c.TransactionTimeout, max(defaultTransactionTimeout, 2*c.MaxCommitInterval))
	orDefault(&c.Queue.MaxRecords, defaultQueueRecords)
	orDefault(&c.Queue.MaxBytes, defaultQueueBytes)
	orDefault(&c.Consumer.SessionTimeout, defaultSessionTimeout)
	orDefault(&c.Consumer.HeartbeatInterval, c.Consumer.SessionTimeout/3)
	orDefault(&c.Consumer.RebalanceTimeout, defaultRebalanceTimeout)
	orDefault(&c.Consumer.FetchMaxWait, defaultFetchMaxWait)
	orDefault(&c.Topics.PurgeInterval, defaultPurgeInterval)
	for _, p := range []*ErrorPolicy{&c.DeserializationErrors, &c.TimestampErrors, &c.ProcessingErrors, &c.ProductionErrors} {
		orDefault(p, Fail)
	}
	orDefault(&c.Stores.MaxBufferBytes, defaultMaxBufferBytes)
	orDefault(&c.Stores.MaxConcurrentRestores, defaultMaxConcurrentRestores)
	orDefault(&c.Stores.BulkRestoreMinRecords, defaultBulkRestoreMinRecords)
	orDefault(&c.Stores.CleanupDelay, defaultCleanupDelay)
	orDefault(&c.MaxConsecutiveAborts, defaultMaxAborts)
	orDefault(&c.MaxWarmups, defaultMaxWarmups)
	orDefault(&c.AcceptableRecoveryLag, defaultAcceptableLag)
	orDefault(&c.ProbingRebalanceInterval, defaultProbingInterval)
	orDefault(&c.Net.RequestTimeout, defaultRequestTimeout)
	orDefault(&c.ClientID, c.ApplicationID)
	orDefault(&c.Net.DialTimeout, defaultDialTimeout)
	c.Console = c.Console.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(minLevel{min: slog.LevelWarn, h: slog.Default().Handler()})
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	c.Stores.Badger.EncryptionKey = c.Stores.EncryptionKey
	c.Stores.Badger.EncryptionKeyRotation = c.Stores.EncryptionKeyRotation
	orDefault(&c.Stores.Badger.Logger, c.Logger)
	return c
}
