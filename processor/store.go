package processor

import (
	"iter"
	"slices"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// StoreSpec declares a state store. Create one with [KeyValue], [TTL],
// [Window] or [Session], attach it to the processors that use it with
// [Topology.AddStore], and open it in a processor's Init with the spec's
// Open method.
//
// A store is local to a task: each task has its own partition of it, made
// durable by the changelog topic "<application id>-<name>-changelog",
// which weir creates (compacted) and restores from when a task moves or an
// instance restarts. The name is the store's identity across deployments:
// renaming a store starts it empty.
//
// A store whose key or value serde is a registry serde (serde.Avro) has
// its schemas checked and registered by the App before it starts, under
// the subjects "<application id>-<name>-key" and "-value" (see
// weir.Config.Registry): the value schema must read every earlier
// version's state, the key schema must not change.
type StoreSpec interface {
	// Name returns the store's name.
	Name() string
	graphStore() *graph.Store
}

// NodeRef is any node handle, whatever its types.
type NodeRef interface {
	graphNode() *graph.Node
	topology() *Topology
}

func (n Node[K, V]) graphNode() *graph.Node { return n.n }
func (n Node[K, V]) topology() *Topology    { return n.t }

// StoreContext opens stores: every [Context] is one.
type StoreContext interface {
	storeBytes(name string) (statelog.Bytes, error)
}

func (c *nodeContext[K, V]) storeBytes(name string) (statelog.Bytes, error) {
	b, err := c.env.Store(c.node, name)
	if err != nil {
		// The node may not use the store: the wiring's fault, not the
		// record's, when a processor opens a store lazily in Process.
		return nil, c.topologyError(err)
	}
	return b, nil
}

// AddStore adds a state store used by the given processors. Processors
// that share a store run in the same sub-topology.
func (t *Topology) AddStore(spec StoreSpec, users ...NodeRef) {
	if spec == nil {
		t.fail("nil store spec")
		return
	}
	g := spec.graphStore()
	switch {
	case g.Name == "":
		t.fail("a store has an empty name; every store needs an explicit name")
	case !graph.LegalName(g.Name):
		t.fail("store name %q: use only letters, digits, '.', '_' and '-'", g.Name)
	}
	if t.storeExists(g.Name) {
		t.fail("duplicate store name %q", g.Name)
		return
	}
	if len(users) == 0 {
		t.fail("store %q is not attached to any processor", g.Name)
	}
	st := &graph.Store{Name: g.Name, Kind: g.Kind, Retention: g.Retention}
	if sd, ok := spec.(storeSerdes); ok {
		keys, values := sd.serdes()
		st.Keys, st.Values = graph.SchemaSerdeOf(keys), graph.SchemaSerdeOf(values)
		st.KeyFormat, st.ValueFormat = graph.SerdeFormat(keys), graph.SerdeFormat(values)
		st.KeyLayout = graph.KeyLayoutOf(keys)
	}
	for _, u := range users {
		n := u.graphNode()
		switch {
		case n == nil:
			t.fail("store %q: zero Node", g.Name)
			continue
		case u.topology() != t:
			t.fail("store %q: node %q belongs to another topology", g.Name, n.Name)
			continue
		case n.Kind != graph.KindProcessor:
			t.fail("store %q: %s %q cannot use a store; only processors can", g.Name, n.Kind, n.Name)
			continue
		}
		st.Users = append(st.Users, n)
		n.Stores = append(n.Stores, g.Name)
	}
	t.g.Stores = append(t.g.Stores, st)
}

// storeExists reports whether a store or global store is named name.
func (t *Topology) storeExists(name string) bool {
	return slices.ContainsFunc(t.g.Stores, func(s *graph.Store) bool { return s.Name == name }) || t.g.Global(name) != nil
}

// AddGlobalStore adds a global store: a key-value store that every
// instance of the application keeps whole, read from all partitions of
// topic (the keys and values as they are, which must be what spec's
// serdes read; a record with a null value deletes its key). weir restores
// it from the topic before any task starts, then keeps reading the topic
// while the application runs, so a processor sees an update some time
// after it is written (global stores are not synchronized with the
// records being processed, as in Kafka Streams). The topic serves as the
// store's changelog: it should be compacted, and it must exist when the
// application starts; no source may read it.
//
// Processors read the store after [Topology.ConnectStore], from any
// sub-topology, through spec.Open; writes to it fail. Kafka Streams'
// addGlobalStore (with its default, record-as-is update processor).
func (t *Topology) AddGlobalStore[K, V any](spec *KeyValueSpec[K, V], topic string) {
	if spec == nil {
		t.fail("nil global store spec")
		return
	}
	switch {
	case spec.base.name == "":
		t.fail("a global store has an empty name; every store needs an explicit name")
	case !graph.LegalName(spec.base.name):
		t.fail("store name %q: use only letters, digits, '.', '_' and '-'", spec.base.name)
	case t.storeExists(spec.base.name):
		t.fail("duplicate store name %q", spec.base.name)
		return
	case spec.base.keys == nil || spec.base.values == nil:
		t.fail("global store %q: nil serde", spec.base.name)
	}
	t.checkTopic("global store "+spec.base.name, topic)
	if prev, ok := t.topics[topic]; ok {
		t.fail("topic %q is read by %q and by global store %q; one reader per topic", topic, prev, spec.base.name)
	} else {
		t.topics[topic] = "global store " + spec.base.name
	}
	t.g.Globals = append(t.g.Globals, &graph.GlobalStore{Name: spec.base.name, Topic: topic,
		Keys: graph.SchemaSerdeOf(spec.base.keys), Values: graph.SchemaSerdeOf(spec.base.values),
		KeyFormat: graph.SerdeFormat(spec.base.keys), ValueFormat: graph.SerdeFormat(spec.base.values)})
}

// ConnectStore gives the processor user access to the stores names,
// which AddStore or AddGlobalStore added (Kafka Streams'
// connectProcessorAndStateStores): a join reads the store of the table
// it looks up. The processor then runs in the sub-topology of a store
// (not of a global store, which every sub-topology reads).
func (t *Topology) ConnectStore(user NodeRef, names ...string) {
	n := user.graphNode()
	switch {
	case n == nil:
		t.fail("ConnectStore: zero Node")
		return
	case user.topology() != t:
		t.fail("ConnectStore: node %q belongs to another topology", n.Name)
		return
	case n.Kind != graph.KindProcessor:
		t.fail("ConnectStore: %s %q cannot use a store; only processors can", n.Kind, n.Name)
		return
	}
	for _, name := range names {
		if slices.Contains(n.Stores, name) {
			continue
		}
		if gs := t.g.Global(name); gs != nil {
			gs.Users = append(gs.Users, n)
			n.Stores = append(n.Stores, name)
			continue
		}
		i := slices.IndexFunc(t.g.Stores, func(s *graph.Store) bool { return s.Name == name })
		if i < 0 {
			t.fail("ConnectStore: no store %q for %q", name, n.Name)
			continue
		}
		t.g.Stores[i].Users = append(t.g.Stores[i].Users, n)
		n.Stores = append(n.Stores, name)
	}
}

// UseSourceAsChangelog makes source's topic the changelog of the
// key-value store name, which must hold exactly that topic's records (the
// key and value bytes as they are, a null value deleting its key): a
// table read from a topic. When the topic is compacted, weir writes no
// changelog for the store, and restores it from the topic, up to the
// offset the group has committed; otherwise the store keeps a changelog
// of its own. Kafka Streams' source-topic optimization
// (reuse.ktable.source.topics).
//
// The restore applies the topic's records as they are: a record the
// store's processor would have skipped (one that cannot be decoded; one
// with a null key, which the restore leaves out too) would be restored.
// Use it for topics whose records are all valid, read with a key serde
// that writes a key back to the bytes it was read from: the restored
// keys are the topic's bytes, and a key whose bytes differ would be a
// second key in the store. weir restores from the topic only when the
// topic's DeserializationErrors policy is Fail.
func (t *Topology) UseSourceAsChangelog(name string, source NodeRef) {
	n := source.graphNode()
	switch {
	case n == nil || source.topology() != t:
		t.fail("UseSourceAsChangelog: store %q: the source is nil or of another topology", name)
		return
	case n.Kind != graph.KindSource || n.Internal:
		t.fail("UseSourceAsChangelog: store %q: %s %q is not a source of an input topic", name, n.Kind, n.Name)
		return
	}
	i := slices.IndexFunc(t.g.Stores, func(s *graph.Store) bool { return s.Name == name })
	switch {
	case i < 0:
		t.fail("UseSourceAsChangelog: no store %q", name)
	case t.g.Stores[i].Kind != graph.KeyValueStore:
		t.fail("UseSourceAsChangelog: store %q is a %s store; only a key-value store can follow a topic", name, t.g.Stores[i].Kind)
	default:
		t.g.Stores[i].Source = n.Topic
	}
}

// KeyedByPartition declares that the keys of the store name are the keys
// its sub-topology's input is partitioned by: every entry a task writes
// is of a key that Kafka's murmur2 partitioner puts in the task's
// partition (for a window, session or versioned store, the user key part
// of the stored key). `weir rescale` moves the state of such stores to a
// new partition count, and refuses stores without it, whose entries it
// could put in the wrong task. The DSL declares it for the stores of its
// tables and aggregations; a processor that puts entries under another
// key than its input record's (without repartitioning by it first) must
// not.
func (t *Topology) KeyedByPartition(name string) {
	i := slices.IndexFunc(t.g.Stores, func(s *graph.Store) bool { return s.Name == name })
	if i < 0 {
		t.fail("KeyedByPartition: no store %q", name)
		return
	}
	t.g.Stores[i].PartitionKeyed = true
}

// KeyValueStore is a typed key-value store. Keys are ordered by their
// serialized bytes, which is numeric order for serde.Int64 only for
// non-negative keys and lexical order for serde.String.
//
// Writes are buffered and become durable at the task's next commit; reads
// see them at once. A KeyValueStore belongs to its task and is used from
// its goroutine only.
//
// While an input record with a null Kafka key is processed, Put and Delete
// of a key that serializes to nothing (serde.String's "") are dropped and
// Get of it is a miss; Range, All, PrefixScan and Count are unchanged. See
// "Records with a null key" in the package documentation.
type KeyValueStore[K, V any] interface {
	// Get returns the value of key and whether it exists.
	Get(key K) (value V, found bool, err error)
	// Put sets the value of key.
	Put(key K, value V) error
	// Delete removes key.
	Delete(key K) error
	// Range yields the entries with lo <= key < hi.
	Range(lo, hi K) iter.Seq2[K, V]
	// All yields every entry in key order.
	All() iter.Seq2[K, V]
	// PrefixScan yields the entries whose serialized key starts with the
	// serialized prefix, in key order: meaningful for serdes whose
	// encoding of a prefix is a prefix of the encoding (String, Bytes).
	PrefixScan(prefix K) iter.Seq2[K, V]
	// Count returns the number of entries. It walks every key: O(n), for
	// occasional use (Kafka Streams' approximateNumEntries, but exact).
	Count() (int64, error)
	// Err returns the first error met by an iteration (a read or decode
	// failure ends it early) and clears it.
	Err() error
	// GetStamped is Get with the timestamp PutStamped gave the value:
	// the zero time when it has none (it was set by Put, or before weir
	// kept timestamps). Kafka Streams' TimestampedKeyValueStore.get.
	GetStamped(key K) (value V, ts time.Time, found bool, err error)
	// PutStamped is Put with the value's timestamp, the event time of the
	// update, kept to the millisecond: GetStamped gives it back, and the
	// changelog record of the change carries it as its timestamp (the DSL's
	// tables and aggregations stamp their values with the timestamps of
	// their results).
	PutStamped(key K, value V, ts time.Time) error
}

// KeyValueSpec declares a key-value store with its serdes.
type KeyValueSpec[K, V any] struct {
	base storeSpec[K, V]
}

// KeyValue declares a key-value store named name. Kafka Streams'
// Stores.persistentKeyValueStore.
func KeyValue[K, V any](name string, keys serde.Serde[K], values serde.Serde[V]) *KeyValueSpec[K, V] {
	return &KeyValueSpec[K, V]{base: storeSpec[K, V]{name, keys, values}}
}

// Name implements StoreSpec.
func (s *KeyValueSpec[K, V]) Name() string { return s.base.name }

func (s *KeyValueSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.base.name, Kind: graph.KeyValueStore}
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to.
func (s *KeyValueSpec[K, V]) Open(ctx StoreContext) (KeyValueStore[K, V], error) {
	core, err := s.base.open(ctx, s.base.checkSerdes(), asIs[statelog.Bytes])
	if err != nil {
		return nil, err
	}
	return &kvStore[K, V]{core}, nil
}

// kvStore puts serdes over a store partition's bytes. The serdes see the
// store's name as their topic.
type kvStore[K, V any] struct {
	typedStore[K, V, statelog.Bytes]
}

func (s *kvStore[K, V]) Get(key K) (V, bool, error) {
	v, _, found, err := s.GetStamped(key)
	return v, found, err
}

func (s *kvStore[K, V]) GetStamped(key K) (V, time.Time, bool, error) {
	kb, err := s.key(key)
	if err != nil {
		var zero V
		return zero, time.Time{}, false, err
	}
	return s.foundStamped(s.b.GetStamped(kb))
}

func (s *kvStore[K, V]) Put(key K, value V) error {
	kb, vb, err := s.entry(key, value)
	if err != nil {
		return err
	}
	return s.b.Put(kb, vb)
}

func (s *kvStore[K, V]) PutStamped(key K, value V, ts time.Time) error {
	kb, vb, err := s.entry(key, value)
	if err != nil {
		return err
	}
	return s.b.PutStamped(kb, vb, ts.UnixMilli())
}

func (s *kvStore[K, V]) Delete(key K) error {
	kb, err := s.key(key)
	if err != nil {
		return err
	}
	return s.b.Delete(kb)
}

func (s *kvStore[K, V]) Range(lo, hi K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		lb, err := s.key(lo)
		if err != nil {
			s.fail(err)
			return
		}
		hb, err := s.key(hi)
		if err != nil {
			s.fail(err)
			return
		}
		s.decode(s.b.Range(lb, hb), yield)
	}
}

func (s *kvStore[K, V]) PrefixScan(prefix K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		pb, err := s.key(prefix)
		if err != nil {
			s.fail(err)
			return
		}
		s.decode(s.b.Range(pb, statelog.PrefixEnd(pb)), yield)
	}
}

func (s *kvStore[K, V]) Count() (int64, error) {
	var n int64
	for range s.b.Range(nil, nil) {
		n++
	}
	return n, s.b.Err()
}

func (s *kvStore[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { s.decode(s.b.Range(nil, nil), yield) }
}

// decode yields the entries of seq decoded. Unlike the stores with
// expiry, a key-value store keeps its Bytes' iteration error as it is,
// and only after a loop that ran to its end.
func (s *kvStore[K, V]) decode(seq iter.Seq2[[]byte, []byte], yield func(K, V) bool) {
	if s.each(seq, s.decodeKey, yield) {
		s.fail(s.b.Err())
	}
}
