package ktable

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir"
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

	// An unavailable partition (HTTP 503): the fields of a
	// *weir.StoreUnavailableError.
	Reason    string `json:"reason,omitempty"`
	Task      string `json:"task,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	// Error is the message of any failure.
	Error string `json:"error,omitempty"`
}

// Handler serves lookups of app's key-value stores for the views of the
// other instances (View.Lookup): GET
// HandlerPath + "<store>/keys/<key>", the key being the store's
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
// {"found": false}; 503 {"reason", "task", "partition", "error"} with
// Retry-After: 1; 404 for an unknown store; 400 for a malformed request.
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
	rest, ok := strings.CutPrefix(req.URL.EscapedPath(), HandlerPath)
	store, enc, ok2 := strings.Cut(rest, "/keys/")
	if !ok || !ok2 || store == "" || strings.Contains(enc, "/") {
		reply(w, http.StatusBadRequest, answer{Error: "want " + HandlerPath + "<store>/keys/<base64url key>"})
		return
	}
	if s, err := url.PathUnescape(store); err == nil {
		store = s
	}
	key, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		reply(w, http.StatusBadRequest, answer{Error: "the key is not unpadded base64url"})
		return
	}
	r, err := h.reader(store)
	if err != nil {
		reply(w, http.StatusNotFound, answer{Error: err.Error()})
		return
	}
	if ml := req.URL.Query().Get("max_lag"); ml != "" {
		n, err := strconv.ParseInt(ml, 10, 64)
		if err != nil || n < 0 {
			reply(w, http.StatusBadRequest, answer{Error: "max_lag must be a number of records, 0 or more"})
			return
		}
		r = r.WithStandbyReads(n)
	}
	value, found, err := r.Get(key)
	var su *weir.StoreUnavailableError
	switch {
	case errors.As(err, &su):
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusServiceUnavailable, answer{Reason: su.Reason, Task: su.Task, Partition: su.Partition, Error: su.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, answer{Error: err.Error()})
	default:
		reply(w, http.StatusOK, answer{Found: found, Value: value})
	}
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
	if r.Windowed() {
		return nil, fmt.Errorf("ktable: store %s is a window store; the handler serves key-value stores", store)
	}
	h.readers[store] = r
	return r, nil
}

func reply(w http.ResponseWriter, status int, a answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// WithClient makes v's lookups use c to reach other instances (TLS,
// timeouts, a proxy): a client of the https scheme's transport is still
// sent http:// URLs unless its Transport rewrites them. It returns v.
func (v *View[K, V]) WithClient(c *http.Client) *View[K, V] {
	v.client = c
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
	var vb []byte
	from := o.Active
	if o.Active == "" {
		err = &weir.StoreUnavailableError{Store: o.Store, Partition: o.Partition, Task: o.Task, Reason: weir.StoreMoving}
	} else {
		vb, found, err = v.fetch(ctx, o, o.Active, kb, -1)
	}
	var su *weir.StoreUnavailableError
	if errors.As(err, &su) && v.r.MaxStandbyLag() >= 0 && ctx.Err() == nil {
		if vb, found, from, err = v.fromStandbys(ctx, o, kb, err); err != nil {
			return value, false, err
		}
	}
	if err != nil || !found {
		return value, false, err
	}
	value, err = v.values.Deserialize(v.r.Name(), vb)
	if err != nil {
		return value, false, fmt.Errorf("ktable: %s: deserialize value from %s: %w", v.r.Name(), from, err)
	}
	return value, true, nil
}

// fromStandbys reads key from this instance's standby copy, or else from
// the first of o's standbys that answers within the lag bound; it
// returns activeErr when none does.
func (v *View[K, V]) fromStandbys(ctx context.Context, o weir.KeyOwner, key []byte, activeErr error) (value []byte, found bool, from string, err error) {
	self := v.r.Advertised()
	if slices.Contains(o.Standbys, self) {
		value, found, err := v.r.Get(key)
		if err == nil {
			return value, found, self, nil
		}
	}
	for _, addr := range o.Standbys {
		if addr == self || ctx.Err() != nil {
			continue
		}
		value, found, err := v.fetch(ctx, o, addr, key, v.r.MaxStandbyLag())
		if err == nil {
			return value, found, addr, nil
		}
	}
	return nil, false, "", activeErr
}

// fetch asks the Handler at addr for key; maxLag >= 0 lets it answer
// from its standby copy within that many records.
func (v *View[K, V]) fetch(ctx context.Context, o weir.KeyOwner, addr string, key []byte, maxLag int64) ([]byte, bool, error) {
	unreachable := func(err error) error {
		return &weir.StoreUnavailableError{Store: o.Store, Partition: o.Partition, Task: o.Task, Reason: weir.StoreUnreachable, Instance: addr, Err: err}
	}
	u := "http://" + addr + HandlerPath + url.PathEscape(o.Store) + "/keys/" + base64.RawURLEncoding.EncodeToString(key)
	if maxLag >= 0 {
		u += "?max_lag=" + strconv.FormatInt(maxLag, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, fmt.Errorf("ktable: %s: %w", o.Store, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, false, unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, false, unreachable(err)
	}
	if len(body) > maxAnswerBytes {
		return nil, false, fmt.Errorf("ktable: %s: the answer of %s is over %d bytes", o.Store, addr, maxAnswerBytes)
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		// Not a weir Handler's answer: something else listens there.
		return nil, false, unreachable(fmt.Errorf("HTTP %d, not a store answer: %w", resp.StatusCode, err))
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return a.Value, a.Found, nil
	case http.StatusServiceUnavailable:
		return nil, false, &weir.StoreUnavailableError{Store: o.Store, Partition: a.Partition, Task: a.Task, Reason: a.Reason, Instance: addr}
	default:
		return nil, false, fmt.Errorf("ktable: %s: instance %s answered HTTP %d: %s", o.Store, addr, resp.StatusCode, a.Error)
	}
}
