package serde

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"

	"github.com/weirstream/weir/internal/lru"
	"github.com/weirstream/weir/schema"
)

// Registry is what an Avro serde needs of a schema registry;
// [*schema.Client] implements it. Both methods must be safe for concurrent
// use and bound their own time (schema.Client retries for at most its
// RetryTimeout).
type Registry interface {
	// Register registers schema under subject, or finds it there, and
	// returns its id. A refused schema is a *schema.IncompatibleError.
	Register(ctx context.Context, subject, schema string) (schema.Registered, error)
	// SchemaByID returns the text of the schema with the given id; an id
	// the registry does not know matches schema.ErrNotFound.
	SchemaByID(ctx context.Context, id int) (string, error)
}

// AvroConfig configures [Avro].
type AvroConfig struct {
	// Registry registers the schema and resolves the ids of records read.
	// Required.
	Registry Registry

	// Schema is the Avro schema of T: the writer schema of Serialize and
	// the reader schema of Deserialize. Required. T is a Go struct whose
	// fields carry `avro:"name"` tags (hamba/avro's rules), or, for generic
	// records, map[string]any.
	Schema string

	// Part says whether the serde is for keys or values; it picks the
	// default subject. Default [schema.Value].
	Part schema.Part

	// Subject names the subject that Serialize registers the schema under
	// for a topic. Default: TopicNameStrategy, [schema.TopicSubject](topic,
	// Part), as Confluent's serializers do. A state store's serde needs
	// none: a weir App registers the store's schema under
	// [schema.StoreSubject] at start and gives the serde that id
	// ([AvroSerde.UseID]), whatever Subject says.
	Subject func(topic string) string

	// CacheSize is the number of writer schemas (by id) whose resolution
	// into Schema the serde keeps, least recently used evicted. Default
	// 100: a topic holds records of a few schema versions. (hamba/avro also
	// keeps one compiled decoder per distinct resolved schema, in the
	// serde's own configuration; their number is that of the distinct
	// writer schemas the serde has read.)
	CacheSize int

	// MaxBytes bounds the length of a string or bytes value the decoder
	// allocates, so a corrupt length cannot allocate gigabytes. Default
	// 1 MiB, Kafka's default message.max.bytes; a negative value removes
	// the bound.
	MaxBytes int

	// MaxItems bounds the array items and map entries of one record,
	// together. Every block count is also checked against the bytes left
	// (an item takes at least a byte, except items of types that take
	// none, such as null), so what a record makes the decoder allocate is
	// bounded by its size. Default [DefaultAvroMaxItems] (1,048,576).
	MaxItems int
}

// Avro returns the serde of T in Avro binary with the Confluent wire
// format: a zero magic byte, the writer schema's registry id as 4 bytes
// big-endian, then the Avro binary encoding, as Confluent's
// KafkaAvroSerializer writes it.
//
// Serialize registers cfg.Schema under the topic's subject at its first use
// for that topic (or finds it registered), then writes that id. A weir
// App with weir.Config.Registry registers the schema of every store and
// sink serde before its tasks start and hands the ids over
// ([AvroSerde.UseID]), so the first record does not wait for the registry
// and a refused schema stops the start, not a running task.
//
// Deserialize reads the writer id, fetches that schema (cached) and
// resolves the data into cfg.Schema by Avro's schema resolution: a record
// written under an older schema gains the defaults of fields added since
// and loses fields removed since. That is how weir migrates state lazily.
//
// Untrusted bytes: before the decoder runs, the body is checked against
// the writer schema (every length, block count, union and enum index,
// nesting up to 256 levels, AvroConfig.MaxBytes and MaxItems), so that no
// record can make the decoder allocate without bound, panic or write
// outside a slice; a panic inside the decoder all the same becomes a
// [*FormatError].
//
// Errors: nil data is [ErrNull]; a frame shorter than its header, a wrong
// magic byte, a malformed body, an id the registry does not know (wrapping
// [ErrUnknownSchema]), a writer schema that cannot be resolved into
// cfg.Schema, and data that does not decode are [*FormatError]s, carrying
// the id once it has been read. A registry that cannot be reached is not
// a format error: Deserialize returns the registry's error (a
// *schema.UnreachableError), so the caller can retry the record. Serialize
// returns a [*FormatError] for a value that does not fit the schema and the
// registry's error when registration fails.
func Avro[T any](cfg AvroConfig) (*AvroSerde[T], error) {
	if cfg.Registry == nil {
		return nil, errors.New("serde: avro: AvroConfig.Registry is required")
	}
	reader, err := avro.ParseWithCache(cfg.Schema, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("serde: avro: AvroConfig.Schema: %w", err)
	}
	if missing := unmappedFields(reflect.TypeFor[T](), reader); len(missing) > 0 {
		return nil, fmt.Errorf("serde: avro: the schema has no field for %s: a value put there would be dropped on write and read as zero; add it to the schema (with a default), or tag the Go field `avro:\"-\"`",
			strings.Join(missing, ", "))
	}
	if cfg.Subject == nil {
		part := cfg.Part
		cfg.Subject = func(topic string) string { return schema.TopicSubject(topic, part) }
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 100
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = DefaultAvroMaxItems
	}
	s := &AvroSerde[T]{
		cfg:      cfg,
		reader:   reader,
		api:      avro.Config{MaxByteSliceSize: cfg.MaxBytes, MaxSliceAllocSize: cfg.MaxItems}.Freeze(),
		resolved: lru.New[int, resolution](cfg.CacheSize),
	}
	s.readers.New = func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(s.api)) }
	return s, nil
}

// AvroSerde is the [Serde] that [Avro] returns. It is safe for concurrent
// use.
type AvroSerde[T any] struct {
	cfg    AvroConfig
	reader avro.Schema
	// api is the serde's own hamba configuration, so that no state is
	// shared with other users of hamba's package-level default.
	api avro.API

	// ids holds the writer id per topic Serialize wrote to; it grows with
	// the number of topics, which a topology fixes.
	ids sync.Map // topic string -> int

	resolved *lru.Cache[int, resolution] // writer id -> reader-side schema

	readers sync.Pool // of *avro.Reader on s.api
}

// resolution is the outcome of resolving a writer schema into the reader
// schema. A failed resolution is kept too: a topic full of records of an
// unresolvable schema should not ask the registry for every record.
type resolution struct {
	schema avro.Schema // decodes into the reader schema
	writer avro.Schema // what the bytes are, checked before decoding
	err    *FormatError
}

var _ Serde[struct{}] = (*AvroSerde[struct{}])(nil)

// Schema returns the serde's Avro schema, as given in [AvroConfig].
func (s *AvroSerde[T]) Schema() string { return s.cfg.Schema }

// Subject returns the subject that Serialize uses for topic.
func (s *AvroSerde[T]) Subject(topic string) string { return s.cfg.Subject(topic) }

// Register registers the schema under the subject of topic (or finds it
// there) and remembers its id for Serialize. A schema the subject refuses
// is a *schema.IncompatibleError.
func (s *AvroSerde[T]) Register(ctx context.Context, topic string) (int, error) {
	subject := s.cfg.Subject(topic)
	r, err := s.cfg.Registry.Register(ctx, subject, s.cfg.Schema)
	if err != nil {
		return 0, fmt.Errorf("serde: avro: register the schema for topic %s: %w", topic, err)
	}
	s.ids.Store(topic, r.ID)
	// Data written under the serde's own id needs no resolution.
	s.resolved.Add(r.ID, resolution{schema: s.reader, writer: s.reader})
	return r.ID, nil
}

// UseID makes Serialize write id for topic from now on, without asking
// the registry. id must be the id of the serde's own schema in the serde's
// registry, registered under whatever subject the caller chose: weir's
// start-time check registers a state store's schema under the store's
// subject ([schema.StoreSubject]) and gives the serde that id for the
// store, whose serde sees the store's name as its topic. Safe for
// concurrent use.
func (s *AvroSerde[T]) UseID(topic string, id int) {
	s.ids.Store(topic, id)
	s.resolved.Add(id, resolution{schema: s.reader, writer: s.reader})
}

// headerLen is the wire format's header: magic byte and schema id.
const headerLen = 5

// Serialize implements [Serde]. The first call for a topic that
// [AvroSerde.Register] did not register blocks on the registry.
func (s *AvroSerde[T]) Serialize(topic string, v T) ([]byte, error) {
	id, ok := s.ids.Load(topic)
	if !ok {
		var err error
		if id, err = s.Register(context.Background(), topic); err != nil {
			return nil, err
		}
	}
	body, err := s.api.Marshal(s.reader, v)
	if err != nil {
		// hamba's messages may quote the value (an unknown enum symbol).
		return nil, &FormatError{Format: "avro", SchemaID: id.(int), Reason: "the value does not fit the schema", Err: err}
	}
	out := make([]byte, headerLen, headerLen+len(body))
	binary.BigEndian.PutUint32(out[1:], uint32(id.(int)))
	return append(out, body...), nil
}

// Deserialize implements [Serde]. The first record of a writer id that is
// not cached blocks on the registry.
func (s *AvroSerde[T]) Deserialize(_ string, data []byte) (T, error) {
	var v T
	if data == nil {
		return v, ErrNull
	}
	if len(data) < headerLen {
		return v, &FormatError{Format: "avro", SchemaID: NoSchemaID,
			Reason: fmt.Sprintf("frame of %d bytes is shorter than the %d-byte header", len(data), headerLen)}
	}
	if data[0] != 0 {
		return v, &FormatError{Format: "avro", SchemaID: NoSchemaID, Reason: "wrong magic byte: not the Confluent wire format"}
	}
	id := int(int32(binary.BigEndian.Uint32(data[1:headerLen])))
	res, err := s.resolve(id)
	if err != nil {
		return v, err
	}
	if reason, err := s.decode(res, data[headerLen:], &v); err != nil {
		var zero T
		return zero, &FormatError{Format: "avro", SchemaID: id, Reason: reason, Err: err}
	}
	return v, nil
}

// errTrailing is the cause of a FormatError for bytes after the record.
var errTrailing = errors.New("trailing bytes")

// decode decodes body into v with sch. hamba's Unmarshal takes running out
// of data (io.EOF) for success, so a truncated body would decode into zero
// values; decode reads with a Reader of its own and treats EOF as the
// truncation it is, and bytes left over as corruption. The reason is in
// weir's words: hamba's messages may quote what they read.
//
// The body is checked against the writer schema first (checkAvro), and a
// panic of the decoder all the same is turned into an error: hamba/avro
// is not written for hostile input.
func (s *AvroSerde[T]) decode(res resolution, body []byte, v *T) (reason string, err error) {
	if reason, err := checkAvro(res.writer, body, s.cfg.MaxBytes, s.cfg.MaxItems); err != nil {
		return reason, err
	}
	return s.decodeUnchecked(res, body, v)
}

// decodeUnchecked is decode without the check of the body: hamba's decoder
// alone, its panics turned into errors.
func (s *AvroSerde[T]) decodeUnchecked(res resolution, body []byte, v *T) (reason string, err error) {
	r := s.readers.Get().(*avro.Reader)
	defer func() {
		if p := recover(); p != nil {
			// The reader's state is unknown: it does not go back to the
			// pool.
			reason, err = "the decoder failed on the data", fmt.Errorf("%w: %v", ErrDecoderPanic, p)
			return
		}
		r.Reset(nil)
		r.Error = nil
		s.readers.Put(r)
	}()
	r.Reset(body)
	r.ReadVal(res.schema, v)
	switch {
	case errors.Is(r.Error, io.EOF):
		return "the data ends before the record does (truncated)", r.Error
	case r.Error != nil:
		return "the data does not decode with the writer schema", r.Error
	}
	if r.Peek(); r.Error == nil {
		return "bytes left after the record", errTrailing
	}
	return "", nil
}

// resolve returns the schema that decodes data written under writer id
// into the reader schema.
func (s *AvroSerde[T]) resolve(id int) (resolution, error) {
	if r, ok := s.resolved.Get(id); ok {
		if r.err != nil {
			return resolution{}, r.err
		}
		return r, nil
	}
	text, err := s.cfg.Registry.SchemaByID(context.Background(), id)
	if errors.Is(err, schema.ErrNotFound) {
		// Not cached: the id may yet appear (a registry restored from a
		// backup), and unknown ids are rare enough to ask again.
		return resolution{}, &FormatError{Format: "avro", SchemaID: id, Reason: "the registry does not know the schema id", Err: errors.Join(ErrUnknownSchema, err)}
	}
	if err != nil {
		return resolution{}, fmt.Errorf("serde: avro: fetch writer schema id %d: %w", id, err)
	}
	r := s.resolution(id, text)
	s.resolved.Add(id, r)
	if r.err != nil {
		return resolution{}, r.err
	}
	return r, nil
}

func (s *AvroSerde[T]) resolution(id int, text string) resolution {
	writer, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return resolution{err: &FormatError{Format: "avro", SchemaID: id, Reason: "the writer schema does not parse", Err: err}}
	}
	if writer.Fingerprint() == s.reader.Fingerprint() {
		return resolution{schema: s.reader, writer: s.reader}
	}
	resolved, err := avro.NewSchemaCompatibility().Resolve(s.reader, writer)
	if err != nil {
		// Schema-level text only (field names and types), never data: the
		// reason may quote it.
		return resolution{err: &FormatError{Format: "avro", SchemaID: id,
			Reason: fmt.Sprintf("the writer schema cannot be resolved into the reader schema: %v", err), Err: err}}
	}
	return resolution{schema: resolved, writer: writer}
}
