package main

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestHistogramQuantileInterpolatesLikePrometheus(t *testing.T) {
	t.Parallel()
	series := func(counts ...uint64) *dto.Metric {
		var bs []*dto.Bucket
		var total uint64
		for i, c := range counts {
			total += c
			bs = append(bs, &dto.Bucket{UpperBound: proto.Float64(float64(int(1) << i)), CumulativeCount: proto.Uint64(total)})
		}
		return &dto.Metric{Histogram: &dto.Histogram{SampleCount: proto.Uint64(total), SampleSum: proto.Float64(1), Bucket: bs}}
	}
	// Two threads, bounds 1, 2, 4: 0+2, 5+3, 5+0 observations.
	h := mergeHistograms([]*dto.Metric{series(0, 5, 5), series(2, 3, 0)})
	if h.count != 15 {
		t.Fatalf("count = %d", h.count)
	}
	for _, c := range []struct{ q, want float64 }{
		{0.5, 1 + 1*(7.5-2)/8},     // rank 7.5 in (1,2]: 2 below, 8 inside
		{0.99, 2 + 2*(14.85-10)/5}, // rank 14.85 in (2,4]
		{0.1, 1 * 1.5 / 2},         // rank 1.5 in [0,1]
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	// Observations above the last bound: the highest finite bound.
	over := mergeHistograms([]*dto.Metric{{Histogram: &dto.Histogram{SampleCount: proto.Uint64(4), Bucket: []*dto.Bucket{{UpperBound: proto.Float64(1), CumulativeCount: proto.Uint64(1)}}}}})
	if got := over.quantile(0.99); got != 1 {
		t.Errorf("quantile in +Inf = %v, want 1", got)
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty = %v, want NaN", got)
	}
}
