package ktable

import (
	"bytes"
	"errors"
	"iter"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
)

// KeyValue and Window take only a store of their kind that the topology
// has, and serdes.
func TestViewConstruction(t *testing.T) {
	t.Parallel()
	app := newApp(t, nil, "")
	kv := func(name string) error {
		_, err := KeyValue(app, name, serde.String(), serde.String())
		return err
	}
	win := func(name string) error {
		_, err := Window(app, name, serde.String(), serde.Int64())
		return err
	}
	for _, c := range []struct {
		name    string
		err     error
		wantErr string // "" for success
	}{
		{"KeyValue of a key-value store", kv("kv"), ""},
		{"KeyValue of a missing store", kv("nope"), `no store "nope"`},
		{"KeyValue of a window store", kv("win"), "store win is a window store; read it with Window"},
		{"KeyValue of a session store", kv("sess"), "session"},
		{"KeyValue with nil keys", func() error { _, err := KeyValue[string, string](app, "kv", nil, serde.String()); return err }(), "nil serde"},
		{"KeyValue with nil values", func() error { _, err := KeyValue[string, string](app, "kv", serde.String(), nil); return err }(), "nil serde"},
		{"Window of a window store", win("win"), ""},
		{"Window of a missing store", win("nope"), `no store "nope"`},
		{"Window of a key-value store", win("kv"), "store kv is not a window store"},
		{"Window of a session store", win("sess"), "session"},
		{"Window with nil keys", func() error { _, err := Window[string, int64](app, "win", nil, serde.Int64()); return err }(), "nil serde"},
		{"Window with nil values", func() error { _, err := Window[string, int64](app, "win", serde.String(), nil); return err }(), "nil serde"},
	} {
		switch {
		case c.wantErr == "" && c.err != nil:
			t.Errorf("%s: %v", c.name, c.err)
		case c.wantErr != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.wantErr)):
			t.Errorf("%s: error %v; want one saying %q", c.name, c.err, c.wantErr)
		}
	}
}

// On an App that is not running every iteration yields nothing and
// leaves a *weir.StoreUnavailableError for Err, which the next Err no
// longer returns.
func TestViewIterationsBeforeRun(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	v := kvView(t, app)
	w := winView(t, app)
	if err := v.Err(); err != nil {
		t.Fatalf("a new view's Err = %v", err)
	}
	for _, c := range []struct {
		name string
		seq  iter.Seq2[string, string]
	}{
		{"All", v.All()},
		{"Range", v.Range("a", "z")},
		{"Prefix", v.Prefix("a")},
		{"Prefix of nothing", v.Prefix("")},
		{"LookupAll", v.LookupAll(t.Context())},
		{"LookupRange", v.LookupRange(t.Context(), "a", "z")},
		{"LookupPrefix", v.LookupPrefix(t.Context(), "a")},
	} {
		for k, val := range c.seq {
			t.Errorf("%s yielded %q=%q", c.name, k, val)
		}
		notRunning(t, c.name+", Err", v.Err(), "kv")
		if err := v.Err(); err != nil {
			t.Errorf("%s, second Err = %v; want nil (Err clears)", c.name, err)
		}
	}
	// An iteration not run reports nothing.
	_ = v.All()
	if err := v.Err(); err != nil {
		t.Errorf("Err after an All not iterated = %v", err)
	}

	for start, n := range w.Fetch("k", time.UnixMilli(0), time.UnixMilli(1000)) {
		t.Errorf("Fetch yielded %v=%d", start, n)
	}
	notRunning(t, "Fetch, Err", w.Err(), "win")
	if err := w.Err(); err != nil {
		t.Errorf("Fetch, second Err = %v; want nil", err)
	}

	if _, _, err := v.Get("k"); err == nil {
		t.Error("Get before Run answered")
	} else {
		notRunning(t, "Get", err, "kv")
	}
	if _, found, err := v.Lookup(t.Context(), "k"); found {
		t.Error("Lookup before Run found a value")
	} else {
		notRunning(t, "Lookup", err, "kv")
	}
	if ws, err := w.Lookup(t.Context(), "k", time.UnixMilli(0), time.UnixMilli(1000)); len(ws) != 0 {
		t.Errorf("WindowView.Lookup before Run = %v", ws)
	} else {
		notRunning(t, "WindowView.Lookup", err, "win")
	}
	// Get and Lookup return their error: they leave none for Err.
	if err := v.Err(); err != nil {
		t.Errorf("Err after Get and Lookup = %v", err)
	}
	if err := w.Err(); err != nil {
		t.Errorf("WindowView.Err after Lookup = %v", err)
	}
}

// A key that cannot be serialized fails the read: Get and Lookup return
// the error, the iterations leave it for Err. Err keeps the first error
// met since it was last called.
func TestViewSerializeErrors(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	v, err := KeyValue(app, "kv", serde.Serde[string](failing{}), serde.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Get("k"); err == nil || !strings.Contains(err.Error(), "serialize key") {
		t.Errorf("Get = %v; want a serialize error", err)
	}
	if _, _, err := v.Lookup(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), "serialize key") {
		t.Errorf("Lookup = %v; want a serialize error", err)
	}
	for _, c := range []struct {
		name, want string
		seq        iter.Seq2[string, string]
	}{
		{"Range", "serialize bound", v.Range("a", "b")},
		{"Prefix", "serialize prefix", v.Prefix("a")},
		{"LookupRange", "serialize bound", v.LookupRange(t.Context(), "a", "b")},
		{"LookupPrefix", "serialize prefix", v.LookupPrefix(t.Context(), "a")},
	} {
		for range c.seq {
			t.Errorf("%s yielded", c.name)
		}
		// All fails too (the App does not run), after: Err keeps the
		// first.
		for range v.All() {
			t.Errorf("All yielded")
		}
		err := v.Err()
		var su *weir.StoreUnavailableError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &su) {
			t.Errorf("%s then All: Err = %v; want the first error, saying %q", c.name, err, c.want)
		}
		if err := v.Err(); err != nil {
			t.Errorf("%s: second Err = %v", c.name, err)
		}
	}

	w, err := Window(app, "win", serde.Serde[string](failing{}), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	for range w.Fetch("k", time.UnixMilli(0), time.UnixMilli(1)) {
		t.Error("Fetch yielded")
	}
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "serialize key") {
		t.Errorf("Fetch: Err = %v; want a serialize error", err)
	}
	if _, err := w.Lookup(t.Context(), "k", time.UnixMilli(0), time.UnixMilli(1)); err == nil || !strings.Contains(err.Error(), "serialize key") {
		t.Errorf("WindowView.Lookup = %v; want a serialize error", err)
	}
}

// Each copy a With method returns reports the errors of its own
// iterations: the original's Err does not see them, nor the copy's the
// original's.
func TestViewCopiesHaveTheirOwnErr(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	v := kvView(t, app)
	w := winView(t, app)
	add := func(*http.Request) error { return nil }
	for _, c := range []struct {
		name  string
		with  func(*View[string, string]) *View[string, string]
		wwith func(*WindowView[string, int64]) *WindowView[string, int64]
	}{
		{"WithClient", func(v *View[string, string]) *View[string, string] { return v.WithClient(&http.Client{}) },
			func(w *WindowView[string, int64]) *WindowView[string, int64] { return w.WithClient(&http.Client{}) }},
		{"WithHTTPS", func(v *View[string, string]) *View[string, string] { return v.WithHTTPS(&http.Client{}) },
			func(w *WindowView[string, int64]) *WindowView[string, int64] { return w.WithHTTPS(&http.Client{}) }},
		{"WithCredentials", func(v *View[string, string]) *View[string, string] { return v.WithCredentials(add) },
			func(w *WindowView[string, int64]) *WindowView[string, int64] { return w.WithCredentials(add) }},
		{"WithStandbyReads", func(v *View[string, string]) *View[string, string] { return v.WithStandbyReads(5) },
			func(w *WindowView[string, int64]) *WindowView[string, int64] { return w.WithStandbyReads(5) }},
	} {
		cp := c.with(v)
		for range cp.All() {
		}
		if err := v.Err(); err != nil {
			t.Errorf("%s: the original's Err reports the copy's iteration: %v", c.name, err)
		}
		notRunning(t, c.name+": the copy's Err", cp.Err(), "kv")
		for range v.All() {
		}
		if err := cp.Err(); err != nil {
			t.Errorf("%s: the copy's Err reports the original's iteration: %v", c.name, err)
		}
		notRunning(t, c.name+": the original's Err", v.Err(), "kv")

		wcp := c.wwith(w)
		for range wcp.Fetch("k", time.UnixMilli(0), time.UnixMilli(1)) {
		}
		if err := w.Err(); err != nil {
			t.Errorf("%s: the original window view's Err reports the copy's fetch: %v", c.name, err)
		}
		notRunning(t, c.name+": the window copy's Err", wcp.Err(), "win")
		for range w.Fetch("k", time.UnixMilli(0), time.UnixMilli(1)) {
		}
		if err := wcp.Err(); err != nil {
			t.Errorf("%s: the window copy's Err reports the original's fetch: %v", c.name, err)
		}
		notRunning(t, c.name+": the original window view's Err", w.Err(), "win")
	}
}

// Goroutines sharing a view report their iteration errors through the
// same Err (run with -race: the views are safe for concurrent use).
func TestViewSharedErrAcrossGoroutines(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	v := kvView(t, app)
	w := winView(t, app)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				for range v.All() {
				}
				for range w.Fetch("k", time.UnixMilli(0), time.UnixMilli(1)) {
				}
				_, _, _ = v.Get("k")
			}
		})
	}
	wg.Wait()
	notRunning(t, "Err after the goroutines", v.Err(), "kv")
	if err := v.Err(); err != nil {
		t.Errorf("second Err = %v", err)
	}
	notRunning(t, "WindowView.Err after the goroutines", w.Err(), "win")
}

// A With method returns a configured copy and leaves its view unchanged.
func TestViewWithLeavesTheOriginalUnchanged(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	v := kvView(t, app)
	orig := v.fw.client
	if v.fw.scheme != "http" || orig.Timeout != DefaultLookupTimeout || orig.CheckRedirect == nil || v.r.MaxStandbyLag() != -1 {
		t.Fatalf("a new view forwards with %+v (timeout %v), standby lag %d", v.fw, orig.Timeout, v.r.MaxStandbyLag())
	}
	unchanged := func(what string) {
		t.Helper()
		if v.fw.client != orig || v.fw.scheme != "http" || v.fw.credentials != nil || v.r.MaxStandbyLag() != -1 {
			t.Errorf("%s changed the view: %+v, standby lag %d", what, v.fw, v.r.MaxStandbyLag())
		}
	}

	c := &http.Client{Timeout: time.Minute}
	cp := v.WithClient(c)
	unchanged("WithClient")
	if cp == v || cp.fw.client == c || cp.fw.client.Timeout != time.Minute || cp.fw.scheme != "http" {
		t.Errorf("WithClient: the copy forwards with %+v", cp.fw)
	}
	if c.CheckRedirect != nil {
		t.Error("WithClient changed the client it was given")
	}
	if cp.fw.client.CheckRedirect == nil {
		t.Error("WithClient: the copy's client follows redirects")
	}

	https := v.WithHTTPS(c)
	unchanged("WithHTTPS")
	if https.fw.scheme != "https" || https.fw.client.Timeout != time.Minute || https.fw.client.CheckRedirect == nil {
		t.Errorf("WithHTTPS: the copy forwards with %+v", https.fw)
	}
	if back := https.WithClient(c); back.fw.scheme != "http" || https.fw.scheme != "https" {
		t.Errorf("WithClient of an HTTPS view: scheme %q, the HTTPS view's now %q", back.fw.scheme, https.fw.scheme)
	}

	called := 0
	creds := v.WithCredentials(func(*http.Request) error { called++; return nil })
	unchanged("WithCredentials")
	if creds.fw.credentials == nil || creds.fw.client != orig {
		t.Errorf("WithCredentials: the copy forwards with %+v", creds.fw)
	}
	// Configurations add up: a later With keeps what an earlier set.
	both := creds.WithClient(c).WithStandbyReads(3)
	if both.fw.credentials == nil || both.fw.client.Timeout != time.Minute || both.r.MaxStandbyLag() != 3 {
		t.Errorf("WithCredentials then WithClient then WithStandbyReads: %+v, standby lag %d", both.fw, both.r.MaxStandbyLag())
	}
	if creds.fw.client != orig || creds.r.MaxStandbyLag() != -1 {
		t.Error("a With of a copy changed that copy")
	}
	_ = both.fw.credentials(nil)
	if called != 1 {
		t.Errorf("the credentials hook of the chained copy ran %d times; want 1", called)
	}

	sb := v.WithStandbyReads(5)
	unchanged("WithStandbyReads")
	if sb.r == v.r || sb.r.MaxStandbyLag() != 5 || sb.r.Name() != "kv" {
		t.Errorf("WithStandbyReads(5): the copy reads with lag %d", sb.r.MaxStandbyLag())
	}
	if off := sb.WithStandbyReads(-3); off.r.MaxStandbyLag() != -1 || sb.r.MaxStandbyLag() != 5 {
		t.Errorf("WithStandbyReads(-3) of a copy with 5: lag %d, the copy's now %d", off.r.MaxStandbyLag(), sb.r.MaxStandbyLag())
	}

	w := winView(t, app)
	worig := w.fw.client
	wc := w.WithClient(c)
	wh := w.WithHTTPS(c)
	wcr := w.WithCredentials(func(*http.Request) error { return nil })
	ws := w.WithStandbyReads(7)
	if w.fw.client != worig || w.fw.scheme != "http" || w.fw.credentials != nil || w.r.MaxStandbyLag() != -1 {
		t.Errorf("the With methods changed the window view: %+v, standby lag %d", w.fw, w.r.MaxStandbyLag())
	}
	if wc.fw.client.Timeout != time.Minute || wc.fw.client.CheckRedirect == nil || wh.fw.scheme != "https" || wcr.fw.credentials == nil || ws.r.MaxStandbyLag() != 7 {
		t.Errorf("the window view's copies: %+v %+v %+v, standby lag %d", wc.fw, wh.fw, wcr.fw, ws.r.MaxStandbyLag())
	}
}

// own gives a reader with the same standby bound whose Err is its own.
func TestOwnReader(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	r, err := app.StoreReader("kv")
	if err != nil {
		t.Fatal(err)
	}
	r5 := r.WithStandbyReads(5)
	o := own(r5)
	if o == r5 || o.MaxStandbyLag() != 5 || o.Name() != "kv" {
		t.Fatalf("own(reader with lag 5) = %p with lag %d, name %s", o, o.MaxStandbyLag(), o.Name())
	}
	for range o.Scan(0, nil, nil) {
	}
	if err := r5.Err(); err != nil {
		t.Errorf("the reader's Err reports its own copy's scan: %v", err)
	}
	notRunning(t, "own copy's Err", o.Err(), "kv")
}

// scanPage on a reader that cannot read returns its error and nothing
// else.
func TestScanPageErrors(t *testing.T) {
	t.Parallel()
	app := newApp(t, weir.AllowAll, "")
	kv, err := app.StoreReader("kv")
	if err != nil {
		t.Fatal(err)
	}
	entries, more, err := scanPage(kv, 0, nil, nil)
	if entries != nil || more {
		t.Errorf("scanPage before Run = %v, more %v", entries, more)
	}
	notRunning(t, "scanPage", err, "kv")
	if err := kv.Err(); err != nil {
		t.Errorf("scanPage left an error on the reader it was given: %v", err)
	}
	win, err := app.StoreReader("win")
	if err != nil {
		t.Fatal(err)
	}
	var su *weir.StoreUnavailableError
	if entries, more, err := scanPage(win, 0, nil, nil); entries != nil || more || err == nil || errors.As(err, &su) {
		t.Errorf("scanPage of a window store = %v, %v, %v; want an error that is not unavailability", entries, more, err)
	}
}

func TestPrefixEnd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prefix, want []byte
	}{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{'a', 0xff, 0xff}, []byte("b")},
		{[]byte{0xfe}, []byte{0xff}},
		{[]byte{0xff}, nil},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{0x00}, []byte{0x01}},
		{[]byte{0x01, 0xff, 0x00}, []byte{0x01, 0xff, 0x01}},
	} {
		in := bytes.Clone(c.prefix)
		got := prefixEnd(in)
		if !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("prefixEnd(%x) = %x; want %x", c.prefix, got, c.want)
		}
		if !bytes.Equal(in, c.prefix) {
			t.Errorf("prefixEnd(%x) changed its argument to %x", c.prefix, in)
		}
		// Every key starting with the prefix sorts below the end.
		if got != nil {
			for _, k := range [][]byte{c.prefix, append(bytes.Clone(c.prefix), 0xff, 0xff)} {
				if bytes.Compare(k, got) >= 0 {
					t.Errorf("prefixEnd(%x) = %x is not above %x", c.prefix, got, k)
				}
			}
		}
	}
}
