package ktable

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir"
)

// The handler's routes on an App that is not running: what is refused
// before any read (method, path, store, body, op) and what reaches the
// store and is answered 503 with Retry-After.
//
// Two answers of the protocol cannot be reached without a running App,
// and so are not tested here: a scan of a partition out of range is 400
// only once the store's partition count is known (StoreReader.Partitions
// fails on an App that is not running, so the handler goes on to the read,
// which is 503; the case "scan of partition 99" below documents that), and
// a window fetch over MaxLookupWindows or MaxLookupWindowBytes (413)
// needs windows in a store.
func TestHandlerRoutes(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	h := Handler(app, ServeStores("kv", "win", "missing", "a/b"))
	const (
		kv  = HandlerPath + "kv"
		win = HandlerPath + "win"
	)
	for _, c := range []struct {
		name, method, path, body string
		want                     int
		wantErr                  string // in the answer's error
	}{
		// Methods: POST only.
		{"GET", http.MethodGet, kv, "", http.StatusMethodNotAllowed, "only POST"},
		{"PUT", http.MethodPut, kv, `{"op":"get"}`, http.StatusMethodNotAllowed, "only POST"},
		{"DELETE", http.MethodDelete, kv, "", http.StatusMethodNotAllowed, "only POST"},
		// Paths: HandlerPath + one path-escaped store name.
		{"another prefix", http.MethodPost, "/weir/v1/stores/kv", `{"op":"get"}`, http.StatusBadRequest, "want POST " + HandlerPath},
		{"no store", http.MethodPost, HandlerPath, `{"op":"get"}`, http.StatusBadRequest, "want POST " + HandlerPath},
		{"a path below a store", http.MethodPost, kv + "/x", `{"op":"get"}`, http.StatusBadRequest, "want POST " + HandlerPath},
		// Stores: only those ServeStores names, and that exist.
		{"a store not served", http.MethodPost, HandlerPath + "sess", `{"op":"get"}`, http.StatusNotFound, "no such store here"},
		{"served, not in the topology", http.MethodPost, HandlerPath + "missing", `{"op":"get"}`, http.StatusNotFound, `no store "missing"`},
		// The name is path-unescaped: "a%2Fb" names the store "a/b".
		{"an escaped name", http.MethodPost, HandlerPath + "a%2Fb", `{"op":"get"}`, http.StatusNotFound, `no store "a/b"`},
		// Bodies that are not a query.
		{"empty body", http.MethodPost, kv, "", http.StatusBadRequest, "the body is not a query"},
		{"malformed JSON", http.MethodPost, kv, `{"op":"get"`, http.StatusBadRequest, "the body is not a query"},
		{"a JSON array", http.MethodPost, kv, `[]`, http.StatusBadRequest, "the body is not a query"},
		{"a key not base64", http.MethodPost, kv, `{"op":"get","key":"not base64!"}`, http.StatusBadRequest, "the body is not a query"},
		{"a partition not a number", http.MethodPost, kv, `{"op":"scan","partition":"0"}`, http.StatusBadRequest, "the body is not a query"},
		// Ops.
		{"no op", http.MethodPost, kv, `{}`, http.StatusBadRequest, `op must be`},
		{"null", http.MethodPost, kv, `null`, http.StatusBadRequest, `op must be`},
		{"an unknown op", http.MethodPost, kv, `{"op":"delete","key":"aw=="}`, http.StatusBadRequest, `op must be`},
		{"an op in capitals", http.MethodPost, kv, `{"op":"GET","key":"aw=="}`, http.StatusBadRequest, `op must be`},
		{"windows of a key-value store", http.MethodPost, kv, `{"op":"windows","key":"aw==","from":0,"to":1}`, http.StatusBadRequest, `store kv is read with op "get" or "scan"`},
		{"get of a window store", http.MethodPost, win, `{"op":"get","key":"aw=="}`, http.StatusBadRequest, `store win is read with op "windows"`},
		{"scan of a window store", http.MethodPost, win, `{"op":"scan"}`, http.StatusBadRequest, `store win is read with op "windows"`},
		{"a negative max_lag", http.MethodPost, kv, `{"op":"get","key":"aw==","max_lag":-1}`, http.StatusBadRequest, "max_lag must be"},
		{"windows from after to", http.MethodPost, win, `{"op":"windows","key":"aw==","from":2000,"to":1000}`, http.StatusBadRequest, "from at most to"},
		{"windows from after an omitted to", http.MethodPost, win, `{"op":"windows","key":"aw==","from":1}`, http.StatusBadRequest, "from at most to"},
		// Queries that reach the store: the App does not run.
		{"get", http.MethodPost, kv, `{"op":"get","key":"aw=="}`, http.StatusServiceUnavailable, "not running"},
		{"get without a key", http.MethodPost, kv, `{"op":"get"}`, http.StatusServiceUnavailable, "not running"},
		{"get with max_lag 0", http.MethodPost, kv, `{"op":"get","key":"aw==","max_lag":0}`, http.StatusServiceUnavailable, "not running"},
		{"scan", http.MethodPost, kv, `{"op":"scan","partition":0,"lo":"YQ==","hi":"Yg=="}`, http.StatusServiceUnavailable, "not running"},
		{"scan of partition 99", http.MethodPost, kv, `{"op":"scan","partition":99}`, http.StatusServiceUnavailable, "not running"},
		{"scan of partition -1", http.MethodPost, kv, `{"op":"scan","partition":-1}`, http.StatusServiceUnavailable, "not running"},
		{"windows", http.MethodPost, win, `{"op":"windows","key":"aw==","from":1000,"to":2000}`, http.StatusServiceUnavailable, "not running"},
		{"windows from = to", http.MethodPost, win, `{"op":"windows","key":"aw==","from":1000,"to":1000}`, http.StatusServiceUnavailable, "not running"},
		{"windows with max_lag", http.MethodPost, win, `{"op":"windows","key":"aw==","to":1000,"max_lag":7}`, http.StatusServiceUnavailable, "not running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, a := post(t, h, c.method, c.path, c.body)
			if rec.Code != c.want {
				t.Fatalf("HTTP %d %s; want %d", rec.Code, rec.Body, c.want)
			}
			if !strings.Contains(a.Error, c.wantErr) {
				t.Errorf("error %q; want it to say %q", a.Error, c.wantErr)
			}
			if a.Found || a.Value != nil || a.Windows != nil || a.Entries != nil || a.More {
				t.Errorf("a refusal carries data: %+v", a)
			}
			allow := rec.Header().Get("Allow")
			if want := c.want == http.StatusMethodNotAllowed; want != (allow == http.MethodPost) {
				t.Errorf("HTTP %d with Allow %q", rec.Code, allow)
			}
			retry := rec.Header().Get("Retry-After")
			if c.want == http.StatusServiceUnavailable {
				if retry != "1" {
					t.Errorf("Retry-After %q; want 1", retry)
				}
				if a.Reason != weir.StoreNotRunning {
					t.Errorf("reason %q; want %q", a.Reason, weir.StoreNotRunning)
				}
			} else {
				if retry != "" {
					t.Errorf("HTTP %d with Retry-After %q", rec.Code, retry)
				}
				if a.Reason != "" {
					t.Errorf("HTTP %d with reason %q", rec.Code, a.Reason)
				}
			}
		})
	}
}

// The body of a query is read up to maxQueryBytes: a query of exactly
// that many bytes is read, one byte more is refused as 400. (The padding
// is trailing white space, so that a body cut at the bound would still be
// a valid query: only the bound refuses it.)
func TestHandlerBoundsTheBody(t *testing.T) {
	t.Parallel()
	h := Handler(newApp(t, weir.AllowAll, ""), ServeStores("kv"))
	body := func(n int) string {
		q := `{"op":"get","key":"aw=="}`
		return q + strings.Repeat(" ", n-len(q))
	}
	if rec, _ := post(t, h, http.MethodPost, HandlerPath+"kv", body(maxQueryBytes)); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a body of %d bytes: HTTP %d %.200s; want it read (503: the App does not run)", maxQueryBytes, rec.Code, rec.Body)
	}
	rec, a := post(t, h, http.MethodPost, HandlerPath+"kv", body(maxQueryBytes+1))
	if rec.Code != http.StatusBadRequest || a.Error != "the body is not a query" {
		t.Errorf("a body of %d bytes: HTTP %d %.200s; want 400", maxQueryBytes+1, rec.Code, rec.Body)
	}
}

// The App's Config.Authorizer decides, with the request and the resource
// weir.StoreResource(store), before the body is read; a refusal is 403
// without the authorizer's reason; no authorizer refuses everything. A
// store that is not served is 404 whatever the authorizer says.
func TestHandlerAuthorization(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []weir.Resource
	byToken := weir.AuthorizerFunc(func(req *http.Request, r weir.Resource) error {
		mu.Lock()
		asked = append(asked, r)
		mu.Unlock()
		if req.Header.Get("Authorization") != "Bearer good" {
			return errors.New("secret reason: bad token")
		}
		return nil
	})
	deny := weir.AuthorizerFunc(func(*http.Request, weir.Resource) error { return errors.New("secret reason") })
	for _, c := range []struct {
		name   string
		auth   weir.Authorizer
		store  string
		token  string
		body   string
		want   int
		wantIn string
	}{
		{"allowed", byToken, "kv", "good", `{"op":"get","key":"aw=="}`, http.StatusServiceUnavailable, "not running"},
		{"allowed, window store", byToken, "win", "good", `{"op":"windows","key":"aw==","to":5}`, http.StatusServiceUnavailable, "not running"},
		{"allowed, bad body", byToken, "kv", "good", `{`, http.StatusBadRequest, "not a query"},
		{"bad token", byToken, "kv", "bad", `{"op":"get","key":"aw=="}`, http.StatusForbidden, "not authorized"},
		{"no token", byToken, "kv", "", `{"op":"get","key":"aw=="}`, http.StatusForbidden, "not authorized"},
		// Refused before the body is read: a bad body is still 403.
		{"refused, bad body", deny, "kv", "good", `{`, http.StatusForbidden, "not authorized"},
		{"refused, bad op", deny, "kv", "good", `{"op":"nope"}`, http.StatusForbidden, "not authorized"},
		{"no authorizer", nil, "kv", "good", `{"op":"get","key":"aw=="}`, http.StatusForbidden, "not authorized"},
		{"not served, allowed", byToken, "sess", "good", `{"op":"get","key":"aw=="}`, http.StatusNotFound, "no such store here"},
		{"not served, refused", deny, "sess", "good", `{"op":"get","key":"aw=="}`, http.StatusNotFound, "no such store here"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := Handler(newApp(t, c.auth, ""), ServeStores("kv", "win"))
			req, err := http.NewRequest(http.MethodPost, "http://x"+HandlerPath+c.store, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := newRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.wantIn) {
				t.Errorf("HTTP %d %s; want %d saying %q", rec.Code, rec.Body, c.want, c.wantIn)
			}
			if strings.Contains(rec.Body.String(), "secret reason") {
				t.Errorf("the answer %s carries the authorizer's reason", rec.Body)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[weir.Resource]bool{}
	for _, r := range asked {
		seen[r] = true
	}
	// Asked for the store of the request, and only for the stores served.
	if len(seen) != 2 || !seen[weir.StoreResource("kv")] || !seen[weir.StoreResource("win")] {
		t.Errorf("the authorizer was asked for %v; want store:kv and store:win", asked)
	}
}

// Concurrent requests share the handler's readers: one per store, made
// once; a store that does not exist is not kept.
func TestHandlerConcurrentRequestsShareReaders(t *testing.T) {
	t.Parallel()
	h := Handler(newApp(t, weir.AllowAll, ""), ServeStores("kv", "win", "missing")).(*handler)
	var wg sync.WaitGroup
	codes := make(chan int, 3*8*10)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				for _, q := range []struct{ path, body string }{
					{HandlerPath + "kv", `{"op":"get","key":"aw=="}`},
					{HandlerPath + "win", `{"op":"windows","key":"aw==","from":0,"to":1}`},
					{HandlerPath + "missing", `{"op":"get"}`},
				} {
					rec := newRecorder()
					h.ServeHTTP(rec, newPost(q.path, q.body))
					codes <- rec.Code
				}
			}
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusServiceUnavailable] != 2*8*10 || count[http.StatusNotFound] != 8*10 {
		t.Errorf("answers by status %v; want %d of 503 and %d of 404", count, 2*8*10, 8*10)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.readers) != 2 || h.readers["kv"] == nil || h.readers["win"] == nil {
		t.Errorf("the handler keeps readers %v; want kv and win only", h.readers)
	}
}
