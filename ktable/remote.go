package ktable

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
)

// HandlerPath is where an application mounts [Handler] on the server
// listening at its Config.AdvertisedAddr; other instances send their
// lookups there:
//
//	mux := http.NewServeMux()
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	mux.Handle(ktable.HandlerPath, ktable.Handler(app))
const HandlerPath = "/weir/v1/stores/"

// DefaultLookupTimeout bounds a forwarded lookup of a view made without
// WithClient: connecting, sending and reading the answer.
const DefaultLookupTimeout = 5 * time.Second

// maxAnswerBytes bounds the answer a lookup reads from another instance:
// a value of Kafka's default largest record, base64 encoded, in JSON.
const maxAnswerBytes = 4 << 20

// answer is the JSON a Handler sends: the value (base64, the store's
// serialized bytes) with found, or why the partition cannot be read.
type answer struct {
	Found bool   `json:"found"`
	Value []byte `json:"value,omitempty"`
	// Windows answers a window fetch, in ascending order of start.
	Windows []windowAnswer `json:"windows,omitempty"`
	// Entries answers a page of a partition's scan, in key order; More
	// says the range holds more after the last entry.
	Entries []entryAnswer `json:"entries,omitempty"`
	More    bool          `json:"more,omitempty"`

	// An unavailable partition (HTTP 503): the fields of a
	// *weir.StoreUnavailableError.
	Reason    string `json:"reason,omitempty"`
	Task      string `json:"task,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	// Error is the message of any failure.
	Error string `json:"error,omitempty"`
}

// windowAnswer is one window of a window fetch: its start in Unix
// milliseconds and its serialized value.
type windowAnswer struct {
	Start int64  `json:"start"`
	Value []byte `json:"value"`
}

// entryAnswer is one entry of a scan: serialized key and value.
type entryAnswer struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// Bounds of one page of a forwarded scan: a Handler answers at most
// scanPageEntries entries and about scanPageBytes of keys and values
// (the entry that crosses it included, so a page always makes progress),
// and says there is more.
const (
	scanPageEntries = chunk
	scanPageBytes   = 1 << 20
)

// Bounds of one forwarded window fetch's answer: a Handler refuses a
// fetch holding more windows, or more bytes of values, with HTTP 413,
// naming the bound, so that the asking view never reads a partial answer
// (the caller asks for shorter ranges). The bytes bound keeps the answer,
// base64 and JSON included, within what a view reads (4 MiB).
const (
	MaxLookupWindows     = 10_000
	MaxLookupWindowBytes = 2 << 20
)

// Handler serves lookups of app's stores for the views of the other
// instances: for key-value stores (View.Lookup), GET
// HandlerPath + "<store>/keys/<key>"; for window stores
// (WindowView.Lookup), GET
// HandlerPath + "<store>/windows/<key>?from=<ms>&to=<ms>", the windows of
// key that start in [from, to] (Unix milliseconds, both ends included),
// at most MaxLookupWindows windows and MaxLookupWindowBytes of values
// (beyond, 413: ask for a shorter range); for a page of a key-value
// store's partition (View.LookupAll, LookupRange, LookupPrefix), GET
// HandlerPath + "<store>/partitions/<p>?lo=<key>&hi=<key>", the entries
// with lo <= key < hi (either bound may be left out), in key order, at
// most 1,024 entries or about 1 MiB per page, with "more" set when the
// range goes on after the page's last key. The key is the store's
// serialized key in unpadded base64url. It answers from this instance's
// committed state only, as a local View.Get does, so a partition whose
// task does not run here, or still restores, is a 503 naming the reason,
// never data from a store that is closing or was left behind.
//
// With the query parameter max_lag=N it also answers from this
// instance's standby copy of the partition when that copy is at most N
// records behind (weir.StoreReader.WithStandbyReads), which is how a view
// with standby reads asks the standbys of a partition whose task cannot
// answer.
//
// Answers are JSON: 200 {"found": true, "value": "<base64>"} or
// {"found": false} for a key, {"windows": [{"start": <ms>, "value":
// "<base64>"}, ...]} for a window fetch, {"entries": [{"key":
// "<base64>", "value": "<base64>"}, ...], "more": true} for a page of a
// scan; 503 {"reason", "task", "partition", "error"} with Retry-After: 1;
// 404 for an unknown store; 400 for a malformed request or a route of
// the other kind of store.
// Values travel as the store's serialized bytes: the asking view
// deserializes them with its own serde.
func Handler(app *weir.App) http.Handler {
	return &handler{app: app, readers: map[string]*weir.StoreReader{}}
}

type handler struct {
	app     *weir.App
	mu      sync.Mutex
	readers map[string]*weir.StoreReader
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		reply(w, http.StatusMethodNotAllowed, answer{Error: "only GET"})
		return
	}
	// A store name never holds a raw "/" (views escape it), so the first
	// one ends it.
	rest, ok := strings.CutPrefix(req.URL.EscapedPath(), HandlerPath)
	store, rest, ok2 := strings.Cut(rest, "/")
	route, enc, ok3 := strings.Cut(rest, "/")
	if !ok || !ok2 || !ok3 || store == "" || (route != "keys" && route != "windows" && route != "partitions") || strings.Contains(enc, "/") {
		reply(w, http.StatusBadRequest, answer{Error: "want " + HandlerPath + "<store>/keys/<base64url key>, " + HandlerPath + "<store>/windows/<base64url key>?from=<ms>&to=<ms> or " + HandlerPath + "<store>/partitions/<partition>?lo=<base64url key>&hi=<base64url key>"})
		return
	}
	if s, err := url.PathUnescape(store); err == nil {
		store = s
	}
	var key []byte
	var partition int64
	var err error
	if route == "partitions" {
		partition, err = strconv.ParseInt(enc, 10, 32)
	} else {
		key, err = base64.RawURLEncoding.DecodeString(enc)
	}
	if err != nil {
		reply(w, http.StatusBadRequest, answer{Error: "the key is not unpadded base64url, or the partition not a number"})
		return
	}
	r, err := h.reader(store)
	if err != nil {
		reply(w, http.StatusNotFound, answer{Error: err.Error()})
		return
	}
	if windowed := route == "windows"; r.Windowed() != windowed {
		want := "keys"
		if r.Windowed() {
			want = "windows"
		}
		reply(w, http.StatusBadRequest, answer{Error: fmt.Sprintf("store %s is read at %s%s/%s/<key>", store, HandlerPath, url.PathEscape(store), want)})
		return
	}
	q := req.URL.Query()
	if ml := q.Get("max_lag"); ml != "" {
		n, err := strconv.ParseInt(ml, 10, 64)
		if err != nil || n < 0 {
			reply(w, http.StatusBadRequest, answer{Error: "max_lag must be a number of records, 0 or more"})
			return
		}
		r = r.WithStandbyReads(n)
	}
	var a answer
	switch route {
	case "keys":
		a.Value, a.Found, err = r.Get(key)
	case "partitions":
		var lo, hi []byte
		var lerr, herr error
		if v := q.Get("lo"); v != "" {
			lo, lerr = base64.RawURLEncoding.DecodeString(v)
		}
		if v := q.Get("hi"); v != "" {
			hi, herr = base64.RawURLEncoding.DecodeString(v)
		}
		if lerr != nil || herr != nil {
			reply(w, http.StatusBadRequest, answer{Error: "lo and hi must be unpadded base64url keys"})
			return
		}
		if n, perr := r.Partitions(); perr == nil && (partition < 0 || partition >= int64(n)) {
			reply(w, http.StatusBadRequest, answer{Error: fmt.Sprintf("store %s has partitions 0 to %d", store, n-1)})
			return
		}
		a.Entries, a.More, err = scanPage(r, int32(partition), lo, hi)
	default:
		from, ferr := strconv.ParseInt(q.Get("from"), 10, 64)
		to, terr := strconv.ParseInt(q.Get("to"), 10, 64)
		if ferr != nil || terr != nil || from > to {
			reply(w, http.StatusBadRequest, answer{Error: "from and to must be Unix milliseconds, from at most to"})
			return
		}
		var size int
		tooMany := false
		err = r.FetchWindows(key, time.UnixMilli(from), time.UnixMilli(to), func(start time.Time, v []byte) bool {
			size += len(v)
			if len(a.Windows) == MaxLookupWindows || size > MaxLookupWindowBytes {
				tooMany = true
				return false
			}
			a.Windows = append(a.Windows, windowAnswer{Start: start.UnixMilli(), Value: v})
			return true
		})
		if err == nil && tooMany {
			reply(w, http.StatusRequestEntityTooLarge, answer{Error: fmt.Sprintf("the range holds more than %d windows or %d bytes of values; ask for a shorter one", MaxLookupWindows, MaxLookupWindowBytes)})
			return
		}
	}
	var su *weir.StoreUnavailableError
	switch {
	case errors.As(err, &su):
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusServiceUnavailable, answer{Reason: su.Reason, Task: su.Task, Partition: su.Partition, Error: su.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, answer{Error: err.Error()})
	default:
		reply(w, http.StatusOK, a)
	}
}

// scanPage reads one page of partition p's entries with lo <= key < hi:
// at most scanPageEntries entries and about scanPageBytes, and whether
// the range holds more after the last one.
func scanPage(r *weir.StoreReader, p int32, lo, hi []byte) (entries []entryAnswer, more bool, err error) {
	size := 0
	err = r.Scan(p, lo, hi, func(k, v []byte) bool {
		if len(entries) == scanPageEntries || size >= scanPageBytes {
			more = true
			return false
		}
		entries = append(entries, entryAnswer{Key: slices.Clone(k), Value: slices.Clone(v)})
		size += len(k) + len(v)
		return true
	})
	return entries, more, err
}

func (h *handler) reader(store string) (*weir.StoreReader, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.readers[store]; r != nil {
		return r, nil
	}
	r, err := h.app.StoreReader(store)
	if err != nil {
		return nil, err
	}
	h.readers[store] = r
	return r, nil
}

func reply(w http.ResponseWriter, status int, a answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// forwarding is how a view reaches the other instances' handlers.
type forwarding struct {
	client *http.Client
	scheme string // "http" or "https"
}

func defaultForwarding() forwarding {
	return forwarding{client: &http.Client{Timeout: DefaultLookupTimeout}, scheme: "http"}
}

// WithClient makes v's lookups use c to reach other instances over plain
// HTTP (timeouts, a proxy, a transport of your own). It returns v.
func (v *View[K, V]) WithClient(c *http.Client) *View[K, V] {
	v.fw = forwarding{client: c, scheme: "http"}
	return v
}

// WithHTTPS makes v's lookups reach other instances over HTTPS with c,
// whose transport's TLS configuration trusts their certificates (and
// carries a client certificate, for mutual TLS): every instance then
// serves its Handler over TLS at its Config.AdvertisedAddr, whose host
// its certificate must name. Like WithClient, call it before the view is
// shared. It returns v.
func (v *View[K, V]) WithHTTPS(c *http.Client) *View[K, V] {
	v.fw = forwarding{client: c, scheme: "https"}
	return v
}

// WithStandbyReads lets v read standby copies of a partition (kept by
// Config.StandbyReplicas, or warm-ups) at most maxLag records behind
// their changelog: Get, All, Range and Prefix then also answer from this
// instance's standby copies, and Lookup, when the instance running the
// partition cannot answer (it is unreachable, or the partition is moving
// or restoring), asks the instances holding its standbys, this one first.
// Such answers are committed state but older than the task's (see
// weir.StoreReader.WithStandbyReads); what a failover makes unreadable
// for seconds stays readable. maxLag < 0 turns standby reads off (the
// default). Like WithClient, call it before the view is shared between
// goroutines. It returns v.
func (v *View[K, V]) WithStandbyReads(maxLag int64) *View[K, V] {
	v.r = v.r.WithStandbyReads(maxLag)
	return v
}

// Lookup returns the committed value of key wherever its partition runs:
// here, as Get does, or on the instance the group's newest assignment
// gives it to, asked over HTTP at its Config.AdvertisedAddr through its
// Handler. The answer is as fresh as that instance's last commit.
//
// A partition that cannot be read now is a *weir.StoreUnavailableError,
// which is worth retrying after a moment: the task restores
// (StoreRestoring), is being handed over (StoreMoving, or StoreNotHere
// from an instance it just left), or its instance did not answer
// (StoreUnreachable, with the cause). Lookup never returns data from a
// store its instance no longer runs. Without advertised addresses it
// reads only locally, as Get does. With standby reads (WithStandbyReads)
// it then tries the partition's standbys, and returns the active's error
// only when none of them answers within the lag bound either.
func (v *View[K, V]) Lookup(ctx context.Context, key K) (value V, found bool, err error) {
	kb, err := v.keys.Serialize(v.r.Name(), key)
	if err != nil {
		return value, false, fmt.Errorf("ktable: %s: serialize key: %w", v.r.Name(), err)
	}
	o, err := v.r.Owner(kb)
	if err != nil {
		return value, false, err
	}
	if o.Local || v.r.Advertised() == "" {
		return v.Get(key)
	}
	path := url.PathEscape(o.Store) + "/keys/" + base64.RawURLEncoding.EncodeToString(kb)
	a, from, err := forward(ctx, v.r, o,
		func() (answer, error) {
			vb, found, err := v.r.Get(kb)
			return answer{Found: found, Value: vb}, err
		},
		func(addr string, maxLag int64) (answer, error) { return ask(ctx, v.fw, o, addr, path, nil, maxLag) })
	if err != nil || !a.Found {
		return value, false, err
	}
	value, err = serde.Decode(v.values, v.r.Name(), a.Value)
	if err != nil {
		return value, false, fmt.Errorf("ktable: %s: deserialize value from %s: %w", v.r.Name(), from, err)
	}
	return value, true, nil
}

// forward runs a read of o's partition where it can be answered: at the
// active instance (remote with maxLag -1), and, when that fails with a
// *weir.StoreUnavailableError and r allows standby reads, at this
// instance's standby copy (local) or the first other standby that
// answers within r's lag bound. It returns the answer and the instance
// that gave it; the active's error when none answered.
func forward(ctx context.Context, r *weir.StoreReader, o weir.KeyOwner, local func() (answer, error), remote func(addr string, maxLag int64) (answer, error)) (answer, string, error) {
	var a answer
	var err error
	if o.Active == "" {
		err = &weir.StoreUnavailableError{Store: o.Store, Partition: o.Partition, Task: o.Task, Reason: weir.StoreMoving}
	} else if a, err = remote(o.Active, -1); err == nil {
		return a, o.Active, nil
	}
	var su *weir.StoreUnavailableError
	if !errors.As(err, &su) || r.MaxStandbyLag() < 0 || ctx.Err() != nil {
		return answer{}, "", err
	}
	self := r.Advertised()
	if slices.Contains(o.Standbys, self) {
		if a, lerr := local(); lerr == nil {
			return a, self, nil
		}
	}
	for _, addr := range o.Standbys {
		if addr == self || ctx.Err() != nil {
			continue
		}
		if a, serr := remote(addr, r.MaxStandbyLag()); serr == nil {
			return a, addr, nil
		}
	}
	return answer{}, "", err
}

// ask sends GET HandlerPath+path, over fw, (with query q, and max_lag when maxLag
// >= 0, which lets the instance answer from its standby copy within that
// many records) to the Handler at addr, and returns its answer.
func ask(ctx context.Context, fw forwarding, o weir.KeyOwner, addr, path string, q url.Values, maxLag int64) (answer, error) {
	unreachable := func(err error) error {
		return &weir.StoreUnavailableError{Store: o.Store, Partition: o.Partition, Task: o.Task, Reason: weir.StoreUnreachable, Instance: addr, Err: err}
	}
	u := fw.scheme + "://" + addr + HandlerPath + path
	if maxLag >= 0 {
		q = maps.Clone(q)
		if q == nil {
			q = url.Values{}
		}
		q.Set("max_lag", strconv.FormatInt(maxLag, 10))
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return answer{}, fmt.Errorf("ktable: %s: %w", o.Store, err)
	}
	resp, err := fw.client.Do(req)
	if err != nil {
		return answer{}, unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return answer{}, unreachable(err)
	}
	if len(body) > maxAnswerBytes {
		return answer{}, fmt.Errorf("ktable: %s: the answer of %s is over %d bytes", o.Store, addr, maxAnswerBytes)
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		// Not a weir Handler's answer: something else listens there.
		return answer{}, unreachable(fmt.Errorf("HTTP %d, not a store answer: %w", resp.StatusCode, err))
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return a, nil
	case http.StatusServiceUnavailable:
		return answer{}, &weir.StoreUnavailableError{Store: o.Store, Partition: a.Partition, Task: a.Task, Reason: a.Reason, Instance: addr}
	default:
		return answer{}, fmt.Errorf("ktable: %s: instance %s answered HTTP %d: %s", o.Store, addr, resp.StatusCode, a.Error)
	}
}

// WindowValue is one window of a key: its start and its committed
// aggregate.
type WindowValue[V any] struct {
	Start time.Time
	Value V
}

// WithClient makes v's lookups use c to reach other instances over
// plain HTTP, as View.WithClient does. It returns v.
func (v *WindowView[K, V]) WithClient(c *http.Client) *WindowView[K, V] {
	v.fw = forwarding{client: c, scheme: "http"}
	return v
}

// WithHTTPS makes v's lookups reach other instances over HTTPS with c,
// as View.WithHTTPS does. It returns v.
func (v *WindowView[K, V]) WithHTTPS(c *http.Client) *WindowView[K, V] {
	v.fw = forwarding{client: c, scheme: "https"}
	return v
}

// WithStandbyReads lets v read standby copies of a partition at most
// maxLag records behind their changelog, as View.WithStandbyReads does:
// Fetch then also answers from this instance's standby copies, and
// Lookup asks the partition's standbys when its active instance cannot
// answer. Call it before the view is shared. It returns v.
func (v *WindowView[K, V]) WithStandbyReads(maxLag int64) *WindowView[K, V] {
	v.r = v.r.WithStandbyReads(maxLag)
	return v
}

// Lookup returns the committed windows of key that start in [from, to],
// both ends included, in ascending order of start, wherever key's
// partition runs: here, as Fetch does, or on the instance that runs it,
// asked through its Handler (see View.Lookup, whose errors it shares: a
// *weir.StoreUnavailableError is worth retrying). Times travel in whole
// milliseconds. A remote instance answers at most MaxLookupWindows
// windows and MaxLookupWindowBytes of values per lookup and refuses a
// range holding more with an error naming HTTP 413 (ask for shorter
// ranges); a local fetch has no such bound.
func (v *WindowView[K, V]) Lookup(ctx context.Context, key K, from, to time.Time) ([]WindowValue[V], error) {
	name := v.r.Name()
	kb, err := v.keys.Serialize(name, key)
	if err != nil {
		return nil, fmt.Errorf("ktable: %s: serialize key: %w", name, err)
	}
	o, err := v.r.Owner(kb)
	if err != nil {
		return nil, err
	}
	local := func() (answer, error) {
		var a answer
		err := v.r.FetchWindows(kb, from, to, func(start time.Time, vb []byte) bool {
			a.Windows = append(a.Windows, windowAnswer{Start: start.UnixMilli(), Value: vb})
			return true
		})
		return a, err
	}
	var a answer
	src := "this instance"
	if o.Local || v.r.Advertised() == "" {
		a, err = local()
	} else {
		path := url.PathEscape(o.Store) + "/windows/" + base64.RawURLEncoding.EncodeToString(kb)
		q := url.Values{"from": {strconv.FormatInt(from.UnixMilli(), 10)}, "to": {strconv.FormatInt(to.UnixMilli(), 10)}}
		a, src, err = forward(ctx, v.r, o, local,
			func(addr string, maxLag int64) (answer, error) { return ask(ctx, v.fw, o, addr, path, q, maxLag) })
	}
	if err != nil {
		return nil, err
	}
	out := make([]WindowValue[V], 0, len(a.Windows))
	for _, w := range a.Windows {
		val, err := serde.Decode(v.values, name, w.Value)
		if err != nil {
			return nil, fmt.Errorf("ktable: %s: deserialize window at %d from %s: %w", name, w.Start, src, err)
		}
		out = append(out, WindowValue[V]{Start: time.UnixMilli(w.Start), Value: val})
	}
	return out, nil
}

// LookupAll yields every committed entry of the store, partition by
// partition, each in key order, wherever each partition runs: this
// instance's partitions are read here, as All reads them, the others
// page by page from the instance that runs them (through its Handler;
// with WithStandbyReads, from a standby within the lag bound when that
// instance cannot answer). A partition that cannot be read now is left
// out and its *weir.StoreUnavailableError is kept for Err; the iteration
// goes on with the next. ctx bounds the forwarded reads.
//
// It is not a snapshot: each page is its instance's committed state when
// it is read, and a partition that moves meanwhile goes on from its new
// owner after the last key yielded. A slow loop holds one page (at most
// 1,024 entries) at a time.
func (v *View[K, V]) LookupAll(ctx context.Context) iter.Seq2[K, V] {
	return v.lookupScan(ctx, nil, nil)
}

// LookupRange yields the committed entries with lo <= key < hi (by their
// serialized bytes) of every partition, wherever each runs, as LookupAll
// does.
func (v *View[K, V]) LookupRange(ctx context.Context, lo, hi K) iter.Seq2[K, V] {
	lb, err1 := v.keys.Serialize(v.r.Name(), lo)
	hb, err2 := v.keys.Serialize(v.r.Name(), hi)
	if err := errors.Join(err1, err2); err != nil {
		return v.fail(fmt.Errorf("ktable: %s: serialize bound: %w", v.r.Name(), err))
	}
	return v.lookupScan(ctx, lb, hb)
}

// LookupPrefix yields the committed entries whose serialized key starts
// with the serialized prefix, of every partition, wherever each runs, as
// LookupAll does (see Prefix for the serdes this suits).
func (v *View[K, V]) LookupPrefix(ctx context.Context, prefix K) iter.Seq2[K, V] {
	pb, err := v.keys.Serialize(v.r.Name(), prefix)
	if err != nil {
		return v.fail(fmt.Errorf("ktable: %s: serialize prefix: %w", v.r.Name(), err))
	}
	return v.lookupScan(ctx, pb, prefixEnd(pb))
}

func (v *View[K, V]) lookupScan(ctx context.Context, lo, hi []byte) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		name := v.r.Name()
		n, err := v.r.Partitions()
		if err != nil {
			v.setErr(err)
			return
		}
		for p := range n {
			from := lo
			for {
				page, src, err := v.page(ctx, p, from, hi)
				if err != nil {
					v.setErr(err)
					var ue *weir.StoreUnavailableError
					if !errors.As(err, &ue) || ctx.Err() != nil {
						return
					}
					break // the next partition may be readable
				}
				for _, e := range page.Entries {
					k, err := serde.Decode(v.keys, name, e.Key)
					var val V
					if err == nil {
						val, err = serde.Decode(v.values, name, e.Value)
					}
					if err != nil {
						v.setErr(fmt.Errorf("ktable: %s, partition %d from %s: decode entry: %w", name, p, src, err))
						return
					}
					if !yield(k, val) {
						return
					}
				}
				if !page.More || len(page.Entries) == 0 {
					break
				}
				// The next key after the page's last, in byte order.
				from = append(slices.Clone(page.Entries[len(page.Entries)-1].Key), 0)
			}
		}
	}
}

// page reads one page of partition p's entries in [from, hi) where the
// partition runs now, and says which instance answered.
func (v *View[K, V]) page(ctx context.Context, p int32, from, hi []byte) (answer, string, error) {
	local := func() (answer, error) {
		entries, more, err := scanPage(v.r, p, from, hi)
		return answer{Entries: entries, More: more}, err
	}
	o, err := v.r.PartitionOwner(p)
	if err != nil {
		return answer{}, "", err
	}
	if o.Local || v.r.Advertised() == "" {
		a, err := local()
		return a, "this instance", err
	}
	q := url.Values{}
	if from != nil {
		q.Set("lo", base64.RawURLEncoding.EncodeToString(from))
	}
	if hi != nil {
		q.Set("hi", base64.RawURLEncoding.EncodeToString(hi))
	}
	path := url.PathEscape(o.Store) + "/partitions/" + strconv.Itoa(int(p))
	return forward(ctx, v.r, o, local,
		func(addr string, maxLag int64) (answer, error) { return ask(ctx, v.fw, o, addr, path, q, maxLag) })
}
