package schema

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/riferrei/srclient"

	"github.com/weirstream/weir/internal/lru"
)

// Compatibility is a subject's compatibility level, as the registry names it.
type Compatibility string

// Compatibility levels.
const (
	None               Compatibility = "NONE"
	Backward           Compatibility = "BACKWARD"
	BackwardTransitive Compatibility = "BACKWARD_TRANSITIVE"
	Forward            Compatibility = "FORWARD"
	ForwardTransitive  Compatibility = "FORWARD_TRANSITIVE"
	Full               Compatibility = "FULL"
	FullTransitive     Compatibility = "FULL_TRANSITIVE"
)

// Registered is a schema as registered under a subject.
type Registered struct {
	ID      int    // the schema's global id, the one in the wire format
	Version int    // the version under the subject
	Schema  string // the schema's text as the registry returns it
}

// Client talks to one schema registry. All schemas it registers or checks
// are Avro. It is safe for concurrent use; it holds no connections of its
// own beyond Go's HTTP connection pool, so it needs no Close.
type Client struct {
	cfg      Config
	url      string // cfg.URL without a trailing slash
	redacted string // for errors
	base     http.RoundTripper
	byID     *lru.Cache[int, string]
	// bySchema holds what Register and Lookup found: ids are immutable, so
	// a schema registered under a subject keeps its id.
	bySchema *lru.Cache[subjectSchema, Registered]
}

type subjectSchema struct{ subject, schema string }

// New returns a client for the registry cfg describes, after validating
// cfg. It makes no request.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	u, _ := url.Parse(cfg.URL) // validated
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	base := cfg.URL
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	return &Client{cfg: cfg, url: base, redacted: u.Redacted(), base: tr, byID: lru.New[int, string](cfg.CacheSize),
		bySchema: lru.New[subjectSchema, Registered](cfg.CacheSize)}, nil
}

// Register registers the Avro schema under subject and returns it as
// registered; a schema already registered there is found, not registered
// twice (the registry's own rule). What it returns is cached (bounded by
// [Config.CacheSize]): registering the same schema under the same subject
// again asks the registry only once per Client. A schema the subject's compatibility
// level refuses is an [*IncompatibleError] with the registry's reason.
func (c *Client) Register(ctx context.Context, subject, schema string) (Registered, error) {
	if r, ok := c.bySchema.Get(subjectSchema{subject, schema}); ok {
		return r, nil
	}
	var s *srclient.Schema
	err := c.call(ctx, "register", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		if _, err := sc.CreateSchema(subject, schema, srclient.Avro); err != nil {
			return err
		}
		// The registry answers a registration with the id only (srclient
		// then fetches the schema by id, which has no version): look the
		// schema up under the subject for its version.
		s, err = sc.LookupSchema(subject, schema, srclient.Avro)
		return err
	})
	var inc *IncompatibleError
	if errors.As(err, &inc) {
		// Another client (an instance of the same application starting
		// at the same moment) may have registered it just before, and a
		// registry may answer the second registration with a conflict:
		// what counts is that the subject holds the schema now.
		if r, lerr := c.Lookup(ctx, subject, schema); lerr == nil {
			return r, nil
		}
	}
	if err != nil {
		return Registered{}, err
	}
	return c.remember(subject, schema, s), nil
}

// remember caches what the registry said of schema under subject.
func (c *Client) remember(subject, schema string, s *srclient.Schema) Registered {
	r := Registered{ID: s.ID(), Version: s.Version(), Schema: s.Schema()}
	c.byID.Add(r.ID, r.Schema)
	c.bySchema.Add(subjectSchema{subject, schema}, r)
	return r
}

// Lookup finds the Avro schema under subject without registering it; a
// schema that is not registered there matches [ErrNotFound]. Found schemas
// are cached as [Client.Register]'s are.
func (c *Client) Lookup(ctx context.Context, subject, schema string) (Registered, error) {
	if r, ok := c.bySchema.Get(subjectSchema{subject, schema}); ok {
		return r, nil
	}
	var s *srclient.Schema
	err := c.call(ctx, "look up", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		s, err = sc.LookupSchema(subject, schema, srclient.Avro)
		return err
	})
	if err != nil {
		return Registered{}, err
	}
	return c.remember(subject, schema, s), nil
}

// Latest returns the latest version registered under subject; a subject
// without versions matches [ErrNotFound].
func (c *Client) Latest(ctx context.Context, subject string) (Registered, error) {
	var s *srclient.Schema
	err := c.call(ctx, "get latest", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		s, err = sc.GetLatestSchema(subject)
		return err
	})
	if err != nil {
		return Registered{}, err
	}
	c.byID.Add(s.ID(), s.Schema())
	return Registered{ID: s.ID(), Version: s.Version(), Schema: s.Schema()}, nil
}

// Versions returns the versions registered under subject, oldest first; a
// subject without versions matches [ErrNotFound].
func (c *Client) Versions(ctx context.Context, subject string) ([]int, error) {
	var v []int
	err := c.call(ctx, "list versions", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		v, err = sc.GetSchemaVersions(subject)
		return err
	})
	return v, err
}

// Version returns the given version of subject; a subject or version the
// registry does not know matches [ErrNotFound].
func (c *Client) Version(ctx context.Context, subject string, version int) (Registered, error) {
	var s *srclient.Schema
	err := c.call(ctx, fmt.Sprintf("get version %d of", version), subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		s, err = sc.GetSchemaByVersion(subject, version)
		return err
	})
	if err != nil {
		return Registered{}, err
	}
	c.byID.Add(s.ID(), s.Schema())
	return Registered{ID: s.ID(), Version: s.Version(), Schema: s.Schema()}, nil
}

// SchemaByID returns the text of the schema with the given global id, from
// the cache when it holds it; an id the registry does not know matches
// [ErrNotFound]. Ids are immutable in a registry, so a cached schema is
// never stale.
func (c *Client) SchemaByID(ctx context.Context, id int) (string, error) {
	if s, ok := c.byID.Get(id); ok {
		return s, nil
	}
	var s *srclient.Schema
	err := c.call(ctx, "get schema by", "", id, func(sc *srclient.SchemaRegistryClient) (err error) {
		s, err = sc.GetSchema(id)
		return err
	})
	if err != nil {
		return "", err
	}
	c.byID.Add(id, s.Schema())
	return s.Schema(), nil
}

// SetCompatibility sets the compatibility level of subject (Confluent's
// PUT /config/{subject}); the subject need not have versions yet.
//
// A refusal while the subject already has level is success: another
// client (an instance of the same application starting at the same
// moment) set it just before, and Apicurio Registry answers a second
// setting with 409 "A rule named 'COMPATIBILITY' already exists".
func (c *Client) SetCompatibility(ctx context.Context, subject string, level Compatibility) error {
	err := c.call(ctx, "set compatibility of", subject, 0, func(sc *srclient.SchemaRegistryClient) error {
		_, err := sc.ChangeSubjectCompatibilityLevel(subject, srclient.CompatibilityLevel(level))
		return err
	})
	if err == nil {
		return nil
	}
	var inc *IncompatibleError
	var re *RegistryError
	if errors.As(err, &inc) || errors.As(err, &re) {
		if now, cerr := c.subjectCompatibility(ctx, subject); cerr == nil && now == level {
			return nil
		}
	}
	return err
}

// subjectCompatibility returns subject's own compatibility level, not the
// global one.
func (c *Client) subjectCompatibility(ctx context.Context, subject string) (Compatibility, error) {
	var level *srclient.CompatibilityLevel
	err := c.call(ctx, "get compatibility of", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		level, err = sc.GetCompatibilityLevel(subject, false)
		return err
	})
	if err != nil {
		return "", err
	}
	return Compatibility(*level), nil
}

// Compatibility returns the compatibility level that applies to subject:
// its own, or the registry's global level when it has none.
func (c *Client) Compatibility(ctx context.Context, subject string) (Compatibility, error) {
	var level *srclient.CompatibilityLevel
	err := c.call(ctx, "get compatibility of", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		level, err = sc.GetCompatibilityLevel(subject, true)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		// Registries without defaultToGlobal answer 404 for a subject
		// without a level of its own.
		err = c.call(ctx, "get global compatibility", "", 0, func(sc *srclient.SchemaRegistryClient) (err error) {
			level, err = sc.GetGlobalCompatibilityLevel()
			return err
		})
	}
	if err != nil {
		return "", err
	}
	return Compatibility(*level), nil
}

// Check asks the registry whether schema could be registered under subject
// now, without registering it: nil if it could (a subject without versions
// accepts any schema), an [*IncompatibleError] if not. It checks against
// the versions the subject's compatibility level covers: the latest, or
// every version under a _TRANSITIVE level (a registry's check endpoint
// compares with one version only). Registries answer a check with a bare
// yes or no, so the reason is weir's own Avro compatibility check of schema
// (as reader) against the refusing version (as writer), or, when that
// passes (a FORWARD level), the version and the level.
func (c *Client) Check(ctx context.Context, subject, schema string) error {
	level, err := c.Compatibility(ctx, subject)
	if err != nil {
		return err
	}
	if level == None {
		return nil
	}
	against := []string{"latest"}
	if strings.HasSuffix(string(level), "_TRANSITIVE") {
		versions, err := c.Versions(ctx, subject)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		against = against[:0]
		for _, v := range slices.Backward(versions) {
			against = append(against, strconv.Itoa(v))
		}
	}
	for _, version := range against {
		var ok bool
		err := c.call(ctx, "check compatibility with", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
			ok, err = sc.IsSchemaCompatible(url.PathEscape(subject), schema, version, srclient.Avro)
			return err
		})
		switch {
		case errors.Is(err, ErrNotFound):
			continue // no versions yet, or one deleted since it was listed
		case err != nil:
			return err
		case !ok:
			return &IncompatibleError{Subject: subject, Reason: c.explain(ctx, subject, schema, version, level)}
		}
	}
	return nil
}

// explain says why schema may not follow the version of subject.
// CheckAt is [Client.Check] at level instead of the level subject has, so
// that a caller can check a schema before it sets the level (weir checks a
// store's value schema at BACKWARD_TRANSITIVE, and sets that level only
// when it registers): it changes nothing in the registry. An empty level
// is the subject's own, as Check. Where the subject's level differs, the
// check is weir's own Avro check of schema as the reader of each version
// the level covers (the registry checks at a subject's level only), so
// level must be BACKWARD or BACKWARD_TRANSITIVE.
func (c *Client) CheckAt(ctx context.Context, subject, schema string, level Compatibility) error {
	if level == "" {
		return c.Check(ctx, subject, schema)
	}
	if level != Backward && level != BackwardTransitive {
		return fmt.Errorf("schema: CheckAt %s: level %s: only BACKWARD and BACKWARD_TRANSITIVE can be checked before they are set", subject, level)
	}
	own, err := c.Compatibility(ctx, subject)
	if err != nil {
		return err
	}
	if own == level {
		return c.Check(ctx, subject, schema)
	}
	versions, err := c.Versions(ctx, subject)
	if errors.Is(err, ErrNotFound) {
		return nil // a first schema
	}
	if err != nil {
		return err
	}
	if level == Backward {
		versions = versions[len(versions)-1:]
	}
	reader, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		return &IncompatibleError{Subject: subject, Reason: "not a valid Avro schema: " + err.Error()}
	}
	for _, v := range slices.Backward(versions) {
		r, err := c.Version(ctx, subject, v)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return err
		}
		writer, err := avro.ParseWithCache(r.Schema, "", &avro.SchemaCache{})
		if err != nil {
			return fmt.Errorf("schema: version %d of %s does not parse: %w", v, subject, err)
		}
		if err := avro.NewSchemaCompatibility().Compatible(reader, writer); err != nil {
			return &IncompatibleError{Subject: subject, Reason: fmt.Sprintf("cannot read data written with version %d (id %d) under compatibility level %s: %s",
				r.Version, r.ID, level, incompatibility(reader, writer, err))}
		}
	}
	return nil
}

func (c *Client) explain(ctx context.Context, subject, schema, version string, level Compatibility) string {
	var s *srclient.Schema
	err := c.call(ctx, "get version", subject, 0, func(sc *srclient.SchemaRegistryClient) (err error) {
		if version == "latest" {
			s, err = sc.GetLatestSchema(subject)
			return err
		}
		n, _ := strconv.Atoi(version)
		s, err = sc.GetSchemaByVersion(subject, n)
		return err
	})
	if err != nil {
		return fmt.Sprintf("the registry refused it under compatibility level %s (no reason given)", level)
	}
	reader, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		return "not a valid Avro schema"
	}
	writer, err := avro.ParseWithCache(s.Schema(), "", &avro.SchemaCache{})
	if err == nil {
		if err := avro.NewSchemaCompatibility().Compatible(reader, writer); err != nil {
			return fmt.Sprintf("cannot read data written with version %d (id %d) under compatibility level %s: %s",
				s.Version(), s.ID(), level, incompatibility(reader, writer, err))
		}
	}
	return fmt.Sprintf("the registry refused it against version %d (id %d) under compatibility level %s", s.Version(), s.ID(), level)
}

// incompatibility names the first top-level field of record schemas that
// makes reader unable to read writer's data; hamba's error alone names only
// the types. err is hamba's error for the whole schemas.
func incompatibility(reader, writer avro.Schema, err error) string {
	rr, ok1 := reader.(*avro.RecordSchema)
	wr, ok2 := writer.(*avro.RecordSchema)
	if !ok1 || !ok2 {
		return err.Error()
	}
	written := map[string]*avro.Field{}
	for _, f := range wr.Fields() {
		written[f.Name()] = f
	}
	for _, f := range rr.Fields() {
		w, ok := written[f.Name()]
		for _, alias := range f.Aliases() {
			if !ok {
				w, ok = written[alias]
			}
		}
		switch {
		case !ok && !f.HasDefault():
			return fmt.Sprintf("field %s is new and has no default", f.Name())
		case ok:
			if ferr := avro.NewSchemaCompatibility().Compatible(f.Type(), w.Type()); ferr != nil {
				return fmt.Sprintf("field %s: %v", f.Name(), ferr)
			}
		}
	}
	return err.Error()
}

// call runs fn against a fresh srclient bound to ctx, retrying while the
// registry is unreachable. srclient takes no context and caches without a
// bound, so each attempt gets its own srclient (a few small maps) with
// caching off and an HTTP client whose transport puts ctx on every request:
// cancelling ctx aborts the request in flight instead of leaving it to its
// timeout.
func (c *Client) call(ctx context.Context, op, subject string, id int, fn func(*srclient.SchemaRegistryClient) error) error {
	start := time.Now()
	deadline := start.Add(c.cfg.RetryTimeout)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tr := &ctxTransport{ctx: ctx, base: c.base}
		sc := srclient.NewSchemaRegistryClient(c.url, srclient.WithClient(&http.Client{Transport: tr, Timeout: c.cfg.RequestTimeout}))
		sc.CachingEnabled(false)
		if c.cfg.Username != "" {
			sc.SetCredentials(c.cfg.Username, c.cfg.Password)
		}
		err := fn(sc)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("schema: %s: %w (last error: %w)", opName(op, subject, id), ctx.Err(), err)
		}
		var regErr srclient.Error
		isReg := errors.As(err, &regErr)
		switch {
		case tr.status == http.StatusConflict && subject != "":
			msg := err.Error()
			if isReg {
				msg = regErr.Message
			}
			return &IncompatibleError{Subject: subject, Reason: msg}
		case tr.status != 0 && tr.status < 500 && tr.status != http.StatusTooManyRequests:
			// An answer: not worth retrying (a 2xx here is a body srclient
			// could not decode).
			e := &RegistryError{Op: op, Subject: subject, ID: id, Status: tr.status, Err: err}
			if isReg {
				e.Code, e.Message = regErr.Code, regErr.Message
			}
			return e
		}
		// No answer, 5xx or 429: retry while time is left.
		wait := min(backoff, time.Until(deadline))
		if c.cfg.RetryTimeout < 0 || wait <= 0 {
			return &UnreachableError{URL: c.redacted, Op: opName(op, subject, id), Attempts: attempt, Elapsed: time.Since(start), Err: err}
		}
		wait = wait/2 + rand.N(wait/2+1) // jitter, so instances do not retry in step
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("schema: %s: %w (last error: %w)", opName(op, subject, id), ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func opName(op, subject string, id int) string {
	switch {
	case subject != "":
		return op + " subject " + subject
	case id != 0:
		return op + " id " + strconv.Itoa(id)
	}
	return op
}

// ctxTransport sends every request with ctx and remembers the last status.
// It belongs to one attempt of one call, so it is used by one goroutine.
type ctxTransport struct {
	ctx    context.Context
	base   http.RoundTripper
	status int
}

func (t *ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.status = 0
	resp, err := t.base.RoundTrip(req.WithContext(t.ctx))
	if err == nil {
		t.status = resp.StatusCode
	}
	return resp, err
}
