package integration

// The start-time schema check of an App (DESIGN §7, issue 10 item 3)
// against the real broker and registry: Avro state evolves across
// versions of an application, and a schema the registry refuses stops Run
// before anything is touched.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// profiles is the Avro store of these tests. Its name is theirs alone:
// the tests check that no store serde registers under the store name's
// TopicNameStrategy subject, "profiles-value".
const profiles = "profiles"

// usersProc keeps the latest age per user name in the Avro value store
// profiles and forwards a line saying what it found there before the
// update.
type usersProc[V any] struct {
	spec   *processor.KeyValueSpec[string, V]
	store  processor.KeyValueStore[string, V]
	update func(name string, age int64, prev V, found bool) (next V, line string)
}

func (p *usersProc[V]) Init(ctx processor.Context[string, string]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *usersProc[V]) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	age, err := strconv.ParseInt(rec.Value, 10, 64)
	if err != nil {
		return err
	}
	prev, found, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	next, line := p.update(rec.Key, age, prev, found)
	if err := p.store.Put(rec.Key, next); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: line, Timestamp: rec.Timestamp})
}

func (p *usersProc[V]) Close() error { return nil }

// usersTopology reads ages from in, keeps them in the store profiles with
// the given value serde and writes update's lines to out. extra, when set,
// adds a second (plain) store, whose changelog a refused start must not
// create.
func usersTopology[V any](in, out string, values serde.Serde[V], extra string, update func(string, int64, V, bool) (V, string)) *processor.Topology {
	spec := processor.KeyValue(profiles, serde.String(), values)
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	p := t.AddProcessor("users", func() processor.Processor[string, string, string, string] {
		return &usersProc[V]{spec: spec, update: update}
	}, src)
	t.AddStore(spec, p)
	if extra != "" {
		t.AddStore(processor.KeyValue(extra, serde.String(), serde.String()), p)
	}
	t.AddSink("out", out, serde.String(), serde.String(), p)
	return t
}

// readyThenStop waits, for at most 60 s, until in runs, then stops it;
// what names the start in a failure.
func readyThenStop(t *testing.T, in *instance, what string) {
	t.Helper()
	select {
	case <-in.app.Ready():
	case err := <-in.done:
		t.Fatalf("%s: %v", what, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: not ready in 60 s", what)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
}

func avroSerde[T any](t *testing.T, reg *schema.Client, text string) *serde.AvroSerde[T] {
	t.Helper()
	s, err := serde.Avro[T](serde.AvroConfig{Registry: reg, Schema: text})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func registryConfig(c *kafka.Env, app string, t *testing.T) weir.Config {
	cfg := baseConfig(c, app, t)
	cfg.Registry = schema.Config{URL: c.RegistryURL, RetryTimeout: 20 * time.Second}
	return cfg
}

// runUntil starts an App, produces msgs, waits until out holds a record
// for every want line (in any order, among others), and stops the App.
func runUntil(t *testing.T, c *kafka.Env, top weir.Topology, cfg weir.Config, out string, want []string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	in := start(t, top, cfg)
	kafka.Produce(t, c, msgs...)
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		seen := map[string]bool{}
		for _, m := range got {
			seen[string(m.Value)] = true
		}
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	})
	if err := in.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func ageMsg(topic, name string, age int) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(name), Value: sarama.StringEncoder(strconv.Itoa(age))}
}

// committed returns the group's committed offsets of topic's partitions.
func committed(t *testing.T, c *kafka.Env, group, topic string, parts []int32) map[int32]int64 {
	t.Helper()
	res, err := c.Admin(t).ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		t.Fatalf("list offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, p := range parts {
		if b := res.GetBlock(topic, p); b != nil {
			out[p] = b.Offset
		}
	}
	return out
}

// A v1 application writes Avro state and stops; v2 adds a field with a
// default: it starts (its schema registered under BACKWARD_TRANSITIVE),
// restores into a fresh state directory, reads v1's values with the
// default and writes v2 values; a restart of v2 reads both. v3 changes a
// field's type: Run refuses it naming the store, the subject and the
// reason, and the registry's versions, the changelog's end offsets, the
// group's committed offsets, the topics and the state directory are
// unchanged. Without the start-time check v3 would start and fail on the
// first v1 value it read.
func TestAvroStoreEvolvesAndIncompatibleSchemaStopsStart(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, c)
	app := c.Name(t, "avro-app")
	in, out := c.Name(t, "avro-in"), c.Name(t, "avro-out")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	subject := schema.StoreSubject(app, profiles, schema.Value)
	changelog := app + "-" + profiles + "-changelog"
	deleteSubjects(t, c, subject, out+"-value", profiles+"-value")

	// v1.
	v1 := usersTopology(in, out, avroSerde[itUserV1Go](t, reg, itUserV1), "", func(name string, age int64, prev itUserV1Go, found bool) (itUserV1Go, string) {
		return itUserV1Go{Name: name, Age: age}, fmt.Sprintf("v1 %s %d", name, age)
	})
	runUntil(t, c, v1, registryConfig(c, app, t), out, []string{"v1 ada 36", "v1 bob 40"}, ageMsg(in, "ada", 36), ageMsg(in, "bob", 40))
	if level, err := reg.Compatibility(ctx, subject); err != nil || level != schema.BackwardTransitive {
		t.Errorf("compatibility of %s = %q, %v; want BACKWARD_TRANSITIVE, set by the App", subject, level, err)
	}
	r1, err := reg.Lookup(ctx, subject, itUserV1)
	if err != nil {
		t.Fatalf("v1's schema is not registered under %s: %v", subject, err)
	}

	// v2, restoring into a state directory of its own.
	v2 := func() *processor.Topology {
		return usersTopology(in, out, avroSerde[itUserV2Go](t, reg, itUserV2), "", func(name string, age int64, prev itUserV2Go, found bool) (itUserV2Go, string) {
			return itUserV2Go{Name: name, Age: age, Country: "nl"}, fmt.Sprintf("v2 %s prev=%t/%d/%s", name, found, prev.Age, prev.Country)
		})
	}
	runUntil(t, c, v2(), registryConfig(c, app, t), out, []string{"v2 ada prev=true/36/unknown", "v2 cara prev=false/0/"},
		ageMsg(in, "ada", 37), ageMsg(in, "cara", 25))
	r2, err := reg.Lookup(ctx, subject, itUserV2)
	if err != nil || r2.Version != r1.Version+1 {
		t.Fatalf("v2 under %s: %+v, %v; want the version after v1's %d", subject, r2, err, r1.Version)
	}
	// The changelog's last record of ada is a v2 value.
	log := kafka.ReadAll(t, c, changelog, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= 4 })
	ids := map[string]int{}
	for _, m := range log {
		ids[string(m.Key)] = int(binary.BigEndian.Uint32(m.Value[1:5]))
	}
	if ids["ada"] != r2.ID || ids["bob"] != r1.ID || ids["cara"] != r2.ID {
		t.Errorf("changelog writer ids = %v; want ada and cara under v2 (%d), bob under v1 (%d)", ids, r2.ID, r1.ID)
	}

	// The serde wrote the ids the App registered under the store's
	// subject: it registered nothing under its own default subject.
	if v, err := reg.Versions(ctx, profiles+"-value"); !errors.Is(err, schema.ErrNotFound) {
		t.Errorf("subject %s-value = %v, %v; want none: a store serde must use the store's subject", profiles, v, err)
	}

	// v2 again, restoring both kinds of value.
	runUntil(t, c, v2(), registryConfig(c, app, t), out, []string{"v2 bob prev=true/40/unknown", "v2 ada prev=true/37/nl"},
		ageMsg(in, "bob", 41), ageMsg(in, "ada", 38))

	// v3 changes a field's type: refused, and nothing changes.
	versions, err := reg.Versions(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	ends := kafka.EndOffsets(t, c, changelog)
	offsets := committed(t, c, app, in, []int32{0})
	if len(offsets) != 1 {
		t.Fatalf("no committed offset for %s before v3: %v", in, offsets)
	}
	v3 := usersTopology(in, out, avroSerde[map[string]any](t, reg, itUserV3), "extra", func(name string, age int64, prev map[string]any, found bool) (map[string]any, string) {
		return map[string]any{"name": 1, "age": age, "country": "x"}, "v3"
	})
	cfg := registryConfig(c, app, t)
	v3app, err := weir.New(v3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kafka.Produce(t, c, ageMsg(in, "dan", 50)) // v3 must not consume it
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = v3app.Run(runCtx)
	var se *weir.SchemaError
	if !errors.As(err, &se) || se.Store != profiles || se.Subject != subject || se.Part != schema.Value || !strings.Contains(se.Reason, "name") {
		t.Fatalf("Run of v3 = %v, want a SchemaError naming store profiles, subject %s and the field", err, subject)
	}
	for _, want := range []string{"store " + profiles, subject, se.Reason} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not name %q", err, want)
		}
	}
	t.Logf("Run of v3: %v", err)
	if got, err := reg.Versions(ctx, subject); err != nil || !slices.Equal(got, versions) {
		t.Errorf("versions of %s after the refusal = %v, %v; want %v", subject, got, err, versions)
	}
	if got := kafka.EndOffsets(t, c, changelog); !maps.Equal(got, ends) {
		t.Errorf("changelog end offsets after the refusal = %v, want %v", got, ends)
	}
	if got := committed(t, c, app, in, []int32{0}); !maps.Equal(got, offsets) {
		t.Errorf("committed offsets after the refusal = %v, want %v", got, offsets)
	}
	topics, err := c.Admin(t).ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topics[app+"-extra-changelog"]; ok {
		t.Errorf("the refused start created %s-extra-changelog", app)
	}
	if entries, err := os.ReadDir(cfg.StateDir); err != nil || len(entries) != 0 {
		t.Errorf("the refused start touched the state directory: %v, %v", entries, err)
	}

	// A new field without a default is refused too.
	noDefault := strings.Replace(itUserV2, `,"default":"unknown"`, "", 1)
	noDefault = strings.Replace(noDefault, `"country"`, `"city"`, 1)
	v4, err := weir.New(usersTopology(in, out, avroSerde[map[string]any](t, reg, noDefault), "", func(string, int64, map[string]any, bool) (map[string]any, string) {
		return nil, ""
	}), registryConfig(c, app, t))
	if err != nil {
		t.Fatal(err)
	}
	se = nil
	if err := v4.Run(runCtx); !errors.As(err, &se) || !strings.Contains(se.Reason, "city") {
		t.Errorf("Run with a new field without default = %v, want a SchemaError naming the field", err)
	} else {
		t.Logf("Run with a new field without default: %v", err)
	}
	if got, err := reg.Versions(ctx, subject); err != nil || !slices.Equal(got, versions) {
		t.Errorf("versions of %s after the second refusal = %v, %v; want %v", subject, got, err, versions)
	}
}

// A store's key schema must not change: keys are compared as bytes. The
// first key schema is registered; a different one is refused with
// ErrKeySchemaChanged and nothing registered.
func TestAvroStoreKeySchemaChangeRefused(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, c)
	app := c.Name(t, "avro-key")
	in := c.Name(t, "avro-key-in")
	c.CreateTopic(t, in, 1, nil)
	subject := schema.StoreSubject(app, profiles, schema.Key)
	deleteSubjects(t, c, subject, schema.StoreSubject(app, profiles, schema.Value))
	build := func(keys serde.Serde[string]) *processor.Topology {
		tp := processor.NewTopology()
		p := tp.AddProcessor("noop", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }),
			tp.AddSource("in", in, serde.String(), serde.String()))
		tp.AddStore(processor.KeyValue(profiles, keys, avroSerde[itUserV1Go](t, reg, itUserV1)), p)
		return tp
	}
	keyV1, err := serde.Avro[string](serde.AvroConfig{Registry: reg, Schema: `"string"`, Part: schema.Key})
	if err != nil {
		t.Fatal(err)
	}
	first := start(t, build(keyV1), registryConfig(c, app, t))
	readyThenStop(t, first, "the first start")
	versions, err := reg.Versions(ctx, subject)
	if err != nil || len(versions) != 1 {
		t.Fatalf("versions of %s after the first start = %v, %v; want one", subject, versions, err)
	}

	// The same key schema with a doc is the same encoding: accepted.
	same, err := serde.Avro[string](serde.AvroConfig{Registry: reg, Schema: `{"type":"string","doc":"a user name"}`, Part: schema.Key})
	if err != nil {
		t.Fatal(err)
	}
	again := start(t, build(same), registryConfig(c, app, t))
	readyThenStop(t, again, "a start with the same key encoding")
	if versions, err = reg.Versions(ctx, subject); err != nil {
		t.Fatal(err)
	}

	// bytes instead of string: a compatible schema for the registry, a
	// different key for the store.
	changed, err := serde.Avro[[]byte](serde.AvroConfig{Registry: reg, Schema: `"bytes"`, Part: schema.Key})
	if err != nil {
		t.Fatal(err)
	}
	tp := processor.NewTopology()
	p := tp.AddProcessor("noop", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }),
		tp.AddSource("in", in, serde.String(), serde.String()))
	tp.AddStore(processor.KeyValue(profiles, changed, avroSerde[itUserV1Go](t, reg, itUserV1)), p)
	a, err := weir.New(tp, registryConfig(c, app, t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = a.Run(runCtx)
	var se *weir.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, weir.ErrKeySchemaChanged) || se.Store != profiles || se.Subject != subject || se.Part != schema.Key {
		t.Fatalf("Run with a changed key schema = %v, want a SchemaError for store profiles, subject %s, ErrKeySchemaChanged", err, subject)
	}
	t.Logf("Run with a changed key schema: %v", err)
	if got, err := reg.Versions(ctx, subject); err != nil || !slices.Equal(got, versions) {
		t.Errorf("versions of %s after the refusal = %v, %v; want %v", subject, got, err, versions)
	}
}

// A sink's Avro schema is checked at start under the topic's subject, at
// the subject's own compatibility level: an incompatible one stops Run
// with a SchemaError naming the topic, and nothing is registered, not even
// the store's schema that passed its check; a compatible one is
// registered and the App starts.
func TestAvroSinkSchemaCheckedAtStart(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, c)
	app := c.Name(t, "avro-sink")
	in, out := c.Name(t, "avro-sink-in"), c.Name(t, "avro-sink-out")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	sinkSubject := schema.TopicSubject(out, schema.Value)
	storeSubject := schema.StoreSubject(app, profiles, schema.Value)
	deleteSubjects(t, c, sinkSubject, storeSubject)
	if err := reg.SetCompatibility(ctx, sinkSubject, schema.Backward); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, sinkSubject, itUserV1); err != nil {
		t.Fatal(err)
	}
	build := func(text string) *processor.Topology {
		tp := processor.NewTopology()
		p := tp.AddProcessor("noop", processor.Func(func(processor.Context[string, map[string]any], processor.Record[string, string]) error { return nil }),
			tp.AddSource("in", in, serde.String(), serde.String()))
		tp.AddStore(processor.KeyValue(profiles, serde.String(), avroSerde[itUserV1Go](t, reg, itUserV1)), p)
		tp.AddSink("out", out, serde.String(), avroSerde[map[string]any](t, reg, text), p)
		return tp
	}
	a, err := weir.New(build(itUserV3), registryConfig(c, app, t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = a.Run(runCtx)
	var se *weir.SchemaError
	if !errors.As(err, &se) || se.Topic != out || se.Store != "" || se.Subject != sinkSubject || !strings.Contains(se.Reason, "name") {
		t.Fatalf("Run with an incompatible sink schema = %v, want a SchemaError naming topic %s, subject %s and the field", err, out, sinkSubject)
	}
	t.Logf("Run with an incompatible sink schema: %v", err)
	if v, err := reg.Versions(ctx, sinkSubject); err != nil || !slices.Equal(v, []int{1}) {
		t.Errorf("versions of %s = %v, %v; want [1]", sinkSubject, v, err)
	}
	if v, err := reg.Versions(ctx, storeSubject); !errors.Is(err, schema.ErrNotFound) {
		t.Errorf("versions of %s = %v, %v; want none: a refused start registers nothing", storeSubject, v, err)
	}
	if level, err := reg.Compatibility(ctx, sinkSubject); err != nil || level != schema.Backward {
		t.Errorf("compatibility of %s = %q, %v; want BACKWARD, the sink subject's own", sinkSubject, level, err)
	}

	ok := start(t, build(itUserV2), registryConfig(c, app, t))
	readyThenStop(t, ok, "a start with a compatible sink schema")
	if r, err := reg.Lookup(ctx, sinkSubject, itUserV2); err != nil || r.Version != 2 {
		t.Errorf("v2 under %s = %+v, %v; want version 2", sinkSubject, r, err)
	}
	if _, err := reg.Lookup(ctx, storeSubject, itUserV1); err != nil {
		t.Errorf("the store's schema after a good start: %v", err)
	}
}

// Several replicas of a new application started at the same moment (a
// first deploy, or the first start after a fork or a rescale) race to
// set their store subjects' compatibility level and to register their
// schemas on the real registry; every one of them starts. Three rounds,
// each with a new application id and three instances started together.
func TestSimultaneousFirstStartsOnTheRegistry(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	reg := newRegistry(t, c)
	in := c.Name(t, "simultaneous-in")
	c.CreateTopic(t, in, 3, nil)
	for round := range 3 {
		app := c.Name(t, fmt.Sprintf("simultaneous-%d", round))
		deleteSubjects(t, c, schema.StoreSubject(app, profiles, schema.Key), schema.StoreSubject(app, profiles, schema.Value))
		build := func() *processor.Topology {
			tp := processor.NewTopology()
			p := tp.AddProcessor("noop", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }),
				tp.AddSource("in", in, serde.String(), serde.String()))
			tp.AddStore(processor.KeyValue(profiles, serde.String(), avroSerde[itUserV1Go](t, reg, itUserV1)), p)
			return tp
		}
		var insts []*instance
		for range 3 {
			insts = append(insts, start(t, build(), registryConfig(c, app, t)))
		}
		for i, in := range insts {
			select {
			case <-in.app.Ready():
			case err := <-in.done:
				t.Fatalf("round %d: instance %d of 3 started together: %v", round, i, err)
			case <-time.After(90 * time.Second):
				t.Fatalf("round %d: instance %d not ready in 90 s", round, i)
			}
		}
		for _, in := range insts {
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A start that the topology check refuses (a store's key serde changed)
// leaves the registry as it was: the Avro store it adds has passed its
// schema check, but its subject gets neither a version nor a level. (The
// schemas were once registered before the topology check.)
func TestTopologyRefusalRegistersNothing(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, c)
	app := c.Name(t, "avro-topo")
	in := c.Name(t, "avro-topo-in")
	c.CreateTopic(t, in, 1, nil)
	subject := schema.StoreSubject(app, profiles, schema.Value)
	deleteSubjects(t, c, subject, schema.StoreSubject(app, profiles, schema.Key))
	build := func(keys serde.Serde[string], avroStore bool) *processor.Topology {
		tp := processor.NewTopology()
		p := tp.AddProcessor("noop", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }),
			tp.AddSource("in", in, serde.String(), serde.String()))
		tp.AddStore(processor.KeyValue("plain", keys, serde.String()), p)
		if avroStore {
			tp.AddStore(processor.KeyValue(profiles, serde.String(), avroSerde[itUserV1Go](t, reg, itUserV1)), p)
		}
		return tp
	}
	first := start(t, build(serde.String(), false), registryConfig(c, app, t))
	readyThenStop(t, first, "the first start")

	a, err := weir.New(build(otherStrings{}, true), registryConfig(c, app, t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = a.Run(runCtx)
	var ue *weir.UpgradeError
	if !errors.As(err, &ue) {
		t.Fatalf("Run with store plain's key serde changed = %v, want a *weir.UpgradeError", err)
	}
	if vs, err := reg.Versions(ctx, subject); !errors.Is(err, schema.ErrNotFound) {
		t.Fatalf("the refused start registered under %s: versions %v, %v", subject, vs, err)
	}

	// The same topology without the refused change starts and registers.
	again := start(t, build(serde.String(), true), registryConfig(c, app, t))
	readyThenStop(t, again, "the start without the refused change")
	if vs, err := reg.Versions(ctx, subject); err != nil || len(vs) != 1 {
		t.Fatalf("versions of %s after the accepted start = %v, %v; want one", subject, vs, err)
	}
	if level, err := reg.Compatibility(ctx, subject); err != nil || level != schema.BackwardTransitive {
		t.Fatalf("level of %s = %s, %v; want %s", subject, level, err, schema.BackwardTransitive)
	}
}

// otherStrings is a string serde of another type than serde.String: a
// changed key serde for the topology check.
type otherStrings struct{}

func (otherStrings) Serialize(_ string, v string) ([]byte, error)   { return []byte(v), nil }
func (otherStrings) Deserialize(_ string, b []byte) (string, error) { return string(b), nil }
