package schema

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{
		TopicSubject("logins", Value):          "logins-value",
		TopicSubject("logins", Key):            "logins-key",
		StoreSubject("fraud", "counts", Value): "fraud-counts-value",
		StoreSubject("fraud", "counts", Key):   "fraud-counts-key",
		TopicSubject("a.b_c", Part(0)):         "a.b_c-value",
	} {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	err := Config{URL: "ftp://x", Password: "p", RequestTimeout: -1, CacheSize: -1}.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"Config.URL", "Config.Password", "Config.RequestTimeout", "Config.CacheSize"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.URL is required") {
		t.Errorf("empty config: %v", err)
	}
	if err := (Config{URL: "https://registry:8081/apis/ccompat/v7"}).Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted an invalid config")
	}
}

// Registry credentials never travel in the clear or in the URL unless the
// user says the connection cannot be overheard, and a refused URL is
// quoted without its credentials.
func TestConfigRefusesCredentialsInTheClear(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{URL: "http://registry:8080", Username: "u", Password: "secret-pw"}, "in the clear"},
		{Config{URL: "http://registry:8080", Username: "u", Password: "secret-pw", AllowBasicAuthOverHTTP: true}, ""},
		{Config{URL: "https://registry:8080", Username: "u", Password: "secret-pw"}, ""},
		{Config{URL: "https://u:secret-pw@registry:8080"}, "carries credentials"},
		{Config{URL: "ftp://u:secret-pw@registry:8080"}, "not an http"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v refused: %v", c.cfg.URL, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s with user %q: %v, want an error about %q", c.cfg.URL, c.cfg.Username, err, c.want)
		case err != nil && strings.Contains(err.Error(), "secret-pw"):
			t.Errorf("the error quotes the password: %v", err)
		}
	}
}

// fakeServer answers the few Confluent API calls the tests use.
type fakeServer struct {
	t        *testing.T
	requests atomic.Int32
	fail     atomic.Int32 // answer 503 to this many requests first
	mu       sync.Mutex
	auth     []string // Authorization headers seen
	checked  []string // versions checked for compatibility, in order
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if f.fail.Add(-1) >= 0 {
		http.Error(w, "busy", http.StatusServiceUnavailable) // not JSON, as a proxy would answer
		return
	}
	answer := func(status int, v any) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/schemas/ids/7":
		answer(200, map[string]any{"schema": `"string"`})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/schemas/ids/"):
		answer(404, map[string]any{"error_code": 40403, "message": "Schema not found"})
	case r.Method == http.MethodPost && r.URL.Path == "/subjects/ok-value/versions":
		answer(200, map[string]any{"id": 7})
	case r.Method == http.MethodPost && r.URL.Path == "/subjects/ok-value":
		answer(200, map[string]any{"subject": "ok-value", "id": 7, "version": 3, "schema": `"string"`})
	case r.Method == http.MethodPost && r.URL.Path == "/subjects/refusing-value/versions":
		answer(409, map[string]any{"error_code": 409, "message": "Incompatible schema: field x changed type"})
	case r.Method == http.MethodPut && (r.URL.Path == "/config/raced-value" || r.URL.Path == "/config/other-level-value"):
		// Apicurio's answer to a second setting of a subject's level.
		answer(409, map[string]any{"error_code": 409, "message": "A rule named 'COMPATIBILITY' already exists."})
	case r.Method == http.MethodGet && r.URL.Path == "/config/raced-value":
		answer(200, map[string]any{"compatibilityLevel": "BACKWARD_TRANSITIVE"})
	case r.Method == http.MethodGet && r.URL.Path == "/config/other-level-value":
		answer(200, map[string]any{"compatibilityLevel": "NONE"})
	case r.Method == http.MethodPost && r.URL.Path == "/subjects/raced-value/versions":
		answer(409, map[string]any{"error_code": 409, "message": "Artifact version already exists"})
	case r.Method == http.MethodPost && r.URL.Path == "/subjects/raced-value":
		answer(200, map[string]any{"subject": "raced-value", "id": 9, "version": 1, "schema": `"string"`})
	case r.Method == http.MethodPut && r.URL.Path == "/config/ok-value":
		var body map[string]string
		_ = json.NewDecoder(r.Body).Decode(&body)
		answer(200, body)
	case r.Method == http.MethodGet && r.URL.Path == "/config/evolving-value":
		answer(200, map[string]any{"compatibilityLevel": "BACKWARD_TRANSITIVE"})
	case r.Method == http.MethodGet && r.URL.Path == "/config/free-value":
		answer(200, map[string]any{"compatibilityLevel": "NONE"})
	case r.Method == http.MethodGet && r.URL.Path == "/config/new-value":
		answer(404, map[string]any{"error_code": 40401, "message": "Subject not found"})
	case r.Method == http.MethodGet && r.URL.Path == "/config":
		answer(200, map[string]any{"compatibilityLevel": "BACKWARD"})
	case r.Method == http.MethodGet && r.URL.Path == "/subjects/evolving-value/versions":
		answer(200, []int{1, 2})
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/compatibility/subjects/evolving-value/versions/"):
		f.mu.Lock()
		f.checked = append(f.checked, strings.TrimPrefix(r.URL.Path, "/compatibility/subjects/evolving-value/versions/"))
		f.mu.Unlock()
		// Version 2 has the field with a default, version 1 lacks it.
		answer(200, map[string]any{"is_compatible": strings.HasSuffix(r.URL.Path, "/2")})
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/compatibility/subjects/new-value/versions/"):
		answer(404, map[string]any{"error_code": 40401, "message": "Subject not found"})
	case r.Method == http.MethodGet && r.URL.Path == "/subjects/evolving-value/versions/1":
		answer(200, map[string]any{"id": 11, "version": 1, "schema": `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`})
	default:
		answer(500, map[string]any{"error_code": 50001, "message": "unexpected " + r.Method + " " + r.URL.Path})
	}
}

func newFake(t *testing.T) (*fakeServer, *httptest.Server) {
	f := &fakeServer{t: t}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func TestRegisterAndCache(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t)
	c, err := New(Config{URL: srv.URL + "/", Username: "u", Password: "secret-pw", AllowBasicAuthOverHTTP: true, CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := c.Register(ctx, "ok-value", `"string"`)
	if err != nil || r.ID != 7 || r.Version != 3 || r.Schema != `"string"` {
		t.Fatalf("Register = %+v, %v; want id 7, version 3", r, err)
	}
	before := f.requests.Load()
	if s, err := c.SchemaByID(ctx, 7); err != nil || s != `"string"` {
		t.Fatalf("SchemaByID(7) = %q, %v", s, err)
	}
	if n := f.requests.Load() - before; n != 0 {
		t.Errorf("SchemaByID of a registered id made %d requests, want 0 (cached)", n)
	}
	// id 8 is unknown: ErrNotFound, and a 404 is not retried.
	before = f.requests.Load()
	_, err = c.SchemaByID(ctx, 8)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: %v, want ErrNotFound", err)
	}
	var re *RegistryError
	if !errors.As(err, &re) || re.Status != 404 || re.Code != 40403 || re.ID != 8 {
		t.Errorf("unknown id: %#v, want a RegistryError 404/40403 for id 8", re)
	}
	if n := f.requests.Load() - before; n != 1 {
		t.Errorf("a 404 was sent %d times, want once", n)
	}
	f.mu.Lock()
	for _, a := range f.auth {
		if !strings.HasPrefix(a, "Basic ") {
			t.Errorf("request without basic auth: %q", a)
		}
	}
	f.mu.Unlock()
	if strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	before = f.requests.Load()
	if again, err := c.Register(ctx, "ok-value", `"string"`); err != nil || again != r {
		t.Errorf("second Register = %+v, %v; want %+v", again, err, r)
	}
	if n := f.requests.Load() - before; n != 0 {
		t.Errorf("registering the same schema again made %d requests, want 0 (cached)", n)
	}
	if err := c.SetCompatibility(ctx, "ok-value", BackwardTransitive); err != nil {
		t.Errorf("SetCompatibility: %v", err)
	}
}

func TestCacheIsBounded(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t)
	c, err := New(Config{URL: srv.URL, CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Register(ctx, "ok-value", `"string"`); err != nil { // caches id 7
		t.Fatal(err)
	}
	c.byID.Add(9, `"int"`) // evicts 7: the cache holds one schema
	before := f.requests.Load()
	if _, err := c.SchemaByID(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if n := f.requests.Load() - before; n != 1 {
		t.Errorf("an evicted id made %d requests, want 1", n)
	}
	if c.byID.Len() != 1 {
		t.Errorf("cache holds %d schemas, bound 1", c.byID.Len())
	}
}

func TestRefusedSchemaGivesTheRegistrysReason(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t)
	c, _ := New(Config{URL: srv.URL})
	_, err := c.Register(context.Background(), "refusing-value", `"string"`)
	var inc *IncompatibleError
	if !errors.As(err, &inc) || inc.Subject != "refusing-value" || !strings.Contains(inc.Reason, "field x changed type") {
		t.Errorf("got %v, want an IncompatibleError with the registry's reason", err)
	}
}

func TestRetriesWhileUnavailable(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t)
	f.fail.Store(3)
	c, _ := New(Config{URL: srv.URL, RetryTimeout: 10 * time.Second})
	s, err := c.SchemaByID(context.Background(), 7)
	if err != nil || s != `"string"` {
		t.Fatalf("after 3 unavailable answers: %q, %v", s, err)
	}
	if n := f.requests.Load(); n != 4 {
		t.Errorf("%d requests, want 4 (3 refused, then the answer)", n)
	}
}

func TestUnreachableRegistryFailsWithinRetryTimeout(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the listener is closed before use.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ := New(Config{URL: "http://" + addr, RetryTimeout: 700 * time.Millisecond})
	start := time.Now()
	_, err = c.SchemaByID(context.Background(), 1)
	elapsed := time.Since(start)
	var un *UnreachableError
	if !errors.As(err, &un) {
		t.Fatalf("got %v, want an UnreachableError", err)
	}
	if un.Attempts < 2 || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("error %v: want several attempts and the registry's address", err)
	}
	if elapsed < 600*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("gave up after %v, want about the 700ms RetryTimeout", elapsed)
	}

	// The caller's context ends it sooner.
	c, _ = New(Config{URL: "http://" + addr, RetryTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Register(ctx, "s-value", `"string"`)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled call: %v after %v, want DeadlineExceeded soon", err, time.Since(start))
	}
}

func TestContextCancelsRequestInFlight(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	c, _ := New(Config{URL: srv.URL, RequestTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.SchemaByID(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("got %v after %v, want DeadlineExceeded at about 200ms", err, time.Since(start))
	}
}

func TestIncompatibilityNamesTheField(t *testing.T) {
	t.Parallel()
	parse := func(s string) avro.Schema {
		sch, err := avro.ParseWithCache(s, "", &avro.SchemaCache{})
		if err != nil {
			t.Fatal(err)
		}
		return sch
	}
	const (
		v1 = `{"type":"record","name":"U","fields":[{"name":"name","type":"string"},{"name":"age","type":"long"}]}`
		// name changes type; age stays.
		typeChanged = `{"type":"record","name":"U","fields":[{"name":"name","type":"int"},{"name":"age","type":"long"}]}`
		noDefault   = `{"type":"record","name":"U","fields":[{"name":"name","type":"string"},{"name":"age","type":"long"},{"name":"country","type":"string"}]}`
	)
	for schemaText, want := range map[string]string{typeChanged: "field name:", noDefault: "field country is new and has no default"} {
		r, w := parse(schemaText), parse(v1)
		err := avro.NewSchemaCompatibility().Compatible(r, w)
		if err == nil {
			t.Fatalf("%s reads v1", schemaText)
		}
		if got := incompatibility(r, w, err); !strings.Contains(got, want) {
			t.Errorf("incompatibility = %q, want it to contain %q", got, want)
		}
	}
}

// Check compares with every version under a transitive level (the
// registry's check endpoint compares with one), newest first, and explains
// a refusal with the refusing version and field.
func TestCheckCoversTheLevelsVersions(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t)
	c, _ := New(Config{URL: srv.URL})
	ctx := context.Background()
	const next = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"b","type":"string"}]}`
	err := c.Check(ctx, "evolving-value", next)
	var inc *IncompatibleError
	if !errors.As(err, &inc) || inc.Subject != "evolving-value" {
		t.Fatalf("got %v, want an IncompatibleError", err)
	}
	for _, want := range []string{"version 1 (id 11)", "BACKWARD_TRANSITIVE", "field b is new and has no default"} {
		if !strings.Contains(inc.Reason, want) {
			t.Errorf("reason %q does not say %q", inc.Reason, want)
		}
	}
	f.mu.Lock()
	if !slices.Equal(f.checked, []string{"2", "1"}) {
		t.Errorf("checked versions %v, want [2 1]", f.checked)
	}
	f.mu.Unlock()
	if err := c.Check(ctx, "free-value", next); err != nil {
		t.Errorf("level NONE: %v, want nil", err)
	}
	// A subject without a level of its own nor versions takes anything.
	if err := c.Check(ctx, "new-value", next); err != nil {
		t.Errorf("new subject: %v, want nil", err)
	}
	if level, err := c.Compatibility(ctx, "new-value"); err != nil || level != Backward {
		t.Errorf("level of a subject without its own = %q, %v; want the global BACKWARD", level, err)
	}
}

// Several instances of one application starting together race to set a
// store subject's level and register its schema: a refusal because
// another one just did the same is success, and anything else is not.
func TestConcurrentFirstStartsAgree(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t)
	c, err := New(Config{URL: srv.URL, RetryTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.SetCompatibility(ctx, "raced-value", BackwardTransitive); err != nil {
		t.Errorf("setting the level another instance just set: %v", err)
	}
	if err := c.SetCompatibility(ctx, "other-level-value", BackwardTransitive); err == nil {
		t.Error("a refused setting was taken for success though the subject has another level")
	}
	if r, err := c.Register(ctx, "raced-value", `"string"`); err != nil || r.ID != 9 {
		t.Errorf("registering a schema another instance just registered = %+v, %v; want id 9", r, err)
	}
	var inc *IncompatibleError
	if _, err := c.Register(ctx, "refusing-value", `"string"`); !errors.As(err, &inc) {
		t.Errorf("a refused schema = %v, want an IncompatibleError", err)
	}
}
