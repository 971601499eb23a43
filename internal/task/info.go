package task

import (
	"sync/atomic"
	"time"
)

// InputInfo describes an input partition for status and metrics; Queue
// and HighWatermark give live values.
type InputInfo struct {
	Topic         string
	Partition     int32
	Committed     int64
	Position      int64
	Queue         *Queue
	HighWatermark func() int64
	Start         int64
}

// StoreInfo is a store partition still restoring; Remaining is live.
type StoreInfo struct {
	Store     string
	Partition int32
	Remaining *atomic.Int64
}

// Info describes a task for status and metrics.
type Info struct {
	ID         string
	Restoring  bool
	StreamTime time.Time
	Inputs     []InputInfo
	Restores   []StoreInfo
}

// Info returns the task's description now.
func (t *Task) Info() Info {
	info := Info{ID: t.name, Restoring: !t.running, StreamTime: t.streamTime}
	for _, p := range t.parts {
		info.Inputs = append(info.Inputs, InputInfo{
			Topic: p.tp.Topic, Partition: p.tp.Partition, Committed: p.committed, Position: p.consumed,
			Queue: p.q, HighWatermark: p.hwm, Start: p.start,
		})
	}
	if !t.running {
		for _, st := range t.stores {
			info.Restores = append(info.Restores, StoreInfo{Store: st.spec.Name, Partition: t.id.Partition, Remaining: &st.remaining})
		}
	}
	return info
}
