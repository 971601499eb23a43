package ktable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/firsterror"
	"github.com/weirstream/weir/internal/hostport"
	"github.com/weirstream/weir/serde"
)

// HandlerPath is where an application mounts [Handler] on the server
// listening at its Config.AdvertisedAddr; other instances send their
// lookups there:
//
//	mux := http.NewServeMux()
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	mux.Handle(ktable.HandlerPath, ktable.Handler(app, ktable.ServeStores("counts")))
//
// Version 2 of the protocol carries keys in the request's body, never in
// its URL (v1 put them in the path, where proxies log them). Instances of
// the two versions do not answer each other: during a rolling upgrade
// from v1, a lookup that reaches an instance of the other version fails
// as StoreUnreachable until the upgrade is done.
const HandlerPath = "/weir/v2/stores/"

// maxQueryBytes bounds the body of a query a Handler reads: a key of
// Kafka's default largest record, base64 encoded, twice (a scan's
// bounds), in JSON.
const maxQueryBytes = 4 << 20

// DefaultLookupTimeout bounds a forwarded lookup of a view made without
// WithClient: connecting, sending and reading the answer.
const DefaultLookupTimeout = 5 * time.Second

// maxAnswerBytes bounds the answer a lookup reads from another instance:
// a value of Kafka's default largest record, base64 encoded, in JSON.
const maxAnswerBytes = 4 << 20

// query is the JSON body of a request to a Handler: what to read, with
// keys as the store's serialized bytes (base64 in JSON).
type query struct {
	// Op is "get" (Key), "windows" (Key, From, To) or "scan"
	// (Partition, Lo, Hi).
	Op        string `json:"op"`
	Key       []byte `json:"key,omitempty"`
	From      int64  `json:"from,omitempty"`
	To        int64  `json:"to,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Lo        []byte `json:"lo,omitempty"`
	Hi        []byte `json:"hi,omitempty"`
	// MaxLag, when set, lets the instance answer from its standby copy
	// at most that many records behind.
	MaxLag *int64 `json:"max_lag,omitempty"`
}

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
	Reason    weir.StoreUnavailableReason `json:"reason,omitempty"`
	Task      string                      `json:"task,omitempty"`
	Partition int32                       `json:"partition,omitempty"`
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

// HandlerOption configures [Handler].
type HandlerOption func(*handler)

// ServeStores names the stores the handler serves: no other store is
// read, whoever asks, and a request for one is answered 404 as for a
// store that does not exist. Without it the handler serves none.
func ServeStores(names ...string) HandlerOption {
	return func(h *handler) {
		for _, n := range names {
			h.allowed[n] = true
		}
	}
}

// Handler serves lookups of app's stores for the views of the other
// instances. Every request is a POST to HandlerPath + "<store>" (the
// store's name path-escaped) whose JSON body says what to read, keys
// being the store's serialized bytes in base64 (JSON's []byte): for a key
// of a key-value store (View.Lookup) {"op": "get", "key": ...}; for a
// window store (WindowView.Lookup) {"op": "windows", "key": ..., "from":
// <ms>, "to": <ms>}, the windows of the key that start in [from, to] (Unix
// milliseconds, both ends included), at most MaxLookupWindows windows and
// MaxLookupWindowBytes of values (beyond, 413: ask for a shorter range);
// for a page of a key-value store's partition (View.LookupAll,
// LookupRange, LookupPrefix) {"op": "scan", "partition": p, "lo": ...,
// "hi": ...}, the entries with lo <= key < hi (either bound may be left
// out), in key order, at most 1,024 entries or about 1 MiB per page, with
// "more" set when the range goes on after the page's last key. Keys never
// travel in URLs, which proxies and servers log. The body is read up to
// 4 MiB.
//
// Access: a store is served only when ServeStores names it (any other is
// 404) and app's Config.Authorizer allows the request
// weir.StoreResource(store) (403 otherwise, and without an authorizer
// always); both are checked before anything is read. Other instances'
// views send their requests through their WithCredentials hook, or with
// the client certificate of WithHTTPS's client, for the authorizer to
// identify them.
//
// It answers from this instance's committed state only, as a local
// View.Get does, so a partition whose task does not run here, or still
// restores, is a 503 naming the reason, never data from a store that is
// closing or was left behind. With "max_lag": N it also answers from this
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
// 404 for a store not served; 403 for a request the authorizer refuses;
// 400 for a malformed request or an op of the other kind of store; 405
// for a method other than POST. Values travel as the store's serialized
// bytes: the asking view deserializes them with its own serde.
func Handler(app *weir.App, opts ...HandlerOption) http.Handler {
	h := &handler{app: app, readers: map[string]*weir.StoreReader{}, allowed: map[string]bool{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

type handler struct {
	app     *weir.App
	allowed map[string]bool // ServeStores; read-only after Handler
	mu      sync.Mutex
	readers map[string]*weir.StoreReader
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q, r, ok := h.parse(w, req)
	if !ok {
		return
	}
	a, refused, err := h.read(w, r, q)
	if refused {
		return
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

// parse checks a request (method, path, store, authorization, body, op)
// and returns its query and the reader of its store, with the standby
// reads it asks for; a request it refuses is answered, and ok is false.
func (h *handler) parse(w http.ResponseWriter, req *http.Request) (q query, r *weir.StoreReader, ok bool) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, answer{Error: "only POST"})
		return query{}, nil, false
	}
	rest, ok := strings.CutPrefix(req.URL.EscapedPath(), HandlerPath)
	store, err := url.PathUnescape(rest)
	if !ok || err != nil || store == "" || strings.Contains(rest, "/") {
		reply(w, http.StatusBadRequest, answer{Error: "want POST " + HandlerPath + "<store>"})
		return query{}, nil, false
	}
	if !h.allowed[store] {
		reply(w, http.StatusNotFound, answer{Error: "no such store here"})
		return query{}, nil, false
	}
	if err := h.app.Authorize(req, weir.StoreResource(store)); err != nil {
		reply(w, http.StatusForbidden, answer{Error: "not authorized"})
		return query{}, nil, false
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxQueryBytes+1))
	if err == nil && len(body) > maxQueryBytes {
		err = fmt.Errorf("over %d bytes", maxQueryBytes)
	}
	if err == nil {
		err = json.Unmarshal(body, &q)
	}
	if err != nil {
		reply(w, http.StatusBadRequest, answer{Error: "the body is not a query"})
		return query{}, nil, false
	}
	r, err = h.reader(store)
	if err != nil {
		reply(w, http.StatusNotFound, answer{Error: err.Error()})
		return query{}, nil, false
	}
	if q.Op != "get" && q.Op != "windows" && q.Op != "scan" {
		reply(w, http.StatusBadRequest, answer{Error: `op must be "get", "windows" or "scan"`})
		return query{}, nil, false
	}
	if windowed := q.Op == "windows"; r.Windowed() != windowed {
		want := `"get" or "scan"`
		if r.Windowed() {
			want = `"windows"`
		}
		reply(w, http.StatusBadRequest, answer{Error: fmt.Sprintf("store %s is read with op %s", store, want)})
		return query{}, nil, false
	}
	if q.MaxLag != nil {
		if *q.MaxLag < 0 {
			reply(w, http.StatusBadRequest, answer{Error: "max_lag must be a number of records, 0 or more"})
			return query{}, nil, false
		}
		r = r.WithStandbyReads(*q.MaxLag)
	}
	return q, r, true
}

// read answers q from r. A query it refuses (a partition out of range, a
// reversed range, too many windows) is answered, and refused is true.
func (h *handler) read(w http.ResponseWriter, r *weir.StoreReader, q query) (a answer, refused bool, err error) {
	store := r.Name()
	switch q.Op {
	case "get":
		a.Value, a.Found, err = r.Get(q.Key)
	case "scan":
		if n, perr := r.Partitions(); perr == nil && (q.Partition < 0 || q.Partition >= n) {
			reply(w, http.StatusBadRequest, answer{Error: fmt.Sprintf("store %s has partitions 0 to %d", store, n-1)})
			return answer{}, true, nil
		}
		a.Entries, a.More, err = scanPage(r, q.Partition, q.Lo, q.Hi)
	default:
		if q.From > q.To {
			reply(w, http.StatusBadRequest, answer{Error: "from and to must be Unix milliseconds, from at most to"})
			return answer{}, true, nil
		}
		var size int
		tooMany := false
		rr := own(r)
		for start, v := range rr.FetchWindows(q.Key, time.UnixMilli(q.From), time.UnixMilli(q.To)) {
			size += len(v)
			if len(a.Windows) == MaxLookupWindows || size > MaxLookupWindowBytes {
				tooMany = true
				break
			}
			a.Windows = append(a.Windows, windowAnswer{Start: start.UnixMilli(), Value: v})
		}
		if err = rr.Err(); err == nil && tooMany {
			reply(w, http.StatusRequestEntityTooLarge, answer{Error: fmt.Sprintf("the range holds more than %d windows or %d bytes of values; ask for a shorter one", MaxLookupWindows, MaxLookupWindowBytes)})
			return answer{}, true, nil
		}
	}
	return a, false, err
}

// scanPage reads one page of partition p's entries with lo <= key < hi:
// at most scanPageEntries entries and about scanPageBytes, and whether
// the range holds more after the last one.
func scanPage(r *weir.StoreReader, p int32, lo, hi []byte) (entries []entryAnswer, more bool, err error) {
	size := 0
	rr := own(r)
	for k, v := range rr.Scan(p, lo, hi) {
		if len(entries) == scanPageEntries || size >= scanPageBytes {
			more = true
			break
		}
		entries = append(entries, entryAnswer{Key: slices.Clone(k), Value: slices.Clone(v)})
		size += len(k) + len(v)
	}
	err = rr.Err()
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
	// credentials, when set, adds the view's credentials to every
	// request it forwards (WithCredentials).
	credentials func(*http.Request) error
}

func defaultForwarding() forwarding {
	return forwarding{client: noRedirects(&http.Client{Timeout: DefaultLookupTimeout}), scheme: "http"}
}

// noRedirects returns a copy of c that follows no redirect: an answer is
// the addressed instance's own, never one another server sends it to.
func noRedirects(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// WithClient makes v's lookups use c to reach other instances over plain
// HTTP (timeouts, a proxy, a transport of your own); a redirect is never
// followed, whatever c's CheckRedirect says. It returns a copy of v so
// configured; v is unchanged (every With method of a view or a
// weir.StoreReader works so).
func (v *View[K, V]) WithClient(c *http.Client) *View[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.client, cp.fw.scheme = noRedirects(c), "http"
	return &cp
}

// WithCredentials makes v call add on every request it forwards to
// another instance, to add what that instance's Config.Authorizer
// identifies it by (a bearer token, a signature); an error from add fails
// the lookup. Mutual TLS needs no hook: give WithHTTPS a client whose
// transport presents a certificate. It returns a copy of v so configured.
func (v *View[K, V]) WithCredentials(add func(*http.Request) error) *View[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.credentials = add
	return &cp
}

// WithHTTPS makes v's lookups reach other instances over HTTPS with c,
// whose transport's TLS configuration trusts their certificates (and
// carries a client certificate, for mutual TLS): every instance then
// serves its Handler over TLS at its Config.AdvertisedAddr, whose host
// its certificate must name. It returns a copy of v so configured.
func (v *View[K, V]) WithHTTPS(c *http.Client) *View[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.client, cp.fw.scheme = noRedirects(c), "https"
	return &cp
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
// default). It returns a copy of v so configured; v is unchanged.
func (v *View[K, V]) WithStandbyReads(maxLag int64) *View[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.r = v.r.WithStandbyReads(maxLag)
	return &cp
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
	a, from, err := forward(ctx, v.r, o,
		func() (answer, error) {
			vb, found, err := v.r.Get(kb)
			return answer{Found: found, Value: vb}, err
		},
		func(addr string, maxLag int64) (answer, error) {
			return ask(ctx, v.fw, o, addr, query{Op: "get", Key: kb}, maxLag)
		})
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

// ask sends q to the Handler at addr over fw (with max_lag when maxLag
// >= 0, which lets the instance answer from its standby copy within that
// many records), and returns its answer. addr comes from the group's
// assignment: it is checked to be a plain host:port again here, and the
// URL is built from its parts, so no member can make a view send a
// request elsewhere than HandlerPath on some host. Errors name the
// instance and the store, never the key.
func ask(ctx context.Context, fw forwarding, o weir.KeyOwner, addr string, q query, maxLag int64) (answer, error) {
	unreachable := func(err error) error {
		return &weir.StoreUnavailableError{Store: o.Store, Partition: o.Partition, Task: o.Task, Reason: weir.StoreUnreachable, Instance: addr, Err: err}
	}
	if err := hostport.Check(addr); err != nil {
		return answer{}, unreachable(fmt.Errorf("the instance's address is not host:port: %w", err))
	}
	if maxLag >= 0 {
		q.MaxLag = &maxLag
	}
	body, err := json.Marshal(q)
	if err != nil {
		return answer{}, fmt.Errorf("ktable: %s: %w", o.Store, err)
	}
	u := url.URL{Scheme: fw.scheme, Host: addr, Path: HandlerPath + o.Store, RawPath: HandlerPath + url.PathEscape(o.Store)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return answer{}, fmt.Errorf("ktable: %s: %w", o.Store, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if fw.credentials != nil {
		if err := fw.credentials(req); err != nil {
			return answer{}, fmt.Errorf("ktable: %s: adding credentials: %w", o.Store, err)
		}
	}
	resp, err := fw.client.Do(req)
	if err != nil {
		return answer{}, unreachable(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return answer{}, unreachable(err)
	}
	if len(raw) > maxAnswerBytes {
		return answer{}, fmt.Errorf("ktable: %s: the answer of %s is over %d bytes", o.Store, addr, maxAnswerBytes)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		// Not a weir Handler's answer: something else listens there, or
		// a redirect (never followed).
		return answer{}, unreachable(fmt.Errorf("HTTP %d, not a store answer: %w", resp.StatusCode, err))
	}
	switch resp.StatusCode {
	case http.StatusOK:
		// A Handler's answer always says found; a 200 that does not is
		// another service's, never "not found".
		var has struct {
			Found *bool `json:"found"`
		}
		if json.Unmarshal(raw, &has); has.Found == nil {
			return answer{}, unreachable(errors.New("HTTP 200, not a store answer: no found field"))
		}
		return a, nil
	case http.StatusServiceUnavailable:
		if !knownReason(a.Reason) {
			return answer{}, unreachable(fmt.Errorf("HTTP 503, not a store answer: reason %q", a.Reason))
		}
		return answer{}, &weir.StoreUnavailableError{Store: o.Store, Partition: a.Partition, Task: a.Task, Reason: a.Reason, Instance: addr}
	default:
		return answer{}, fmt.Errorf("ktable: %s: instance %s answered HTTP %d: %s", o.Store, addr, resp.StatusCode, a.Error)
	}
}

// knownReason reports whether r is one of weir's reasons a Handler
// answers a 503 with.
func knownReason(r weir.StoreUnavailableReason) bool {
	switch r {
	case weir.StoreNotRunning, weir.StoreNotHere, weir.StoreRestoring, weir.StoreMoving, weir.StoreUnreachable, weir.StoreStandbyBehind:
		return true
	}
	return false
}

// WindowValue is one window of a key: its start and its committed
// aggregate.
type WindowValue[V any] struct {
	Start time.Time
	Value V
}

// WithClient makes v's lookups use c to reach other instances over
// plain HTTP, as View.WithClient does. It returns a copy of v so
// configured.
func (v *WindowView[K, V]) WithClient(c *http.Client) *WindowView[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.client, cp.fw.scheme = noRedirects(c), "http"
	return &cp
}

// WithCredentials makes v call add on every request it forwards, as
// View.WithCredentials does. It returns a copy of v so configured.
func (v *WindowView[K, V]) WithCredentials(add func(*http.Request) error) *WindowView[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.credentials = add
	return &cp
}

// WithHTTPS makes v's lookups reach other instances over HTTPS with c,
// as View.WithHTTPS does. It returns a copy of v so configured.
func (v *WindowView[K, V]) WithHTTPS(c *http.Client) *WindowView[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.fw.client, cp.fw.scheme = noRedirects(c), "https"
	return &cp
}

// WithStandbyReads lets v read standby copies of a partition at most
// maxLag records behind their changelog, as View.WithStandbyReads does:
// Fetch then also answers from this instance's standby copies, and
// Lookup asks the partition's standbys when its active instance cannot
// answer. It returns a copy of v so configured.
func (v *WindowView[K, V]) WithStandbyReads(maxLag int64) *WindowView[K, V] {
	cp := *v
	cp.errs = &firsterror.Keeper{} // a copy reports its own iterations
	cp.r = v.r.WithStandbyReads(maxLag)
	return &cp
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
		r := own(v.r)
		for start, vb := range r.FetchWindows(kb, from, to) {
			a.Windows = append(a.Windows, windowAnswer{Start: start.UnixMilli(), Value: vb})
		}
		return a, r.Err()
	}
	var a answer
	src := "this instance"
	if o.Local || v.r.Advertised() == "" {
		a, err = local()
	} else {
		q := query{Op: "windows", Key: kb, From: from.UnixMilli(), To: to.UnixMilli()}
		a, src, err = forward(ctx, v.r, o, local,
			func(addr string, maxLag int64) (answer, error) { return ask(ctx, v.fw, o, addr, q, maxLag) })
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
	q := query{Op: "scan", Partition: p, Lo: from, Hi: hi}
	return forward(ctx, v.r, o, local,
		func(addr string, maxLag int64) (answer, error) { return ask(ctx, v.fw, o, addr, q, maxLag) })
}
