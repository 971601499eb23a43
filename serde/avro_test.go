package serde

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/schema"
)

// fakeRegistry is an in-memory registry: ids from 1 in registration order,
// one id per distinct schema text, like a real one.
type fakeRegistry struct {
	mu       sync.Mutex
	ids      map[string]int // schema text -> id
	schemas  map[int]string
	subjects map[string][]int
	byIDs    int   // SchemaByID calls
	down     error // returned by every call when set
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{ids: map[string]int{}, schemas: map[int]string{}, subjects: map[string][]int{}}
}

func (r *fakeRegistry) Register(_ context.Context, subject, text string) (schema.Registered, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down != nil {
		return schema.Registered{}, r.down
	}
	id, ok := r.ids[text]
	if !ok {
		id = len(r.ids) + 1
		r.ids[text], r.schemas[id] = id, text
	}
	r.subjects[subject] = append(r.subjects[subject], id)
	return schema.Registered{ID: id, Version: len(r.subjects[subject]), Schema: text}, nil
}

func (r *fakeRegistry) SchemaByID(_ context.Context, id int) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byIDs++
	if r.down != nil {
		return "", r.down
	}
	s, ok := r.schemas[id]
	if !ok {
		return "", fmt.Errorf("fake: id %d: %w", id, schema.ErrNotFound)
	}
	return s, nil
}

const (
	userV1 = `{"type":"record","name":"User","namespace":"weir.test","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"long"}]}`
	// v2 adds a field with a default: it reads v1 data.
	userV2 = `{"type":"record","name":"User","namespace":"weir.test","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"long"},
		{"name":"country","type":"string","default":"unknown"}]}`
	// v3 changes a field's type: it cannot read v1 data.
	userV3 = `{"type":"record","name":"User","namespace":"weir.test","fields":[
		{"name":"name","type":"int"},
		{"name":"age","type":"long"}]}`
)

type userV1Go struct {
	Name string `avro:"name"`
	Age  int64  `avro:"age"`
}

type userV2Go struct {
	Name    string `avro:"name"`
	Age     int64  `avro:"age"`
	Country string `avro:"country"`
}

func newAvro[T any](t testing.TB, reg Registry, text string) *AvroSerde[T] {
	t.Helper()
	s, err := Avro[T](AvroConfig{Registry: reg, Schema: text})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAvroWireFormat(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	reg.Register(context.Background(), "other", `"string"`) // take id 1, so the id is not trivially 1
	s := newAvro[userV1Go](t, reg, userV1)
	got, err := s.Serialize("users", userV1Go{Name: "ab", Age: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Magic 0, id 2 big-endian, then Avro: string "ab" (zig-zag length 2 =
	// 0x04, the bytes), long 1 (zig-zag 0x02).
	want := []byte{0, 0, 0, 0, 2, 0x04, 'a', 'b', 0x02}
	if !bytes.Equal(got, want) {
		t.Errorf("Serialize = % x, want % x", got, want)
	}
	if ids := reg.subjects["users-value"]; len(ids) != 1 || ids[0] != 2 {
		t.Errorf("subject users-value has ids %v, want [2] (TopicNameStrategy)", ids)
	}
	back, err := s.Deserialize("users", got)
	if err != nil || back != (userV1Go{Name: "ab", Age: 1}) {
		t.Errorf("Deserialize = %+v, %v", back, err)
	}
	if reg.byIDs != 0 {
		t.Errorf("%d SchemaByID calls for the serde's own id, want 0", reg.byIDs)
	}
}

func TestAvroSubjects(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	key, err := Avro[string](AvroConfig{Registry: reg, Schema: `"string"`, Part: schema.Key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := key.Serialize("logins", "k"); err != nil {
		t.Fatal(err)
	}
	store, err := Avro[userV1Go](AvroConfig{Registry: reg, Schema: userV1,
		Subject: func(string) string { return schema.StoreSubject("app", "users", schema.Value) }})
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.Register(context.Background(), "app-users-changelog")
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]int{"logins-key": 1, "app-users-value": id} {
		if ids := reg.subjects[subject]; len(ids) != 1 || ids[0] != want {
			t.Errorf("subject %s has ids %v, want [%d]", subject, ids, want)
		}
	}
	if store.Subject("anything") != "app-users-value" || store.Schema() != userV1 {
		t.Errorf("Subject/Schema = %q/%q", store.Subject("anything"), store.Schema())
	}
	// Registered at start: Serialize does not register again.
	if _, err := store.Serialize("app-users-changelog", userV1Go{}); err != nil {
		t.Fatal(err)
	}
	if n := len(reg.subjects["app-users-value"]); n != 1 {
		t.Errorf("Serialize registered again after Register (%d registrations)", n)
	}
}

// UseID makes Serialize write the given id for the topic without asking
// the registry (weir's start-time check registers a store's schema under
// the store's subject and hands the id over), and only for that topic.
func TestAvroUseID(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	s := newAvro[userV1Go](t, reg, userV1)
	id, err := reg.Register(context.Background(), "app-users-value", userV1)
	if err != nil {
		t.Fatal(err)
	}
	s.UseID("users", id.ID)
	b, err := s.Serialize("users", userV1Go{Name: "ada", Age: 36})
	if err != nil {
		t.Fatal(err)
	}
	if got := int(binary.BigEndian.Uint32(b[1:5])); got != id.ID {
		t.Errorf("Serialize wrote id %d, want %d", got, id.ID)
	}
	if n := len(reg.subjects["users-value"]); n != 0 {
		t.Errorf("Serialize registered under users-value (%d) after UseID", n)
	}
	if v, err := s.Deserialize("users", b); err != nil || v.Name != "ada" || reg.byIDs != 0 {
		t.Errorf("Deserialize = %+v, %v after %d SchemaByID calls; want ada without a call", v, err, reg.byIDs)
	}
	if _, err := s.Serialize("other", userV1Go{}); err != nil || len(reg.subjects["other-value"]) != 1 {
		t.Errorf("another topic: %v, registrations %v; want it registered under its own subject", err, reg.subjects["other-value"])
	}
}

// Lazy state migration: a record written under v1 is read by a v2 serde
// with the default of the added field; a v2 record is written under v2's id.
func TestAvroResolvesOlderWriterSchema(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	v1 := newAvro[userV1Go](t, reg, userV1)
	old, err := v1.Serialize("users", userV1Go{Name: "ada", Age: 36})
	if err != nil {
		t.Fatal(err)
	}
	v2 := newAvro[userV2Go](t, reg, userV2)
	got, err := v2.Deserialize("users", old)
	if err != nil {
		t.Fatalf("v2 reading v1: %v", err)
	}
	if want := (userV2Go{Name: "ada", Age: 36, Country: "unknown"}); got != want {
		t.Errorf("v2 read %+v, want %+v", got, want)
	}
	// The writer schema is fetched once and cached.
	if _, err := v2.Deserialize("users", old); err != nil {
		t.Fatal(err)
	}
	if reg.byIDs != 1 {
		t.Errorf("%d SchemaByID calls for two records of one id, want 1", reg.byIDs)
	}
	updated, err := v2.Serialize("users", got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(updated[:5], []byte{0, 0, 0, 0, 2}) {
		t.Errorf("v2 wrote header % x, want v2's id 2", updated[:5])
	}

	// Generic records: the same data as map[string]any.
	generic := newAvro[map[string]any](t, reg, userV2)
	m, err := generic.Deserialize("users", old)
	if err != nil {
		t.Fatal(err)
	}
	if m["name"] != "ada" || m["age"] != int64(36) || m["country"] != "unknown" {
		t.Errorf("generic v2 read %v", m)
	}
	b, err := generic.Serialize("users", map[string]any{"name": "bob", "age": int64(7), "country": "fr"})
	if err != nil {
		t.Fatal(err)
	}
	if back, err := v2.Deserialize("users", b); err != nil || back != (userV2Go{"bob", 7, "fr"}) {
		t.Errorf("struct read of a generic record = %+v, %v", back, err)
	}
}

func TestAvroDecodeErrors(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	v1 := newAvro[userV1Go](t, reg, userV1)
	good, err := v1.Serialize("users", userV1Go{Name: "ada", Age: 36})
	if err != nil {
		t.Fatal(err)
	}
	v3 := newAvro[map[string]any](t, reg, userV3) // registers v3 as id 2
	if _, err := v3.Serialize("v3", map[string]any{"name": 1, "age": int64(2)}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		data    []byte
		id      int
		unknown bool
	}{
		{"wrong magic byte", append([]byte{1}, good[1:]...), NoSchemaID, false},
		{"shorter than the header", good[:3], NoSchemaID, false},
		{"empty", []byte{}, NoSchemaID, false},
		{"truncated body", good[:len(good)-2], 1, false},
		{"body cut inside the last varint", append(good[:len(good)-1:len(good)-1], 0x80), 1, false},
		{"no body", good[:5], 1, false},
		{"trailing bytes", append(good[:len(good):len(good)], 0), 1, false},
		{"unknown schema id", []byte{0, 0, 0, 0x30, 0x39, 2, 'a', 2}, 12345, true},
		{"negative schema id", []byte{0, 0xff, 0xff, 0xff, 0xff, 2, 'a', 2}, -1, true},
	}
	for _, c := range cases {
		_, err := v1.Deserialize("users", c.data)
		var f *FormatError
		if !errors.As(err, &f) {
			t.Errorf("%s: got %v, want a FormatError", c.name, err)
			continue
		}
		if f.SchemaID != c.id {
			t.Errorf("%s: SchemaID %d, want %d (%v)", c.name, f.SchemaID, c.id, err)
		}
		if errors.Is(err, ErrUnknownSchema) != c.unknown {
			t.Errorf("%s: errors.Is(ErrUnknownSchema) = %v, want %v", c.name, !c.unknown, c.unknown)
		}
	}
	var f *FormatError
	if _, err := v1.Deserialize("users", []byte{0, 0, 0, 0x30, 0x39}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("12345")) {
		t.Errorf("unknown id: the error %v does not name the id", err)
	}
	// A v3 record cannot be resolved into v1: a FormatError with v3's id.
	v3rec, _ := v3.Serialize("v3", map[string]any{"name": 5, "age": int64(2)})
	if _, err := v1.Deserialize("users", v3rec); !errors.As(err, &f) || f.SchemaID != 2 {
		t.Errorf("v3 record read as v1: got %v, want a FormatError with id 2", err)
	}
	if _, err := v1.Deserialize("users", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: %v, want ErrNull", err)
	}

	// An unreachable registry is the registry's error, not bad data.
	down := newFakeRegistry()
	down.down = errors.New("fake: connection refused")
	s := newAvro[userV1Go](t, down, userV1)
	_, err = s.Deserialize("users", good)
	if err == nil || errors.As(err, &f) || !errors.Is(err, down.down) {
		t.Errorf("registry down: got %v, want the registry's error, not a FormatError", err)
	}
	if _, err := s.Serialize("users", userV1Go{}); !errors.Is(err, down.down) {
		t.Errorf("registry down on Serialize: got %v", err)
	}
}

func TestAvroConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := Avro[userV1Go](AvroConfig{Schema: userV1}); err == nil {
		t.Error("no registry accepted")
	}
	if _, err := Avro[userV1Go](AvroConfig{Registry: newFakeRegistry(), Schema: `{"type":"record"`}); err == nil {
		t.Error("invalid schema accepted")
	}
	s := newAvro[map[string]any](t, newFakeRegistry(), userV1)
	_, err := s.Serialize("t", map[string]any{"name": "x"}) // age missing
	var f *FormatError
	if !errors.As(err, &f) || f.SchemaID != 1 {
		t.Errorf("value missing a field: got %v, want a FormatError with id 1", err)
	}
}

func FuzzAvro(f *testing.F) {
	reg := newFakeRegistry()
	v1 := newAvro[userV1Go](f, reg, userV1)
	good, _ := v1.Serialize("users", userV1Go{Name: "ada", Age: 36})
	v2 := newAvro[userV2Go](f, reg, userV2)
	good2, _ := v2.Serialize("users", userV2Go{Name: "bob", Age: 1, Country: "fr"})
	f.Add(good)
	f.Add(good2)
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, read := range []func([]byte) (any, error){
			func(b []byte) (any, error) { return v1.Deserialize("users", b) },
			func(b []byte) (any, error) { return v2.Deserialize("users", b) },
		} {
			v, err := read(data)
			if err != nil {
				var f *FormatError
				if !errors.As(err, &f) {
					t.Fatalf("error %T %v is not a FormatError", err, err)
				}
				continue
			}
			// What decodes re-encodes under the reader's own id.
			switch v := v.(type) {
			case userV1Go:
				b, err := v1.Serialize("users", v)
				if err != nil {
					t.Fatalf("decoded %+v does not encode: %v", v, err)
				}
				if back, err := v1.Deserialize("users", b); err != nil || back != v {
					t.Fatalf("round trip %+v -> %+v, %v", v, back, err)
				}
			case userV2Go:
				if _, err := v2.Serialize("users", v); err != nil {
					t.Fatalf("decoded %+v does not encode: %v", v, err)
				}
			}
		}
	})
}

// BenchmarkAvro measures one encode and one decode of a small record under
// the serde's own schema (no resolution) and under an older writer schema.
func BenchmarkAvro(b *testing.B) {
	reg := newFakeRegistry()
	v1 := newAvro[userV1Go](b, reg, userV1)
	v2 := newAvro[userV2Go](b, reg, userV2)
	old, _ := v1.Serialize("users", userV1Go{Name: "ada lovelace", Age: 36})
	b.Run("encode+decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := v2.Serialize("users", userV2Go{Name: "ada lovelace", Age: 36, Country: "uk"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := v2.Deserialize("users", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-resolved", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v2.Deserialize("users", old); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A Go field the schema has no field for would be dropped on write and
// read as zero, silently: Avro refuses the pair and names the field, at
// any depth; a field tagged `avro:"-"` and embedded structs are fine.
func TestAvroRefusesGoFieldsTheSchemaLacks(t *testing.T) {
	type Inner struct {
		Zip  string `avro:"zip"`
		Note string // not in the schema
	}
	type Base struct {
		ID int64 `avro:"id"`
	}
	type Order struct {
		Base
		Total   int64            `avro:"total"`
		Tier    string           `avro:"tier"` // not in the schema
		Skipped string           `avro:"-"`
		Address *Inner           `avro:"address"`
		Lines   []Inner          `avro:"lines"`
		ByName  map[string]Inner `avro:"by_name"`
	}
	const inner = `{"type":"record","name":"Inner","fields":[{"name":"zip","type":"string"}]}`
	const order = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"total","type":"long"},
		{"name":"address","type":["null",` + inner + `]},{"name":"lines","type":{"type":"array","items":"Inner"}},
		{"name":"by_name","type":{"type":"map","values":"Inner"}}]}`
	_, err := Avro[Order](AvroConfig{Registry: newFakeRegistry(), Schema: order})
	if err == nil {
		t.Fatal("Avro accepted a struct with fields the schema lacks")
	}
	// Inner is named once, where it is met first.
	for _, want := range []string{"Order.Tier", "Order.Address.Note"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
	type Listed struct {
		ByName map[string][]Inner `avro:"by_name"`
	}
	const listed = `{"type":"record","name":"Listed","fields":[{"name":"by_name","type":{"type":"map","values":{"type":"array","items":` + inner + `}}}]}`
	if _, err := Avro[Listed](AvroConfig{Registry: newFakeRegistry(), Schema: listed}); err == nil || !strings.Contains(err.Error(), "Listed.ByName[][].Note") {
		t.Errorf("a struct in an array in a map: %v; want Listed.ByName[][].Note named", err)
	}
	if strings.Contains(err.Error(), "Skipped") || strings.Contains(err.Error(), "Base") {
		t.Errorf("the error names a field tagged avro:\"-\" or an embedded struct: %v", err)
	}

	type Fits struct {
		Base
		Total   int64  `avro:"total"`
		Skipped string `avro:"-"`
		Address *struct {
			Zip string `avro:"zip"`
		} `avro:"address"`
	}
	const fits = `{"type":"record","name":"Fits","fields":[{"name":"id","type":"long"},{"name":"total","type":"long"},
		{"name":"address","type":["null",` + inner + `]},{"name":"extra","type":"string","default":""}]}`
	if _, err := Avro[Fits](AvroConfig{Registry: newFakeRegistry(), Schema: fits}); err != nil {
		t.Errorf("a struct whose every field is in the schema: %v", err)
	}
	if _, err := Avro[map[string]any](AvroConfig{Registry: newFakeRegistry(), Schema: fits}); err != nil {
		t.Errorf("a map: %v", err)
	}
}
