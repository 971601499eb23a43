package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/hamba/avro/v2"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/schema"
)

// entry is one key of a store as its changelog holds it now.
type entry struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     any    `json:"value"`
}

func inspectCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("inspect", "-app ID -store S [-key K] [-limit N] [-registry URL] [-o table|json]", errOut, &c)
	store := fs.String("store", "", "the store (required)")
	key := fs.String("key", "", "show only this key (as text, or hex:<digits>)")
	limit := fs.Int("limit", 100, "show at most this many keys (0: all)")
	var registry registryFlags
	registry.add(fs, "schema registry URL: Avro keys and values (Confluent framing) are decoded with its schemas (default $WEIR_SCHEMA_REGISTRY_URL)")
	c.outputFlag(fs)
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *store == "" {
		return &usageError{"-store is required"}
	}
	if *limit < 0 {
		return &usageError{"-limit is negative"}
	}
	reg, err := registry.client()
	if err != nil {
		return err
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()
	d, err := readDescriptor(cl, c.app)
	if err != nil {
		return err
	}
	if d == nil {
		return refused("%s has no topology descriptor: start it once with a weir that writes one", c.app)
	}
	var sd *weir.StoreDescriptor
	for i := range d.Stores {
		if d.Stores[i].Name == *store {
			sd = &d.Stores[i]
		}
	}
	if sd == nil {
		names := make([]string, 0, len(d.Stores))
		for _, s := range d.Stores {
			names = append(names, s.Name)
		}
		return &usageError{fmt.Sprintf("%s has no store %q (its stores: %v)", c.app, *store, names)}
	}
	entries, err := readStore(ctx, cl, sd.Changelog, *key, true, nil)
	if err != nil {
		return err
	}
	if *limit > 0 && len(entries) > *limit {
		entries = entries[:*limit]
	}
	dec := &decoder{ctx: ctx, reg: reg, schemas: map[uint32]avro.Schema{}}
	rows := make([]entry, 0, len(entries))
	for _, e := range entries {
		k, err := dec.decode(sd.KeySerde, e.key)
		if err != nil {
			return err
		}
		v, err := dec.decode(sd.ValueSerde, e.value)
		if err != nil {
			return err
		}
		rows = append(rows, entry{Partition: e.partition, Offset: e.offset, Key: fmt.Sprint(k), Value: v})
	}
	if c.format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return writeInspectTable(out, rows, sd.Changelog)
}

// writeInspectTable prints rows, read from changelog, as a table. Values
// that are not text (Avro records, numbers) are shown as JSON.
func writeInspectTable(out io.Writer, rows []entry, changelog string) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tKEY\tVALUE")
	for _, r := range rows {
		v := r.Value
		if _, ok := v.(string); !ok {
			b, _ := json.Marshal(v)
			v = string(b)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%v\n", r.Partition, r.Offset, r.Key, v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d key(s) from %s\n", len(rows), changelog)
	return nil
}

// raw is a changelog record: the latest of its key.
type raw struct {
	partition  int32
	offset     int64
	ts         time.Time
	key, value []byte
	// stamped: the record carries statelog.TimeHeader, its timestamp is
	// the value's (a copy must keep both).
	stamped bool
}

// readStore reads every partition of changelog (read_committed) and keeps
// each key's latest value; a tombstone deletes it. Keys are sorted when
// sorted is set. A key for which perPartition (when not nil) is true is
// kept per partition: an entry of each task, not of a key (see
// weir.StoreDescriptor.KeyLayout).
func readStore(ctx context.Context, cl *cluster, changelog, only string, sorted bool, perPartition func(key []byte) bool) ([]raw, error) {
	ps, err := cl.partitions(changelog)
	if err != nil {
		return nil, err
	}
	want, err := keyFilter(only)
	if err != nil {
		return nil, err
	}
	type slot struct {
		partition int32 // -1 for a key's entry
		key       string
	}
	latest := map[slot]raw{}
	for _, p := range ps {
		start, end, err := cl.offsets(changelog, p)
		if err != nil {
			return nil, err
		}
		if _, err := readRange(ctx, cl, changelog, p, start, end, func(m *sarama.ConsumerMessage) error {
			if want != nil && string(m.Key) != string(want) {
				return nil
			}
			at := slot{partition: -1, key: string(m.Key)}
			if perPartition != nil && perPartition(m.Key) {
				at.partition = p
			}
			if m.Value == nil {
				delete(latest, at)
				return nil
			}
			latest[at] = raw{partition: p, offset: m.Offset, ts: m.Timestamp, key: m.Key, value: m.Value, stamped: stampedRecord(m)}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	out := make([]raw, 0, len(latest))
	for _, e := range latest {
		out = append(out, e)
	}
	if sorted {
		slices.SortFunc(out, func(a, b raw) int { return bytes.Compare(a.key, b.key) })
	}
	return out, nil
}

// keyFilter returns the bytes of -key: text, or hex:<digits>; nil for
// none.
func keyFilter(k string) ([]byte, error) {
	if k == "" {
		return nil, nil
	}
	if h, ok := strings.CutPrefix(k, "hex:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("-key %q: %v", k, err)}
		}
		return b, nil
	}
	return []byte(k), nil
}

// decoder shows stored bytes: Avro in Confluent framing decoded with the
// registry's schema, valid text as text, anything else as hex.
type decoder struct {
	ctx     context.Context
	reg     *schema.Client
	schemas map[uint32]avro.Schema
}

// decode shows b, written by a serde of Go type format (the descriptor's
// KeySerde or ValueSerde): weir's fixed-size serdes by their encoding,
// the rest as Avro, text or hex.
func (d *decoder) decode(format string, b []byte) (any, error) {
	switch {
	case format == "serde.int64Serde" && len(b) == 8:
		return int64(binary.BigEndian.Uint64(b)), nil
	case format == "serde.int32Serde" && len(b) == 4:
		return int32(binary.BigEndian.Uint32(b)), nil
	case format == "serde.float64Serde" && len(b) == 8:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	case strings.HasPrefix(format, "serde.jsonSerde[") && json.Valid(b):
		return json.RawMessage(b), nil
	}
	if d.reg != nil && len(b) > 5 && b[0] == 0 {
		id := binary.BigEndian.Uint32(b[1:5])
		s, ok := d.schemas[id]
		if !ok {
			text, err := d.reg.SchemaByID(d.ctx, int(id))
			if err != nil {
				return nil, fmt.Errorf("schema %d: %w", id, err)
			}
			if s, err = avro.Parse(text); err != nil {
				return nil, fmt.Errorf("schema %d: %w", id, err)
			}
			d.schemas[id] = s
		}
		var v any
		if err := avro.Unmarshal(s, b[5:], &v); err == nil {
			return v, nil
		}
	}
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return r < ' ' && r != '\t' }) {
		return string(b), nil
	}
	return "hex:" + hex.EncodeToString(b), nil
}

// stampedRecord reports whether a changelog record's timestamp is its
// value's (statelog.TimeHeader).
func stampedRecord(m *sarama.ConsumerMessage) bool {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == statelog.TimeHeader {
			return true
		}
	}
	return false
}
