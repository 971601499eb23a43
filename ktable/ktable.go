// Package ktable gives typed, read-only views of the key-value stores of
// a running weir application: its tables and aggregations, as of their
// last commit.
//
//	counts, err := ktable.KeyValue(app, "counts", serde.String(), serde.Int64())
//	n, found, err := counts.Get("weir")
//	for word, n := range counts.All() { ... }
//	if err := counts.Err(); err != nil { ... }
//
// A view reads what the stores' tasks last committed, never what they
// have changed since: under exactly once that may still be undone. It
// answers for the partitions whose tasks run on this instance and are not
// restoring; for the others it returns a *weir.StoreUnavailableError
// naming the task, so that a caller can retry later (a task restoring or
// moving) or ask the instance that runs it. View.Lookup (WindowView.Lookup
// for a key's windows, View.LookupAll and its kin for scans) does the
// asking:
// with Config.AdvertisedAddr and Config.Authorizer set on every instance
// and [Handler] mounted at [HandlerPath] next to the metrics (serving the
// stores [ServeStores] names), it forwards a lookup to the
// instance the group's newest assignment gives the key's partition to.
// Reads never see a store that has been closed: they fail once the App
// stops.
package ktable

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/firsterror"
	"github.com/weirstream/weir/serde"
)

// View is a typed, read-only view of one key-value store of an App. It is
// safe for concurrent use, except that Err reports the iteration errors
// of all goroutines together.
type View[K, V any] struct {
	r      *weir.StoreReader
	keys   serde.Serde[K]
	values serde.Serde[V]
	errs   *firsterror.Keeper // shared by the goroutines using this view
	fw     forwarding         // for Lookup's forwarded reads
}

// KeyValue returns a view of the key-value store name of app, read with
// the serdes the store was declared with. It fails if the topology has no
// key-value store of that name.
func KeyValue[K, V any](app *weir.App, name string, keys serde.Serde[K], values serde.Serde[V]) (*View[K, V], error) {
	if keys == nil || values == nil {
		return nil, errors.New("ktable: nil serde")
	}
	r, err := app.StoreReader(name)
	if err != nil {
		return nil, err
	}
	if r.Windowed() {
		return nil, fmt.Errorf("ktable: store %s is a window store; read it with Window", name)
	}
	return &View[K, V]{r: r, keys: keys, values: values, errs: &firsterror.Keeper{}, fw: defaultForwarding()}, nil
}

// Get returns the committed value of key and whether the store holds it.
// The error is a *weir.StoreUnavailableError when key's partition cannot
// be read here now.
func (v *View[K, V]) Get(key K) (value V, found bool, err error) {
	kb, err := v.keys.Serialize(v.r.Name(), key)
	if err != nil {
		return value, false, fmt.Errorf("ktable: %s: serialize key: %w", v.r.Name(), err)
	}
	vb, found, err := v.r.Get(kb)
	if err != nil || !found {
		return value, false, err
	}
	value, err = serde.Decode(v.values, v.r.Name(), vb)
	if err != nil {
		return value, false, fmt.Errorf("ktable: %s: deserialize value: %w", v.r.Name(), err)
	}
	return value, true, nil
}

// All yields every committed entry of the partitions this instance runs,
// partition by partition, each in key order. A partition that cannot be
// read (see Err) is left out; the iteration goes on with the next.
func (v *View[K, V]) All() iter.Seq2[K, V] { return v.scan(nil, nil) }

// Range yields the committed entries with lo <= key < hi (by their
// serialized bytes), as All does.
func (v *View[K, V]) Range(lo, hi K) iter.Seq2[K, V] {
	lb, err1 := v.keys.Serialize(v.r.Name(), lo)
	hb, err2 := v.keys.Serialize(v.r.Name(), hi)
	if err := errors.Join(err1, err2); err != nil {
		return v.fail(fmt.Errorf("ktable: %s: serialize bound: %w", v.r.Name(), err))
	}
	return v.scan(lb, hb)
}

// Prefix yields the committed entries whose serialized key starts with
// the serialized prefix, as All does: meaningful for serdes whose
// encoding of a prefix is a prefix of the encoding (serde.String,
// serde.Bytes).
func (v *View[K, V]) Prefix(prefix K) iter.Seq2[K, V] {
	pb, err := v.keys.Serialize(v.r.Name(), prefix)
	if err != nil {
		return v.fail(fmt.Errorf("ktable: %s: serialize prefix: %w", v.r.Name(), err))
	}
	return v.scan(pb, prefixEnd(pb))
}

// Err returns the first error the iterations since the last call met (a
// partition that could not be read, as a *weir.StoreUnavailableError, or
// an entry that could not be decoded), and clears it.
func (v *View[K, V]) Err() error { return v.errs.Take() }

func (v *View[K, V]) setErr(err error) { v.errs.Set(err) }

func (v *View[K, V]) fail(err error) iter.Seq2[K, V] {
	return func(func(K, V) bool) { v.setErr(err) }
}

// chunk bounds the entries a scan holds at once: it reads a partition
// chunk by chunk, and yields each chunk outside the reader, so that a
// slow loop holds neither memory nor the store.
const chunk = 1024

func (v *View[K, V]) scan(lo, hi []byte) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		n, err := v.r.Partitions()
		if err != nil {
			v.setErr(err)
			return
		}
		type entry struct {
			k K
			v V
		}
		for p := range n {
			from := lo
			for {
				var entries []entry
				var next []byte
				r := own(v.r)
				for kb, vb := range r.Scan(p, from, hi) {
					if len(entries) == chunk {
						next = append([]byte(nil), kb...)
						break
					}
					k, err := serde.Decode(v.keys, v.r.Name(), kb)
					if err == nil {
						var val V
						if val, err = serde.Decode(v.values, v.r.Name(), vb); err == nil {
							entries = append(entries, entry{k, val})
							continue
						}
					}
					// Reported; the entries before it and the next
					// partitions are still read.
					v.setErr(fmt.Errorf("ktable: %s, partition %d: decode entry: %w", v.r.Name(), p, err))
					break
				}
				if err := r.Err(); err != nil {
					v.setErr(err)
					var ue *weir.StoreUnavailableError
					if !errors.As(err, &ue) {
						return
					}
					break // the next partition may be readable
				}
				for _, e := range entries {
					if !yield(e.k, e.v) {
						return
					}
				}
				if next == nil {
					break
				}
				from = next
			}
		}
	}
}

// own returns a copy of r whose Err reports the errors of this call's
// iterations only: a view is shared between goroutines, and so is its
// reader.
func own(r *weir.StoreReader) *weir.StoreReader { return r.WithStandbyReads(r.MaxStandbyLag()) }

// prefixEnd returns the smallest key greater than every key that starts
// with prefix, or nil when there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// WindowView is a typed, read-only view of one window store of an App
// (a windowed aggregation's). It is safe for concurrent use, except that
// Err reports the iteration errors of all goroutines together.
type WindowView[K, V any] struct {
	r      *weir.StoreReader
	keys   serde.Serde[K]
	values serde.Serde[V]
	errs   *firsterror.Keeper // shared by the goroutines using this view
	fw     forwarding         // for Lookup's forwarded fetches
}

// Window returns a view of the window store name of app, read with the
// serdes the store was declared with. It fails if the topology has no
// window store of that name.
func Window[K, V any](app *weir.App, name string, keys serde.Serde[K], values serde.Serde[V]) (*WindowView[K, V], error) {
	if keys == nil || values == nil {
		return nil, errors.New("ktable: nil serde")
	}
	r, err := app.StoreReader(name)
	if err != nil {
		return nil, err
	}
	if !r.Windowed() {
		return nil, fmt.Errorf("ktable: store %s is not a window store", name)
	}
	return &WindowView[K, V]{r: r, keys: keys, values: values, errs: &firsterror.Keeper{}, fw: defaultForwarding()}, nil
}

// Fetch yields the start and committed aggregate of each of key's windows
// that start in [from, to], both ends included, in ascending order of
// start. A partition that cannot be read (see Err) yields nothing.
func (v *WindowView[K, V]) Fetch(key K, from, to time.Time) iter.Seq2[time.Time, V] {
	return func(yield func(time.Time, V) bool) {
		kb, err := v.keys.Serialize(v.r.Name(), key)
		if err != nil {
			v.setErr(fmt.Errorf("ktable: %s: serialize key: %w", v.r.Name(), err))
			return
		}
		type window struct {
			start time.Time
			v     V
		}
		// A key's windows within a range are few (its windows within the
		// store's retention at most): collect, then yield outside the
		// reader.
		var ws []window
		r := own(v.r)
		for start, vb := range r.FetchWindows(kb, from, to) {
			val, err := serde.Decode(v.values, v.r.Name(), vb)
			if err != nil {
				v.setErr(fmt.Errorf("ktable: %s: decode window: %w", v.r.Name(), err))
				return
			}
			ws = append(ws, window{start, val})
		}
		if err := r.Err(); err != nil {
			v.setErr(err)
			return
		}
		for _, w := range ws {
			if !yield(w.start, w.v) {
				return
			}
		}
	}
}

// Err returns the first error the fetches since the last call met, and
// clears it.
func (v *WindowView[K, V]) Err() error { return v.errs.Take() }

func (v *WindowView[K, V]) setErr(err error) { v.errs.Set(err) }
