package streamtime

import (
	"testing"
	"time"
)

type resumed time.Time

func (r resumed) ResumedStreamTime() time.Time { return time.Time(r) }

func TestObserved(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  any
		ts   []int64
		want []int64
	}{
		{"first start: the records' largest timestamp", nil, []int64{5, 3, 9, 7}, []int64{5, 5, 9, 9}},
		{"a context without a resumed time", struct{}{}, []int64{5, 3}, []int64{5, 5}},
		{"first start through a task: zero resumed time", resumed(time.Time{}), []int64{-4, 2}, []int64{-4, 2}},
		{"resumed: starts at the committed time", resumed(time.UnixMilli(100)), []int64{50, 120, 110}, []int64{100, 120, 120}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o Observed
			if _, ok := o.Get(); ok {
				t.Fatal("a new Observed knows a time")
			}
			for i, ts := range c.ts {
				if got := o.Observe(c.ctx, ts); got != c.want[i] {
					t.Errorf("Observe(%d) = %d, want %d", ts, got, c.want[i])
				}
				if got, ok := o.Get(); !ok || got != c.want[i] {
					t.Errorf("Get() after %d = %d, %v; want %d", ts, got, ok, c.want[i])
				}
			}
		})
	}
}
