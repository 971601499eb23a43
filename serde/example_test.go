package serde_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
)

func ExampleJSON() {
	type Login struct {
		User string `json:"user"`
		OK   bool   `json:"ok"`
	}
	s := serde.JSON[Login]()
	b, _ := s.Serialize("logins", Login{User: "ada", OK: true})
	fmt.Println(string(b))

	_, err := s.Deserialize("logins", []byte(`{"user": x}`))
	fmt.Println(err) // the error never quotes the data
	// Output:
	// {"user":"ada","ok":true}
	// serde: json: invalid JSON at byte offset 10 of 11
}

func ExampleUUID() {
	s := serde.UUID()
	b, _ := s.Serialize("t", [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00})
	fmt.Println(string(b))
	// Output: 123e4567-e89b-12d3-a456-426614174000
}

// memRegistry stands in for a schema registry: an application passes a
// *schema.Client.
type memRegistry struct {
	mu  sync.Mutex
	ids []string // schema text by id-1
}

func (r *memRegistry) Register(_ context.Context, subject, text string) (schema.Registered, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.ids {
		if s == text {
			return schema.Registered{ID: i + 1, Schema: s}, nil
		}
	}
	r.ids = append(r.ids, text)
	return schema.Registered{ID: len(r.ids), Schema: text}, nil
}

func (r *memRegistry) SchemaByID(_ context.Context, id int) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.ids) {
		return "", schema.ErrNotFound
	}
	return r.ids[id-1], nil
}

// A value written under version 1 of a schema is read by version 2, which
// added a field with a default: the lazy migration of weir's Avro state.
func ExampleAvro() {
	type CountV1 struct {
		Word  string `avro:"word"`
		Count int64  `avro:"count"`
	}
	type CountV2 struct {
		Word  string `avro:"word"`
		Count int64  `avro:"count"`
		Lang  string `avro:"lang"`
	}
	reg := &memRegistry{} // in production: schema.New(schema.Config{URL: ...})
	v1, err := serde.Avro[CountV1](serde.AvroConfig{Registry: reg, Schema: `{"type":"record","name":"Count","fields":[
		{"name":"word","type":"string"},{"name":"count","type":"long"}]}`})
	if err != nil {
		panic(err)
	}
	v2, err := serde.Avro[CountV2](serde.AvroConfig{Registry: reg, Schema: `{"type":"record","name":"Count","fields":[
		{"name":"word","type":"string"},{"name":"count","type":"long"},
		{"name":"lang","type":"string","default":"en"}]}`})
	if err != nil {
		panic(err)
	}

	old, _ := v1.Serialize("counts", CountV1{Word: "weir", Count: 3})
	fmt.Printf("% x\n", old) // magic byte, schema id 1, Avro body
	fmt.Println(v1.Subject("counts"))

	migrated, _ := v2.Deserialize("counts", old)
	fmt.Printf("%+v\n", migrated)

	_, err = v2.Deserialize("counts", []byte{0, 0, 0, 0, 42, 8})
	var f *serde.FormatError
	fmt.Println(errors.As(err, &f), f.SchemaID, errors.Is(err, serde.ErrUnknownSchema))
	// Output:
	// 00 00 00 00 01 08 77 65 69 72 06
	// counts-value
	// {Word:weir Count:3 Lang:en}
	// true 42 true
}
