package weir

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
)

// noRegistry is a serde.Registry that fails every call: the tests here
// never reach a registry.
type noRegistry struct{}

func (noRegistry) Register(context.Context, string, string) (schema.Registered, error) {
	return schema.Registered{}, errors.New("no registry")
}
func (noRegistry) SchemaByID(context.Context, int) (string, error) {
	return "", errors.New("no registry")
}

type count struct {
	N int64 `avro:"n"`
}

func avroCount(t *testing.T) *serde.AvroSerde[count] {
	t.Helper()
	s, err := serde.Avro[count](serde.AvroConfig{Registry: noRegistry{}, Schema: `{"type":"record","name":"Count","fields":[{"name":"n","type":"long"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// avroTopology has an Avro value store, an Avro-valued sink and a
// repartition with an Avro key, next to plain serdes.
func avroTopology(t *testing.T) *processor.Topology {
	t.Helper()
	counts := avroCount(t)
	tp := processor.NewTopology()
	in := tp.AddSource("in", "words", serde.String(), serde.String())
	p := tp.AddProcessor("count", processor.Func(func(processor.Context[string, count], processor.Record[string, string]) error { return nil }), in)
	tp.AddStore(processor.KeyValue("counts", serde.String(), counts), p)
	tp.AddStore(processor.KeyValue("plain", serde.String(), serde.Int64()), p)
	tp.AddSink("out", "counts-out", serde.String(), counts, p)
	back := tp.AddRepartition("by-count", counts, serde.String(), tp.AddProcessor("swap", processor.Func(func(processor.Context[count, string], processor.Record[string, string]) error { return nil }), in))
	tp.AddSink("back", "back-out", counts, serde.String(), back)
	return tp
}

// The start-time check finds every schema of a registry serde with its
// subject: a store's under the application id and the store, a sink's
// (also an internal one) under the topic's, and nothing for plain serdes.
// Without schemaUses the gate would check nothing.
func TestSchemaUsesListsStoresAndSinks(t *testing.T) {
	t.Parallel()
	g, err := graphOf(avroTopology(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range schemaUses("app", g) {
		got = append(got, u.where()+" "+u.part.String()+" "+u.subject+" "+u.serdeTopic)
	}
	want := []string{
		"store counts value app-counts-value counts",
		"sink topic counts-out value counts-out-value counts-out",
		"sink topic app-by-count-repartition key app-by-count-repartition-key app-by-count-repartition",
		"sink topic back-out key back-out-key back-out",
	}
	if !slices.Equal(got, want) {
		t.Errorf("schemaUses =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A topology with an Avro serde needs Config.Registry: New says so,
// naming where the serde is, before any broker or registry is involved.
func TestAvroNeedsRegistry(t *testing.T) {
	t.Parallel()
	cfg := Config{ApplicationID: "app", Brokers: []string{"localhost:9092"}}
	_, err := New(avroTopology(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "Config.Registry") || !strings.Contains(err.Error(), "store counts") || !strings.Contains(err.Error(), "app-counts-value") {
		t.Fatalf("New without a registry = %v, want an error naming Config.Registry, the store and the subject", err)
	}
	cfg.Registry = schema.Config{URL: "http://localhost:8081"}
	app, err := New(avroTopology(t), cfg)
	if err != nil {
		t.Fatalf("New with a registry: %v", err)
	}
	_ = app.Close()
	plain := processor.NewTopology()
	p := plain.AddProcessor("p", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }),
		plain.AddSource("in", "in", serde.String(), serde.String()))
	plain.AddStore(processor.KeyValue("s", serde.String(), serde.String()), p)
	app, err = New(plain, Config{ApplicationID: "plain", Brokers: []string{"localhost:9092"}})
	if err != nil {
		t.Fatalf("New of a topology without registry serdes, without a registry: %v", err)
	}
	_ = app.Close()
}

// Config.Registry is optional, and validated with the other fields when
// set.
func TestRegistryConfigValidated(t *testing.T) {
	t.Parallel()
	base := Config{ApplicationID: "a", Brokers: []string{"h:1"}}
	for _, tc := range []struct {
		reg  schema.Config
		want string // in the error; "" for none
	}{
		{schema.Config{}, ""},
		{schema.Config{URL: "https://registry:8081"}, ""},
		{schema.Config{Username: "u"}, "Config.URL is required"},
		{schema.Config{URL: "registry:8081"}, "not an http or https URL"},
		{schema.Config{URL: "http://r:1", Password: "p"}, "Config.Password"},
		{schema.Config{URL: "http://r:1", CacheSize: -1}, "Config.CacheSize"},
	} {
		c := base
		c.Registry = tc.reg
		c.Threads = -1 // every problem is reported at once
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config.Threads") {
			t.Errorf("%+v: Validate = %v, want the Threads problem too", tc.reg, err)
			continue
		}
		has := strings.Contains(err.Error(), "weir: Config.Registry: ")
		switch {
		case tc.want == "" && has:
			t.Errorf("%+v: Validate = %v, want no Registry problem", tc.reg, err)
		case tc.want != "" && (!has || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: Validate = %v, want Config.Registry: ...%s", tc.reg, err, tc.want)
		}
	}
	if strings.Contains((&Config{Registry: schema.Config{URL: "http://r:1", Password: "secret"}}).Validate().Error(), "secret") {
		t.Error("Validate quotes the registry password")
	}
}

// A SchemaError names the store or topic, the part, the subject and the
// reason, and unwraps to its cause.
func TestSchemaError(t *testing.T) {
	t.Parallel()
	inc := &schema.IncompatibleError{Subject: "app-counts-value", Reason: "field n is new and has no default"}
	err := error(&SchemaError{Store: "counts", Part: schema.Value, Subject: inc.Subject, Reason: inc.Reason, Err: inc})
	if want := "weir: store counts: value schema refused by subject app-counts-value: field n is new and has no default"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	var got *schema.IncompatibleError
	if !errors.As(err, &got) || got != inc {
		t.Errorf("errors.As(*schema.IncompatibleError) = %v", got)
	}
	key := error(&SchemaError{Topic: "out", Part: schema.Key, Subject: "out-key", Reason: "changed", Err: ErrKeySchemaChanged})
	if want := "weir: sink topic out: key schema refused by subject out-key: changed"; key.Error() != want {
		t.Errorf("Error() = %q, want %q", key, want)
	}
	if !errors.Is(key, ErrKeySchemaChanged) || errors.Is(err, ErrKeySchemaChanged) {
		t.Error("errors.Is(ErrKeySchemaChanged) is wrong")
	}
}

// Two schemas are the same key encoding when their canonical forms agree,
// whatever their docs and defaults.
func TestSameEncoding(t *testing.T) {
	t.Parallel()
	a := `{"type":"record","name":"K","fields":[{"name":"id","type":"string"}]}`
	doc := `{"type":"record","name":"K","doc":"the key","fields":[{"name":"id","type":"string","doc":"x"}]}`
	long := `{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}`
	if same, err := sameEncoding(a, doc); err != nil || !same {
		t.Errorf("sameEncoding(a, a with docs) = %v, %v; want true", same, err)
	}
	if same, err := sameEncoding(a, long); err != nil || same {
		t.Errorf("sameEncoding(string id, long id) = %v, %v; want false", same, err)
	}
	if _, err := sameEncoding("{", a); err == nil {
		t.Error("sameEncoding of a registered schema that does not parse: no error")
	}
}

// The schema check comes before anything else Run does: with a registry
// that cannot be reached, Run fails with the registry's error, naming the
// store, without opening the state directory or contacting a broker
// (there is none at the configured address).
func TestRunChecksSchemasFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	app, err := New(avroTopology(t), Config{ApplicationID: "app", Brokers: []string{"127.0.0.1:1"}, StateDir: dir,
		Registry: schema.Config{URL: "http://127.0.0.1:1", RetryTimeout: -1}})
	if err != nil {
		t.Fatal(err)
	}
	err = app.Run(context.Background())
	var unreachable *schema.UnreachableError
	if !errors.As(err, &unreachable) || !strings.Contains(err.Error(), "store counts") {
		t.Fatalf("Run = %v, want the registry's UnreachableError naming the store", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("Run touched the state directory before the schema check: %v, %v", entries, err)
	}
	if s, _ := app.State(); s != StateFailed {
		t.Errorf("State = %v, want failed", s)
	}
}
