package weirtest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// With CacheMaxBytes the updates of a key that one input record makes
// are one update: the cache is flushed when the driver commits the
// record. Without it, each update is forwarded.
func TestCacheMaxBytesMergesARecordsUpdates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cache int64
		want  []string
	}{
		{0, []string{"k=1", "k=2", "k=3", "k=4"}},
		{10 << 20, []string{"k=3", "k=4"}},
	} {
		b := kstream.NewBuilder()
		b.Stream("lines", "in", serde.String(), serde.String()).
			FlatMapValues(strings.Fields).
			GroupByKey().Count("counts").ToStream().To("out", serde.String(), serde.Int64())
		d, err := weirtest.New(b, weirtest.Config{CacheMaxBytes: c.cache})
		if err != nil {
			t.Fatal(err)
		}
		in := weirtest.Input(d, "in", serde.String(), serde.String())
		for _, line := range []string{"x y z", "w"} {
			if err := in.Pipe("k", line, time.UnixMilli(1)); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := weirtest.Output(d, "out", serde.String(), serde.Int64()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%s=%d", r.Key, r.Value))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("CacheMaxBytes %d: out = %v, want %v", c.cache, got, c.want)
		}
		d.Close()
	}
}
