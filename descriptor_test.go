package weir

import (
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// storesTopology reads "in" and writes "out" through one processor that
// has the given stores attached.
func storesTopology(stores ...processor.StoreSpec) *processor.Topology {
	tp := processor.NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	p := tp.AddProcessor("p", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		return ctx.Forward(rec)
	}), src)
	for _, s := range stores {
		tp.AddStore(s, p)
	}
	tp.AddSink("out", "out", serde.String(), serde.String(), p)
	return tp
}

func descriptorOf(t *testing.T, stores ...processor.StoreSpec) *Descriptor {
	t.Helper()
	app, err := New(storesTopology(stores...), Config{ApplicationID: "shop", Brokers: []string{"b:9092"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	return app.Describe()
}

func TestDescriptorNamesStoresAndTopics(t *testing.T) {
	t.Parallel()
	d := descriptorOf(t, processor.KeyValue("totals", serde.String(), serde.Int64()))
	if d.Version != DescriptorVersion || d.ApplicationID != "shop" || d.Guarantee != "exactly_once" {
		t.Fatalf("header: %+v", d)
	}
	if len(d.Sources) != 1 || d.Sources[0].Topic != "in" || len(d.Sinks) != 1 || d.Sinks[0].Topic != "out" {
		t.Fatalf("sources %+v, sinks %+v", d.Sources, d.Sinks)
	}
	if len(d.Stores) != 1 {
		t.Fatalf("stores: %+v", d.Stores)
	}
	s := d.Stores[0]
	if s.Name != "totals" || s.Type != "key-value" || s.Changelog != "shop-totals-changelog" || !strings.Contains(s.KeySerde, "string") || !strings.Contains(s.ValueSerde, "int64") {
		t.Fatalf("store: %+v", s)
	}
	if len(d.InternalTopics) != 1 || d.InternalTopics[0].Topic != "shop-totals-changelog" || d.InternalTopics[0].Kind != "changelog" {
		t.Fatalf("internal topics: %+v", d.InternalTopics)
	}
	back, err := ParseDescriptor([]byte(d.String()))
	if err != nil || back.String() != d.String() {
		t.Fatalf("JSON round trip: %v\n%s\n%s", err, d, back)
	}
}

func TestCompareDescriptors(t *testing.T) {
	t.Parallel()
	kv := processor.KeyValue("totals", serde.String(), serde.Int64())
	base := descriptorOf(t, kv)
	withPartitions := func(d *Descriptor, n int32) *Descriptor {
		c := *d
		c.Stores = append([]StoreDescriptor(nil), d.Stores...)
		for i := range c.Stores {
			c.Stores[i].Partitions = n
		}
		return &c
	}
	for _, tc := range []struct {
		name    string
		cur     *Descriptor
		refused []string // substrings of the refused differences
		noted   []string // substrings of differences not refused
	}{
		{"same", descriptorOf(t, kv), nil, nil},
		{"added store", descriptorOf(t, kv, processor.KeyValue("seen", serde.String(), serde.String())), nil, []string{`store "seen": new`}},
		{"removed store", descriptorOf(t), []string{`store "totals": removed`}, nil},
		{"changed type", descriptorOf(t, processor.Window("totals", time.Minute, time.Hour, serde.String(), serde.Int64())), []string{`store "totals": type window, was key-value`}, nil},
		{"changed key serde", descriptorOf(t, processor.KeyValue("totals", serde.Bytes(), serde.Int64())), []string{`store "totals": key serde`}, nil},
		{"changed value serde", descriptorOf(t, processor.KeyValue("totals", serde.String(), serde.String())), nil, []string{`store "totals": value serde`}},
		{"changed partitions", withPartitions(base, 12), nil, nil}, // base does not know its count
	} {
		t.Run(tc.name, func(t *testing.T) {
			diffs := CompareDescriptors(base, tc.cur)
			var refused, noted []string
			for _, d := range diffs {
				if d.Refused {
					refused = append(refused, d.String())
				} else {
					noted = append(noted, d.String())
				}
			}
			if len(refused) != len(tc.refused) || len(noted) != len(tc.noted) {
				t.Fatalf("refused %q, noted %q; want %d refused, %d noted", refused, noted, len(tc.refused), len(tc.noted))
			}
			for i, want := range tc.refused {
				if !strings.Contains(refused[i], want) {
					t.Errorf("refused %q; want %q", refused[i], want)
				}
			}
			for i, want := range tc.noted {
				if !strings.Contains(noted[i], want) {
					t.Errorf("noted %q; want %q", noted[i], want)
				}
			}
		})
	}
	if diffs := CompareDescriptors(withPartitions(base, 6), withPartitions(base, 12)); len(diffs) != 1 || !diffs[0].Refused || !strings.Contains(diffs[0].What, "12 partitions, was 6") {
		t.Fatalf("partition count change: %v", diffs)
	}
	later := *base
	later.Version = DescriptorVersion + 1
	if diffs := CompareDescriptors(&later, base); len(diffs) != 1 || !diffs[0].Refused {
		t.Fatalf("a later descriptor version: %v", diffs)
	}
}

// FuzzParseDescriptor: the descriptor is read from a topic whoever may
// write it can fill; parsing any bytes fails or succeeds, never panics,
// and a descriptor of this version compares with itself without a
// refused difference.
func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(`{"version":1,"application_id":"a","stores":[{"name":"s","type":"key-value"}],"internal_topics":[{"topic":"a-s-changelog","kind":"changelog"}]}`))
	f.Add([]byte(`{"version":99}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDescriptor(b)
		if err != nil || d == nil || d.Version != DescriptorVersion {
			return // a later version is refused by design
		}
		for _, diff := range CompareDescriptors(d, d) {
			if diff.Refused {
				t.Fatalf("a descriptor refuses itself: %v", diff)
			}
		}
	})
}
