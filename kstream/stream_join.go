package kstream

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// JoinWindows says which records of two streams join: a record of the
// left stream at time t joins the right stream's records of the same key
// from t-before to t+after, both included (so a right record at t' joins
// the left records from t'-after to t'+before). Make one with
// [JoinWithin]. Kafka Streams' JoinWindows.
type JoinWindows struct {
	before, after, grace time.Duration
}

// JoinWithin returns the join windows of records at most before earlier
// and after later than a left record, with no grace period. Both must be
// whole milliseconds, at least 0. Kafka Streams'
// JoinWindows.ofTimeDifferenceWithNoGrace, with before and after apart.
func JoinWithin(before, after time.Duration) JoinWindows {
	return JoinWindows{before: before, after: after}
}

// Grace returns w with a grace period d: a window stays open for records
// up to d after its end in stream time, and a left or outer join emits a
// record without a match only then. Kafka Streams'
// JoinWindows.ofTimeDifferenceAndGrace.
func (w JoinWindows) Grace(d time.Duration) JoinWindows {
	w.grace = d
	return w
}

func (w JoinWindows) problems() []string {
	var out []string
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"before", w.before}, {"after", w.after}, {"grace", w.grace}} {
		if d.d < 0 || !wholeMS(d.d) {
			out = append(out, fmt.Sprintf("join window %s %v is not a whole number of milliseconds, at least 0", d.name, d.d))
		}
	}
	return out
}

// JoinStream joins s (the left side) with other (the right side): every
// pair of records with the same key whose times fall within w (see
// [JoinWindows]) produces joiner's result, with the key and the later of
// the two timestamps, when the second of the two is processed. Kafka
// Streams' KStream.join with a KStream.
//
// Each side's records are kept in a window store for w's span plus its
// grace: name+"-left-store" and name+"-right-store", with changelogs;
// values are written with values and otherValues. name is required and
// also names the nodes (name+"-left", name+"-right", and name, which
// merges their results). Each store expires its records by the newest
// timestamp put into it, as Kafka Streams' do: it keeps a record while
// its time is later than that minus the store's retention, so one side's
// records never expire the other's. A record too old for its own side's
// store is still joined with what the other store holds, but is not kept
// for later records and is counted in weir_records_late_total. Records
// with a null key join nothing and move no time: an inner join drops
// them, a left join emits a left one at once as unmatched (joiner gets
// the zero K), an outer join a record of either side, as Kafka Streams
// does (KIP-962). Tombstones are skipped, but still move the join's
// stream time (the largest timestamp that reached either
// side, by which left and outer joins emit unmatched records). s and
// other must be partitioned by the key alike: neither may have been
// re-keyed since it was last partitioned by key (Build fails and names
// the step), and their topics must have the same partition count, which
// Run checks.
func (s *Stream[K, V]) JoinStream[VO, VR any](name string, other *Stream[K, VO], w JoinWindows, joiner func(key K, left V, right VO) VR, values serde.Serde[V], otherValues serde.Serde[VO]) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("JoinStream %q of %q: nil joiner", name, s.name)
	}
	return streamJoin(s, name, other, w, values, otherValues, joinFuncs[K, V, VO, VR]{
		inner: joiner,
	})
}

// LeftJoinStream is [Stream.JoinStream] that also emits every left record
// that joined no right record, as joiner(key, left, zero VO, false), once
// its window has closed (its time plus after plus grace is behind the
// join's stream time), never early: a record that finds its match later
// in the window produces no unmatched result. Unmatched records wait in
// the key-value store name+"-outer-store". Kafka Streams' KStream.leftJoin with a
// KStream, with its fix for spurious results.
func (s *Stream[K, V]) LeftJoinStream[VO, VR any](name string, other *Stream[K, VO], w JoinWindows, joiner func(key K, left V, right VO, found bool) VR, values serde.Serde[V], otherValues serde.Serde[VO]) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("LeftJoinStream %q of %q: nil joiner", name, s.name)
	}
	return streamJoin(s, name, other, w, values, otherValues, joinFuncs[K, V, VO, VR]{
		inner: func(k K, l V, r VO) VR { return joiner(k, l, r, true) },
		left:  func(k K, l V) VR { var zero VO; return joiner(k, l, zero, false) },
	})
}

// OuterJoinStream is [Stream.LeftJoinStream] for both sides: a right
// record that joined no left record is emitted too, as joiner(key, zero
// V, false, right, true), once its window has closed (its time plus
// before plus grace behind the join's stream time). Kafka Streams'
// KStream.outerJoin.
func (s *Stream[K, V]) OuterJoinStream[VO, VR any](name string, other *Stream[K, VO], w JoinWindows, joiner func(key K, left V, leftFound bool, right VO, rightFound bool) VR, values serde.Serde[V], otherValues serde.Serde[VO]) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("OuterJoinStream %q of %q: nil joiner", name, s.name)
	}
	return streamJoin(s, name, other, w, values, otherValues, joinFuncs[K, V, VO, VR]{
		inner: func(k K, l V, r VO) VR { return joiner(k, l, true, r, true) },
		left:  func(k K, l V) VR { var zero VO; return joiner(k, l, true, zero, false) },
		right: func(k K, r VO) VR { var zero V; return joiner(k, zero, false, r, true) },
	})
}

// joinFuncs are the results of a stream-stream join: inner for a pair,
// left and right for an unmatched record of each side (nil: none).
type joinFuncs[K, L, R, Out any] struct {
	inner func(K, L, R) Out
	left  func(K, L) Out
	right func(K, R) Out
}

// streamJoin adds the stores and nodes of a stream-stream join.
func streamJoin[K, L, R, Out any](s *Stream[K, L], name string, other *Stream[K, R], w JoinWindows, lvals serde.Serde[L], rvals serde.Serde[R], f joinFuncs[K, L, R, Out]) *Stream[K, Out] {
	b := s.b
	if other == nil || other.b != b {
		b.fail("stream join %q of %q: the other stream is nil or from another Builder", name, s.name)
		return &Stream[K, Out]{b: b, name: name}
	}
	for _, p := range w.problems() {
		b.fail("stream join %q: %s", name, p)
	}
	for _, side := range []struct{ name, rekeyedBy string }{{s.name, s.rekeyedBy}, {other.name, other.rekeyedBy}} {
		if side.rekeyedBy != "" {
			b.fail("stream join %q: the key of %q was changed by %q and the stream is not partitioned by it; "+
				"add a named repartition with Repartition(name, keySerde, valueSerde)", name, side.name, side.rekeyedBy)
		}
	}
	keys := s.keys
	if keys == nil {
		keys = other.keys
	}
	if lvals == nil || rvals == nil {
		b.fail("stream join %q: nil value serde", name)
	}
	// A record is kept while a record of the other side may still join
	// it: for the span of both sides' windows plus the grace period.
	retention := max(w.before+w.after+w.grace, time.Millisecond)
	lspec := processor.Window(name+"-left-store", time.Millisecond, retention, keys, serde.Serde[[]L](listSerde[L]{lvals}))
	rspec := processor.Window(name+"-right-store", time.Millisecond, retention, keys, serde.Serde[[]R](listSerde[R]{rvals}))
	var ospec *processor.KeyValueSpec[pendingKey[K], pending[L, R]]
	if f.left != nil || f.right != nil {
		ospec = processor.KeyValue(name+"-outer-store", serde.Serde[pendingKey[K]](pendingKeySerde[K]{keys}), serde.Serde[pending[L, R]](pendingSerde[L, R]{lvals, rvals}))
	}
	times := &joinTimes{m: map[string]*joinTime{}}
	emit := func(k K, p pending[L, R]) []Out {
		var out []Out
		for _, l := range p.lefts {
			out = append(out, f.left(k, l))
		}
		for _, r := range p.rights {
			out = append(out, f.right(k, r))
		}
		return out
	}
	// From the left: right records in [t-before, t+after]; a left record
	// waits for right records up to t+after. From the right, reversed.
	left := b.t.AddProcessor(name+"-left", func() processor.Processor[K, L, K, Out] {
		return &streamJoiner[K, L, R, L, R, Out]{
			this: lspec, other: rspec, outer: ospec, times: times, emit: emit, keys: keys,
			before: w.before.Milliseconds(), after: w.after.Milliseconds(), grace: w.grace.Milliseconds(),
			lookback: [2]int64{w.after.Milliseconds(), w.before.Milliseconds()}, isLeft: true,
			inner: f.inner, unmatched: f.left,
			pend: func(p *pending[L, R], v L) { p.left, p.lefts = true, append(p.lefts, v) },
		}
	}, s.node)
	right := b.t.AddProcessor(name+"-right", func() processor.Processor[K, R, K, Out] {
		return &streamJoiner[K, R, L, L, R, Out]{
			this: rspec, other: lspec, outer: ospec, times: times, emit: emit, keys: keys,
			before: w.after.Milliseconds(), after: w.before.Milliseconds(), grace: w.grace.Milliseconds(),
			lookback: [2]int64{w.after.Milliseconds(), w.before.Milliseconds()},
			inner:    func(k K, r R, l L) Out { return f.inner(k, l, r) }, unmatched: f.right,
			pend: func(p *pending[L, R], v R) { p.rights = append(p.rights, v) },
		}
	}, other.node)
	b.t.AddStore(lspec, left, right)
	b.t.AddStore(rspec, left, right)
	b.t.KeyedByPartition(lspec.Name())
	b.t.KeyedByPartition(rspec.Name())
	if ospec != nil {
		b.t.AddStore(ospec, left, right)
		b.t.KeyedByPartition(ospec.Name()) // the key after time and side (pendingKeySerde.KeyLayout)
	}
	n := b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, Out], rec processor.Record[K, Out]) error {
		return ctx.Forward(rec)
	}), left, right)
	return &Stream[K, Out]{b: b, node: n, name: name, keys: keys}
}

// joinTimes holds, per task, the earliest time of the records waiting in a
// join's outer store, shared by the join's two processors (Kafka Streams'
// shared TimeTracker), so that neither opens an iterator of the store
// while nothing in it can be due.
type joinTimes struct {
	mu sync.Mutex
	m  map[string]*joinTime
}

type joinTime struct {
	min int64 // math.MaxInt64: nothing waits
	// now is the join's stream time: the largest timestamp of the records
	// that reached either side (Kafka Streams' shared time tracker).
	now streamtime.Observed
	// stored is, per side (left 0, right 1), the largest timestamp put
	// into that side's store, by which the store expires its records (as
	// Kafka Streams' window stores expire by the newest time put into
	// them).
	stored [2]streamtime.Observed
}

func (j *joinTimes) get(task string) *joinTime {
	j.mu.Lock()
	defer j.mu.Unlock()
	t := j.m[task]
	if t == nil {
		t = &joinTime{min: math.MaxInt64}
		j.m[task] = t
	}
	return t
}

func (j *joinTimes) drop(task string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.m, task)
}

// streamJoiner is the processor of one side of a stream-stream join:
// Kafka Streams' KStreamKStreamJoin. T is this side's value type, O the
// other's; L and R are the left and right ones.
type streamJoiner[K, T, O, L, R, Out any] struct {
	this  *processor.WindowSpec[K, []T]
	other *processor.WindowSpec[K, []O]
	outer *processor.KeyValueSpec[pendingKey[K], pending[L, R]] // nil: inner join
	times *joinTimes
	emit  func(K, pending[L, R]) []Out
	keys  serde.Serde[K]
	// A record at t joins the other side's records in [t-before,
	// t+after], and waits for them up to t+after+grace.
	before, after, grace int64
	// lookback is how long a waiting record of the left [0] and of the
	// right [1] side waits before grace.
	lookback  [2]int64
	isLeft    bool
	inner     func(K, T, O) Out
	unmatched func(K, T) Out // nil: this side's unmatched records produce nothing
	pend      func(*pending[L, R], T)

	task      string
	time      *joinTime
	thisStore processor.WindowStore[K, []T]
	otherSt   processor.WindowStore[K, []O]
	outerSt   processor.KeyValueStore[pendingKey[K], pending[L, R]]
}

func (j *streamJoiner[K, T, O, L, R, Out]) Init(ctx processor.Context[K, Out]) (err error) {
	j.task = ctx.TaskID()
	j.time = j.times.get(j.task)
	me := j.side()
	if j.thisStore, err = j.this.Open(observedStores{ctx, &j.time.stored[me]}); err != nil {
		return err
	}
	if j.otherSt, err = j.other.Open(observedStores{ctx, &j.time.stored[1-me]}); err != nil {
		return err
	}
	if j.outer == nil {
		return nil
	}
	if j.outerSt, err = j.outer.Open(ctx); err != nil {
		return err
	}
	// The store is ordered by time: its first entry is the earliest.
	j.time.min = math.MaxInt64
	for k := range j.outerSt.All() {
		j.time.min = k.ts
		break
	}
	return j.outerSt.Err()
}

// side is the index of this side in joinTime.stored.
func (j *streamJoiner[K, T, O, L, R, Out]) side() int {
	if j.isLeft {
		return 0
	}
	return 1
}

func (j *streamJoiner[K, T, O, L, R, Out]) Close() error {
	j.times.drop(j.task)
	return nil
}

func (j *streamJoiner[K, T, O, L, R, Out]) Process(ctx processor.Context[K, Out], rec processor.Record[K, T]) error {
	if null, err := nullInputKey(ctx, j.keys, j.this.Name(), rec.Key); err != nil || null {
		if err != nil {
			return err
		}
		if j.unmatched != nil && !rec.Tombstone {
			// A record with a null key and a value on a side whose
			// unmatched records a left or outer join emits joins nothing,
			// and is emitted at once as unmatched, with its null key and
			// its timestamp (Kafka Streams' KIP-962). It is not kept and
			// moves no time.
			return ctx.Forward(processor.Record[K, Out]{Key: rec.Key, Value: j.unmatched(rec.Key, rec.Value), Timestamp: rec.Timestamp, Headers: rec.Headers})
		}
		// Otherwise it joins nothing and moves no time: Kafka Streams
		// drops it before its join. The runtime drops its write, and
		// counts and logs the record.
		return j.keep(ctx, rec.Key, rec.Timestamp, rec.Value)
	}
	ts := rec.Timestamp.UnixMilli()
	now := j.time.now.Observe(ctx, ts)
	if rec.Tombstone {
		// A record without a value joins nothing (Kafka Streams drops
		// it too), but moves the join's stream time as there.
		ctx.Logger().Debug("join skips a record without a value")
		return nil
	}
	j.time.stored[j.side()].Observe(ctx, ts)
	if err := j.keep(ctx, rec.Key, rec.Timestamp, rec.Value); err != nil {
		return err
	}
	if j.outerSt != nil && ts == now {
		if err := j.emitClosed(ctx, rec, now); err != nil {
			return err
		}
	}
	from, to := max(ts-j.before, 0), max(ts+j.after, 0)
	type match struct {
		ts int64
		v  O
	}
	var matches []match
	for at, vs := range j.otherSt.FetchRange(rec.Key, time.UnixMilli(from), time.UnixMilli(to)) {
		for _, v := range vs {
			matches = append(matches, match{at.UnixMilli(), v})
		}
	}
	if err := j.otherSt.Err(); err != nil {
		return err
	}
	for i, m := range matches {
		if j.outerSt != nil && (i == 0 || matches[i-1].ts != m.ts) {
			// The other side's record found its match: it no longer waits.
			if err := j.outerSt.Delete(pendingKey[K]{ts: m.ts, right: j.isLeft, key: rec.Key}); err != nil {
				return err
			}
		}
		out := processor.Record[K, Out]{Key: rec.Key, Value: j.inner(rec.Key, rec.Value, m.v), Timestamp: time.UnixMilli(max(ts, m.ts)).UTC(), Headers: rec.Headers}
		if err := ctx.Forward(out); err != nil {
			return err
		}
	}
	if len(matches) > 0 || j.unmatched == nil {
		return nil
	}
	if j.outerSt == nil || to < now {
		// Its window has closed already: nothing can join it any more.
		return ctx.Forward(processor.Record[K, Out]{Key: rec.Key, Value: j.unmatched(rec.Key, rec.Value), Timestamp: rec.Timestamp, Headers: rec.Headers})
	}
	k := pendingKey[K]{ts: ts, right: !j.isLeft, key: rec.Key}
	p, _, err := j.outerSt.Get(k)
	if err != nil {
		return err
	}
	j.pend(&p, rec.Value)
	if err := j.outerSt.Put(k, p); err != nil {
		return err
	}
	j.time.min = min(j.time.min, ts)
	return nil
}

// keep adds a record to this side's store, under its key and time. A
// record whose window has closed is not kept: it is counted as late.
func (j *streamJoiner[K, T, O, L, R, Out]) keep(ctx processor.Context[K, Out], key K, at time.Time, v T) error {
	vs, _, err := j.thisStore.Fetch(key, at)
	if err != nil {
		return err
	}
	err = j.thisStore.Put(key, at, append(vs, v))
	if errors.Is(err, changelog.ErrExpired) {
		processor.CountLate(ctx)
		ctx.Logger().Debug("stream join: record too late to be kept for later records", "store", j.this.Name())
		return nil
	}
	return err
}

// emitClosed emits, in time order, the waiting unmatched records whose
// windows stream time now has closed, and deletes them.
func (j *streamJoiner[K, T, O, L, R, Out]) emitClosed(ctx processor.Context[K, Out], rec processor.Record[K, T], now int64) error {
	shortest := min(j.lookback[0], j.lookback[1])
	if j.time.min == math.MaxInt64 || j.time.min+shortest+j.grace >= now {
		return nil
	}
	type due struct {
		k pendingKey[K]
		p pending[L, R]
	}
	var dues []due
	j.time.min = math.MaxInt64
	for k, p := range j.outerSt.All() {
		if k.ts+shortest+j.grace >= now {
			// Both sides' windows are open from here on (the store is
			// ordered by time): nothing later is due.
			j.time.min = min(j.time.min, k.ts)
			break
		}
		side := 0
		if k.right {
			side = 1
		}
		if k.ts+j.lookback[side]+j.grace >= now {
			j.time.min = min(j.time.min, k.ts)
			continue
		}
		dues = append(dues, due{k, p})
	}
	if err := j.outerSt.Err(); err != nil {
		return err
	}
	for _, d := range dues {
		if err := j.outerSt.Delete(d.k); err != nil {
			return err
		}
		for _, v := range j.emit(d.k.key, d.p) {
			if err := ctx.Forward(processor.Record[K, Out]{Key: d.k.key, Value: v, Timestamp: time.UnixMilli(d.k.ts).UTC(), Headers: rec.Headers}); err != nil {
				return err
			}
		}
	}
	return nil
}
