package kstream

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// JoinOnForeignKey joins every row of t with the row of other whose key
// fk extracts from the row's value (a foreign key), into the table
// materialized in the key-value store name, keyed as t: a row of t has a
// result while other has a row under its foreign key. The result follows
// changes of either side: an update of t (its value or its foreign key)
// or of other recomputes the results it affects, a changed foreign key
// retracts the old result (a deletion when the new foreign key has no
// row), and a deletion of either side deletes the results it had. As in
// Kafka Streams, a deletion is emitted also where there was no result: for
// a deleted row of t, for a row whose foreign key changes to one without
// a row, and for the rows of a foreign key whose row is deleted. Kafka
// Streams' KTable.join with a foreign-key extractor (KIP-213).
//
// The join works through two internal topics, so that t and other need
// not be partitioned alike: t's rows subscribe to the row of their foreign
// key through "<application id>-<name>-subscription-repartition",
// partitioned by the foreign key, and the answers come back through
// "<application id>-<name>-response-repartition", partitioned by t's key.
// The subscriptions are kept in the store name+"-subscriptions". An answer
// for a row of t that has changed since it subscribed is dropped (each
// subscription carries a hash of the row's value), so no result is ever
// computed from an outdated row. t's and other's topics must have the
// same partition count: weir sizes both internal topics from it, and Run
// checks the co-partitioning.
//
// fk and joiner must be deterministic. name is required; t's value serde
// must be known (not after a MapValues).
func (t *Table[K, V]) JoinOnForeignKey[KO, VO, VR any](name string, other *Table[KO, VO], fk func(value V) KO, joiner func(value V, row VO) VR, results serde.Serde[VR]) *Table[K, VR] {
	if joiner == nil {
		t.b.fail("JoinOnForeignKey %q of %q: nil joiner", name, t.name)
	}
	return fkJoin(t, name, other, fk, func(v V, r VO, found bool) (VR, bool) {
		if !found {
			var zero VR
			return zero, false
		}
		return joiner(v, r), true
	}, results, false)
}

// LeftJoinOnForeignKey is [Table.JoinOnForeignKey] keeping every row of t:
// a row whose foreign key has no row in other is joined with the zero VO
// and found false. Kafka Streams' KTable.leftJoin with a foreign-key
// extractor.
func (t *Table[K, V]) LeftJoinOnForeignKey[KO, VO, VR any](name string, other *Table[KO, VO], fk func(value V) KO, joiner func(value V, row VO, found bool) VR, results serde.Serde[VR]) *Table[K, VR] {
	if joiner == nil {
		t.b.fail("LeftJoinOnForeignKey %q of %q: nil joiner", name, t.name)
	}
	return fkJoin(t, name, other, fk, func(v V, r VO, found bool) (VR, bool) { return joiner(v, r, found), true }, results, true)
}

// What a subscription asks of the foreign key's side.
const (
	// subscribe: keep the subscription and answer with the current row.
	subscribe byte = iota
	// unsubscribe: the row's foreign key changed; drop the subscription,
	// no answer (the subscription to the new key answers).
	unsubscribe
	// unsubscribeAndAnswer: the row was deleted; drop the subscription
	// and answer, so that the result is deleted.
	unsubscribeAndAnswer
)

// nullIfAbsentHeader marks a subscription of a row whose foreign key
// changed, and the answers to it and to a change of the
// foreign key's row: when the foreign key has no row, the result is
// deleted even if the row had none (Kafka Streams' inner join emits a
// tombstone then). It is a header rather than a flag of the formats so
// that an instance of an earlier version, during a rolling upgrade,
// reads the records and only misses the tombstone; the resolver removes
// it before the result goes on.
const nullIfAbsentHeader = "weir.fk.null-if-absent"

func withNullIfAbsent(hs []processor.Header) []processor.Header {
	return append(slices.Clip(hs), processor.Header{Key: nullIfAbsentHeader, Value: []byte{1}})
}

// takeNullIfAbsent reports whether hs holds nullIfAbsentHeader, and
// returns hs without it.
func takeNullIfAbsent(hs []processor.Header) ([]processor.Header, bool) {
	i := slices.IndexFunc(hs, func(h processor.Header) bool { return h.Key == nullIfAbsentHeader })
	if i < 0 {
		return hs, false
	}
	return slices.Delete(slices.Clone(hs), i, i+1), true
}

// subscription is what a row of the left table sends to its foreign key:
// its key, what it asks and the hash of its value (absent for a deleted
// row).
type subscription[K any] struct {
	key     K
	ask     byte
	hash    [16]byte
	deleted bool
}

// response answers a subscription: the hash it came with and the foreign
// key's row, if there is one.
type response[VO any] struct {
	hash    [16]byte
	deleted bool // the subscription was for a deleted row
	row     VO
	found   bool
}

// fkJoin adds the nodes of a foreign-key join; leftJoin says it keeps
// every row of t. The join is three steps, each behind a repartition:
// t's rows subscribe to their foreign keys, other's side answers the
// subscriptions, and t's side joins the answers.
func fkJoin[K, V, KO, VO, VR any](t *Table[K, V], name string, other *Table[KO, VO], fk func(V) KO, join func(V, VO, bool) (VR, bool), results serde.Serde[VR], leftJoin bool) *Table[K, VR] {
	if !checkFKJoin(t, name, other, fk, results) {
		return &Table[K, VR]{b: t.b, name: name}
	}
	hashOf := fkValueHasher(name, t.values)
	subs := fkSubscribe(t, name, other.keys, fk, hashOf)
	resp := fkAnswer(t.b, name, t.keys, other, subs, leftJoin)
	return fkResolve(t, name, resp, hashOf, join, results)
}

// checkFKJoin reports the first problem of a foreign-key join's arguments
// to the Builder, and says whether the join's nodes can still be added:
// without an extractor or a result serde they can (Build fails anyway),
// without the tables' serdes or lookups they cannot.
func checkFKJoin[K, V, KO, VO, VR any](t *Table[K, V], name string, other *Table[KO, VO], fk func(V) KO, results serde.Serde[VR]) bool {
	b := t.b
	switch {
	case other == nil || other.b != b:
		b.fail("foreign-key join %q of %q: the other table is nil or from another Builder", name, t.name)
		return false
	case fk == nil:
		b.fail("foreign-key join %q of %q: nil foreign-key extractor", name, t.name)
	case t.values == nil || t.keys == nil:
		b.fail("foreign-key join %q of %q: the table's key or value serde is unknown (it comes from a MapValues)", name, t.name)
		return false
	case other.keys == nil || other.values == nil:
		b.fail("foreign-key join %q: the key or value serde of %q is unknown (it comes from a MapValues)", name, other.name)
		return false
	case t.lookup == nil || other.lookup == nil:
		b.fail("foreign-key join %q of %q and %q: a table that comes from a Suppress cannot be joined", name, t.name, other.name)
		return false
	case results == nil:
		b.fail("foreign-key join %q of %q: nil result serde", name, t.name)
	}
	return true
}

// fkValueHasher returns the hash a subscription carries of a row's value:
// the first 16 bytes of the SHA-256 of its serialized form, which any
// instance computes alike when the answer comes back.
func fkValueHasher[V any](name string, values serde.Serde[V]) func(V) ([16]byte, error) {
	return func(v V) ([16]byte, error) {
		vb, err := values.Serialize(name, v)
		if err != nil {
			return [16]byte{}, fmt.Errorf("kstream: %s: serialize value: %w", name, err)
		}
		sum := sha256.Sum256(vb)
		return [16]byte(sum[:16]), nil
	}
}

// fkSubscribe adds the node by which t's rows subscribe to their foreign
// keys, and the subscription topic that takes the subscriptions to the
// partitions of the foreign keys.
func fkSubscribe[K, V, KO any](t *Table[K, V], name string, okeys serde.Serde[KO], fk func(V) KO, hashOf func(V) ([16]byte, error)) processor.Node[KO, subscription[K]] {
	s := fkSubscriber[K, V, KO]{name: name, okeys: okeys, fk: fk, hashOf: hashOf}
	sub := t.b.t.AddProcessor(name+"-subscribe", processor.Func(s.process), t.node)
	return t.b.t.AddRepartition(name+"-subscription", okeys, serde.Serde[subscription[K]](subscriptionSerde[K]{t.keys}), sub)
}

// fkAnswer adds the foreign keys' side, which keeps the subscriptions and
// answers them, and answers them again when its row changes, and the
// response topic that takes the answers back to the partitions of the
// subscribing rows' keys.
func fkAnswer[K, KO, VO any](b *Builder, name string, keys serde.Serde[K], other *Table[KO, VO], subs processor.Node[KO, subscription[K]], leftJoin bool) processor.Node[K, response[VO]] {
	okeys := other.keys
	sspec := processor.KeyValue(name+"-subscriptions", serde.Serde[subKey[KO, K]](subKeySerde[KO, K]{okeys, keys}), serde.Serde[[16]byte](hashSerde{}))
	ol := other.lookup
	answer := b.t.AddProcessor(name+"-answer", func() processor.Processor[KO, subscription[K], K, response[VO]] {
		return &fkAnswerer[K, KO, VO]{spec: sspec, lookup: ol, leftJoin: leftJoin}
	}, subs)
	rowChange := b.t.AddProcessor(name+"-row-change", func() processor.Processor[KO, change[VO], K, response[VO]] {
		return &fkRowChange[K, KO, VO]{spec: sspec}
	}, other.node)
	b.t.AddStore(sspec, answer, rowChange)
	b.t.KeyedByPartition(sspec.Name()) // by the foreign key (subKeySerde.KeyLayout)
	b.t.ConnectStore(answer, ol.stores...)
	answers := b.t.AddProcessor(name+"-answers", processor.Func(func(ctx processor.Context[K, response[VO]], rec processor.Record[K, response[VO]]) error {
		return ctx.Forward(rec)
	}), answer, rowChange)
	return b.t.AddRepartition(name+"-response", keys, serde.Serde[response[VO]](responseSerde[VO]{other.values}), answers)
}

// fkResolve adds the left table's side, which joins the answers that are
// still current into the result table, keyed as t.
func fkResolve[K, V, VO, VR any](t *Table[K, V], name string, resp processor.Node[K, response[VO]], hashOf func(V) ([16]byte, error), join func(V, VO, bool) (VR, bool), results serde.Serde[VR]) *Table[K, VR] {
	b, keys := t.b, t.keys
	rspec := processor.KeyValue(name, keys, results)
	ll := t.lookup
	n := b.t.AddProcessor(name, func() processor.Processor[K, response[VO], K, change[VR]] {
		return &fkResolver[K, V, VO, VR]{spec: rspec, lookup: ll, hashOf: hashOf, join: join}
	}, resp)
	b.t.AddStore(rspec, n)
	b.t.KeyedByPartition(rspec.Name())
	b.t.ConnectStore(n, ll.stores...)
	return &Table[K, VR]{b: b, node: n, name: name, keys: keys, values: results, lookup: storeLookup(rspec)}
}

// fkSubscriber sends the subscriptions of the left table's rows to their
// foreign keys: Kafka Streams' SubscriptionSendProcessorSupplier.
type fkSubscriber[K, V, KO any] struct {
	name   string
	okeys  serde.Serde[KO]
	fk     func(V) KO
	hashOf func(V) ([16]byte, error)
}

func (s fkSubscriber[K, V, KO]) process(ctx processor.Context[KO, subscription[K]], rec processor.Record[K, change[V]]) error {
	c := rec.Value
	hs := rec.Headers
	send := func(fk KO, sub subscription[K]) error {
		return ctx.Forward(processor.Record[KO, subscription[K]]{Key: fk, Value: sub, Timestamp: rec.Timestamp, Headers: hs})
	}
	if !c.hasNew {
		if !c.hasOld {
			return nil
		}
		return send(s.fk(c.old), subscription[K]{key: rec.Key, ask: unsubscribeAndAnswer, deleted: true})
	}
	h, err := s.hashOf(c.new)
	if err != nil {
		return err
	}
	newFK := s.fk(c.new)
	if c.hasOld {
		if oldFK := s.fk(c.old); !sameKey(s.okeys, s.name, oldFK, newFK) {
			if err := send(oldFK, subscription[K]{key: rec.Key, ask: unsubscribe, hash: h}); err != nil {
				return err
			}
			// Moved: deleted from the result if the new foreign key
			// has no row. A new row answers only when it has one.
			hs = withNullIfAbsent(hs)
		}
	}
	return send(newFK, subscription[K]{key: rec.Key, ask: subscribe, hash: h})
}

// fkAnswerer keeps subscriptions and answers them with the foreign key's
// current row: Kafka Streams' SubscriptionStoreReceiveProcessor and
// SubscriptionJoinProcessorSupplier.
type fkAnswerer[K, KO, VO any] struct {
	spec   *processor.KeyValueSpec[subKey[KO, K], [16]byte]
	lookup *lookup[KO, VO]
	subs   processor.KeyValueStore[subKey[KO, K], [16]byte]
	get    getter[KO, VO]
	// leftJoin: the answer to a deleted row carries the deletion's
	// timestamp alone (Kafka Streams' left join asks no foreign key then).
	leftJoin bool
}

func (p *fkAnswerer[K, KO, VO]) Init(ctx processor.Context[K, response[VO]]) (err error) {
	if p.subs, err = p.spec.Open(ctx); err != nil {
		return err
	}
	p.get, err = p.lookup.open(ctx)
	return err
}

func (p *fkAnswerer[K, KO, VO]) Close() error { return nil }

func (p *fkAnswerer[K, KO, VO]) Process(ctx processor.Context[K, response[VO]], rec processor.Record[KO, subscription[K]]) error {
	s := rec.Value
	k := subKey[KO, K]{fk: rec.Key, key: s.key, hasKey: true}
	if s.ask == subscribe {
		if err := p.subs.Put(k, s.hash); err != nil {
			return err
		}
	} else if err := p.subs.Delete(k); err != nil {
		return err
	}
	if s.ask == unsubscribe {
		return nil
	}
	out := response[VO]{hash: s.hash, deleted: s.deleted}
	ts := rec.Timestamp
	if !s.deleted || !p.leftJoin {
		row, rowTS, found, err := p.get(rec.Key)
		if err != nil {
			return err
		}
		if !s.deleted {
			out.row, out.found = row, found
		}
		// The answer carries the later of the subscribing update's
		// timestamp and the foreign key's row's, also for a row of an
		// inner join that was deleted, as Kafka Streams' does.
		ts = latest(ts, rowTS)
	}
	return ctx.Forward(processor.Record[K, response[VO]]{Key: s.key, Value: out, Timestamp: ts, Headers: rec.Headers})
}

// fkRowChange answers every subscription of a foreign key again when its
// row changes: Kafka Streams' ForeignTableJoinProcessorSupplier.
type fkRowChange[K, KO, VO any] struct {
	spec *processor.KeyValueSpec[subKey[KO, K], [16]byte]
	subs processor.KeyValueStore[subKey[KO, K], [16]byte]
}

func (p *fkRowChange[K, KO, VO]) Init(ctx processor.Context[K, response[VO]]) (err error) {
	p.subs, err = p.spec.Open(ctx)
	return err
}

func (p *fkRowChange[K, KO, VO]) Close() error { return nil }

func (p *fkRowChange[K, KO, VO]) Process(ctx processor.Context[K, response[VO]], rec processor.Record[KO, change[VO]]) error {
	type answer struct {
		key  K
		hash [16]byte
	}
	var answers []answer
	for k, h := range p.subs.PrefixScan(subKey[KO, K]{fk: rec.Key}) {
		answers = append(answers, answer{k.key, h})
	}
	if err := p.subs.Err(); err != nil {
		return err
	}
	hs := withNullIfAbsent(rec.Headers)
	for _, a := range answers {
		// The answers carry the row change's timestamp, as Kafka
		// Streams' do (not the later of it and the subscriber's).
		out := response[VO]{hash: a.hash, row: rec.Value.new, found: rec.Value.hasNew}
		if err := ctx.Forward(processor.Record[K, response[VO]]{Key: a.key, Value: out, Timestamp: rec.Timestamp, Headers: hs}); err != nil {
			return err
		}
	}
	return nil
}

// fkResolver joins the answers whose hash is that of the row's current
// value, and materializes the results: Kafka Streams'
// ResponseJoinProcessorSupplier.
type fkResolver[K, V, VO, VR any] struct {
	spec    *processor.KeyValueSpec[K, VR]
	lookup  *lookup[K, V]
	hashOf  func(V) ([16]byte, error)
	join    func(V, VO, bool) (VR, bool)
	results processor.KeyValueStore[K, VR]
	get     getter[K, V]
}

func (p *fkResolver[K, V, VO, VR]) Init(ctx processor.Context[K, change[VR]]) (err error) {
	if p.results, err = p.spec.Open(ctx); err != nil {
		return err
	}
	p.get, err = p.lookup.open(ctx)
	return err
}

func (p *fkResolver[K, V, VO, VR]) Close() error { return nil }

func (p *fkResolver[K, V, VO, VR]) Process(ctx processor.Context[K, change[VR]], rec processor.Record[K, response[VO]]) error {
	r := rec.Value
	headers, nullIfAbsent := takeNullIfAbsent(rec.Headers)
	v, _, found, err := p.get(rec.Key)
	if err != nil {
		return err
	}
	// Only an answer to the row as it is now counts.
	if found != !r.deleted {
		return nil
	}
	if found {
		h, err := p.hashOf(v)
		if err != nil {
			return err
		}
		if h != r.hash {
			return nil
		}
	}
	var c change[VR]
	if found {
		c.new, c.hasNew = p.join(v, r.row, r.found)
	}
	if c.old, c.hasOld, err = p.results.Get(rec.Key); err != nil {
		return err
	}
	switch {
	case c.hasNew:
		err = p.results.PutStamped(rec.Key, c.new, rec.Timestamp)
	case c.hasOld:
		err = p.results.Delete(rec.Key)
	case !r.deleted && !nullIfAbsent:
		return nil // no result before or after, and nothing to delete
	}
	if err != nil {
		return err
	}
	// A deleted row, a row moved to a foreign key without a row, and a
	// row whose foreign key's row was deleted delete the result even when
	// there was none, as in Kafka Streams: the change is then empty, a
	// tombstone downstream.
	return ctx.Forward(processor.Record[K, change[VR]]{Key: rec.Key, Value: c, Timestamp: rec.Timestamp, Headers: headers})
}

// subKey keys the subscription store: a foreign key, then the key of the
// row subscribed, so that a prefix scan of the foreign key finds its
// subscribers. It is written as the foreign key's length (uvarint), its
// bytes, then the key's bytes; without hasKey, only the foreign key part
// (a scan's prefix).
type subKey[KO, K any] struct {
	fk     KO
	key    K
	hasKey bool
}

type subKeySerde[KO, K any] struct {
	fks  serde.Serde[KO]
	keys serde.Serde[K]
}

func (s subKeySerde[KO, K]) Serialize(topic string, k subKey[KO, K]) ([]byte, error) {
	fb, err := s.fks.Serialize(topic, k.fk)
	if err != nil {
		return nil, err
	}
	out := append(binary.AppendUvarint(nil, uint64(len(fb))), fb...)
	if !k.hasKey {
		return out, nil
	}
	kb, err := s.keys.Serialize(topic, k.key)
	if err != nil {
		return nil, err
	}
	return append(out, kb...), nil
}

func (s subKeySerde[KO, K]) Deserialize(topic string, data []byte) (subKey[KO, K], error) {
	var k subKey[KO, K]
	n, w := binary.Uvarint(data)
	if w <= 0 || n > uint64(len(data)-w) {
		return k, errors.New("kstream: a subscription key is cut short")
	}
	var err error
	if k.fk, err = s.fks.Deserialize(topic, data[w:w+int(n)]); err != nil {
		return k, err
	}
	k.key, err = s.keys.Deserialize(topic, data[w+int(n):])
	k.hasKey = err == nil
	return k, err
}

type hashSerde struct{}

func (hashSerde) Serialize(_ string, h [16]byte) ([]byte, error) { return h[:], nil }

func (hashSerde) Deserialize(_ string, data []byte) ([16]byte, error) {
	if len(data) != 16 {
		return [16]byte{}, &serde.SizeError{Format: "hash", Want: 16, Got: len(data)}
	}
	return [16]byte(data), nil
}

// subscriptionSerde writes a subscription: what it asks, a flag for a
// deleted row, the hash (16 bytes), then the key's bytes.
type subscriptionSerde[K any] struct{ keys serde.Serde[K] }

func (s subscriptionSerde[K]) Serialize(topic string, sub subscription[K]) ([]byte, error) {
	kb, err := s.keys.Serialize(topic, sub.key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 18+len(kb))
	del := byte(0)
	if sub.deleted {
		del = 1
	}
	out = append(out, sub.ask, del)
	out = append(out, sub.hash[:]...)
	return append(out, kb...), nil
}

func (s subscriptionSerde[K]) Deserialize(topic string, data []byte) (subscription[K], error) {
	var sub subscription[K]
	if len(data) < 18 || data[0] > unsubscribeAndAnswer || data[1] > 1 {
		return sub, fmt.Errorf("kstream: a subscription needs 18 bytes of header, got %d", len(data))
	}
	sub.ask, sub.deleted, sub.hash = data[0], data[1] == 1, [16]byte(data[2:18])
	var err error
	sub.key, err = s.keys.Deserialize(topic, data[18:])
	return sub, err
}

// responseSerde writes a response: flags (1: the subscribed row was
// deleted, 2: the foreign key has a row), the hash (16 bytes), then the
// row's bytes.
type responseSerde[VO any] struct{ rows serde.Serde[VO] }

func (s responseSerde[VO]) Serialize(topic string, r response[VO]) ([]byte, error) {
	var flags byte
	if r.deleted {
		flags |= 1
	}
	var rb []byte
	if r.found {
		flags |= 2
		var err error
		if rb, err = s.rows.Serialize(topic, r.row); err != nil {
			return nil, err
		}
	}
	out := append(append(make([]byte, 0, 17+len(rb)), flags), r.hash[:]...)
	return append(out, rb...), nil
}

func (s responseSerde[VO]) Deserialize(topic string, data []byte) (response[VO], error) {
	var r response[VO]
	if len(data) < 17 || data[0]&^3 != 0 {
		return r, fmt.Errorf("kstream: a foreign-key join response needs 17 bytes of header, got %d", len(data))
	}
	r.deleted, r.found, r.hash = data[0]&1 != 0, data[0]&2 != 0, [16]byte(data[1:17])
	if r.found {
		var err error
		if r.row, err = s.rows.Deserialize(topic, data[17:]); err != nil {
			return r, err
		}
	}
	return r, nil
}
