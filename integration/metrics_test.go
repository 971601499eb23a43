package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// gatedTopology copies in to out through a processor that blocks every
// record until open is called (safe to call more than once). Register
// t.Cleanup(open) after starting the App, so the gate opens before the
// App's own cleanup waits for it.
func gatedTopology(in, out string) (top *processor.Topology, open func()) {
	gate := make(chan struct{})
	var once sync.Once
	top = processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.String())
	p := top.AddProcessor("gate", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		<-gate
		return ctx.Forward(rec)
	}), src)
	top.AddSink("out", out, serde.String(), serde.String(), p)
	return top, func() { once.Do(func() { close(gate) }) }
}

// scrape fetches and parses /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// value returns the sample of family name whose labels include want, or
// false.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLagAndAgeFallToZero: with a backlog produced before the App starts,
// offset lag and the age of the oldest unread record are high at first and
// fall to 0 once the App has caught up; retention headroom is the topic's
// retention minus that age; /readyz turns ready.
func TestLagAndAgeFallToZero(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const retention = time.Hour
	c.CreateTopic(t, in, 1, map[string]string{"retention.ms": fmt.Sprint(retention.Milliseconds())})
	c.CreateTopic(t, out, 1, nil)
	// A backlog whose records are ten minutes old.
	old := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	var msgs []*sarama.ProducerMessage
	for i := range 2000 {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(fmt.Sprint(i)), Timestamp: old})
	}
	kafka.Produce(t, c, msgs...)

	// A processor that is held at first, so the backlog is observed.
	top, open := gatedTopology(in, out)
	cfg := baseConfig(c, app, t)
	cfg.CommitInterval = 100 * time.Millisecond
	a := start(t, top, cfg)
	t.Cleanup(open)
	srv := httptest.NewServer(a.app.Handler())
	defer srv.Close()
	part := map[string]string{"topic": in, "partition": "0"}

	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		fams := scrape(t, srv.URL)
		lag, ok1 := value(fams, "weir_partition_offset_lag", part)
		age, ok2 := value(fams, "weir_partition_oldest_unread_age_seconds", part)
		return ok1 && ok2 && lag > 1000 && age > 9*60, fmt.Sprintf("lag %v (%v), age %v (%v)", lag, ok1, age, ok2)
	})
	fams := scrape(t, srv.URL)
	age, _ := value(fams, "weir_partition_oldest_unread_age_seconds", part)
	headroom, ok := value(fams, "weir_partition_retention_headroom_seconds", part)
	if !ok || headroom < retention.Seconds()-age-5 || headroom > retention.Seconds()-age+5 {
		t.Errorf("retention headroom %v, want %v − %v", headroom, retention.Seconds(), age)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while running", code)
	}

	open()
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		fams := scrape(t, srv.URL)
		lag, _ := value(fams, "weir_partition_offset_lag", part)
		committed, known := value(fams, "weir_partition_committed_offset_lag", part)
		age, _ := value(fams, "weir_partition_oldest_unread_age_seconds", part)
		processed, _ := value(fams, "weir_records_processed_total", map[string]string{"task": "0_0"})
		return lag == 0 && known && committed == 0 && age == 0 && processed == 2000,
			fmt.Sprintf("lag %v, committed lag %v, age %v, processed %v", lag, committed, age, processed)
	})
	fams = scrape(t, srv.URL)
	if busy, _ := value(fams, "weir_thread_seconds_total", map[string]string{"state": "busy"}); busy <= 0 {
		t.Errorf("busy time %v after processing", busy)
	}
	if n, _ := value(fams, "weir_commit_duration_seconds", nil); n == 0 {
		t.Error("no commit was timed")
	}
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "running") {
		t.Errorf("/readyz = %d %q once caught up", code, body)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "stopped") {
		t.Errorf("/healthz after stop = %d %q", code, body)
	}
	// A scrape after the App closed its state must not touch it (it once
	// crashed the process reading a closed Badger database).
	if v, ok := value(scrape(t, srv.URL), "weir_app_state", map[string]string{"state": "stopped"}); !ok || v != 1 {
		t.Errorf("weir_app_state{state=stopped} = %v (%v) after stop", v, ok)
	}
}

// TestBlockedProcessorShowsBackpressure: a processor that blocks makes the
// fetching side's backpressured time grow while the queue stays bounded.
func TestBlockedProcessorShowsBackpressure(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	kafka.Produce(t, c, records(in, 1, 500, 0)...)
	top, open := gatedTopology(in, out)
	cfg := baseConfig(c, app, t)
	cfg.Queue.MaxRecords = 10
	a := start(t, top, cfg)
	t.Cleanup(open) // runs before the App's cleanup, which waits for the gate
	srv := httptest.NewServer(a.app.Handler())
	defer srv.Close()
	// While the processor blocks, the fetcher is backpressured and the
	// thread is busy: both grow by more than a second.
	var firstBP, firstBusy float64
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		fams := scrape(t, srv.URL)
		bp, _ := value(fams, "weir_thread_seconds_total", map[string]string{"state": "backpressured"})
		busy, _ := value(fams, "weir_thread_seconds_total", map[string]string{"state": "busy"})
		if firstBP == 0 {
			firstBP, firstBusy = bp, busy
		}
		return firstBP > 0 && bp > firstBP+1 && busy > firstBusy+1,
			fmt.Sprintf("backpressured %v s (first seen %v), busy %v s (first seen %v)", bp, firstBP, busy, firstBusy)
	})
	for _, ti := range a.app.Tasks() {
		for _, p := range ti.Partitions {
			if p.QueuedRecords > cfg.Queue.MaxRecords {
				t.Errorf("queue holds %d records, bound %d", p.QueuedRecords, cfg.Queue.MaxRecords)
			}
		}
	}
	open()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreMetricsReachZero: restore progress is visible and ends at 0
// records remaining, with the restored records counted.
func TestRestoreMetricsReachZero(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	kafka.Produce(t, c, seqRecords(in, 300, 0, 3)...)
	cfg := baseConfig(c, app, t)
	a := start(t, maxSeqTopology(in, out), cfg)
	waitProcessed(t, c, out, 300, 3)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = t.TempDir() // lost state: a full restore
	b := start(t, maxSeqTopology(in, out), cfg)
	srv := httptest.NewServer(b.app.Handler())
	defer srv.Close()
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		fams := scrape(t, srv.URL)
		restored, _ := value(fams, "weir_restore_records_total", map[string]string{"store": "latest"})
		durations, _ := value(fams, "weir_restore_duration_seconds", map[string]string{"store": "latest"})
		remaining, found := value(fams, "weir_restore_records_remaining", nil)
		running, _ := value(fams, "weir_tasks", map[string]string{"state": "running"})
		return restored >= 300 && durations == 1 && (!found || remaining == 0) && running == 1,
			fmt.Sprintf("restored %v, restores timed %v, remaining %v (%v), running tasks %v", restored, durations, remaining, found, running)
	})
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestHeapBoundedWhileLagGrows: with a blocked processor and a large
// backlog, the live heap stays within the queue bound plus the client's
// own fixed buffers while lag grows. It runs alone (not parallel): it
// measures the process's heap.
func TestHeapBoundedWhileLagGrows(t *testing.T) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	payload := strings.Repeat("v", 4096)
	const total = 20_000 // 80 MB of values
	for i := 0; i < total; i += 2000 {
		var msgs []*sarama.ProducerMessage
		for j := i; j < i+2000; j++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprint(j)), Value: sarama.StringEncoder(payload)})
		}
		kafka.Produce(t, c, msgs...)
	}
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := liveHeap()

	top, open := gatedTopology(in, out)
	cfg := baseConfig(c, app, t)
	cfg.Queue = weir.QueueConfig{MaxRecords: 1000, MaxBytes: 1 << 20}
	a := start(t, top, cfg)
	t.Cleanup(open)
	srv := httptest.NewServer(a.app.Handler())
	defer srv.Close()

	// Two partition queues of 1 MiB each, plus sarama's per-partition
	// channel and fetch buffers (256 records and 1 MiB fetches): far less
	// than the 80 MB backlog.
	const bound = 2<<20 + 48<<20
	var peak uint64
	samples := 0
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		if h := liveHeap(); h > peak {
			peak = h
		}
		samples++
		lag, _ := value(scrape(t, srv.URL), "weir_partition_offset_lag", nil)
		return samples >= 40 && lag > total/2, fmt.Sprintf("%d samples, lag %v", samples, lag)
	})
	growth := int64(peak) - int64(base)
	t.Logf("live heap grew by %.1f MiB over %d samples while %d records waited", float64(growth)/(1<<20), samples, total)
	if growth > bound {
		t.Errorf("live heap grew by %d bytes with the processor blocked; bound %d", growth, bound)
	}
	open()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsLostToRetentionAreCounted: when the committed offset fell
// below the log start while the application was down, the records in
// between are reported lost (log and metric) instead of skipped silently.
func TestRecordsLostToRetentionAreCounted(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, map[string]string{"cleanup.policy": "delete"})
	c.CreateTopic(t, out, 1, nil)
	kafka.Produce(t, c, records(in, 1, 10, 0)...)
	cfg := baseConfig(c, app, t)
	a := start(t, passthrough(in, out), cfg)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		ts := a.app.Tasks()
		return len(ts) == 1 && ts[0].Partitions[0].Committed == 10, fmt.Sprintf("tasks %+v", ts)
	})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// While it is down, 30 more records arrive and retention deletes the
	// first 25 of them.
	kafka.Produce(t, c, records(in, 1, 30, 10)...)
	if err := c.Admin(t).DeleteRecords(in, map[int32]int64{0: 35}); err != nil {
		t.Fatal(err)
	}
	b := start(t, passthrough(in, out), cfg)
	srv := httptest.NewServer(b.app.Handler())
	defer srv.Close()
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		lost, _ := value(scrape(t, srv.URL), "weir_records_lost_total", map[string]string{"topic": in, "partition": "0"})
		return lost == 25, fmt.Sprintf("records lost %v, want 25", lost)
	})
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsDeletedUnderARunningApplication: retention (here
// DeleteRecords) removes records the running application has not fetched
// yet. The fetch fails with OFFSET_OUT_OF_RANGE, which ends the partition's
// consumer; processing must go on from the new log start, and every
// deleted record the application did not process must be counted lost: the
// records processed plus the records counted lost make up the deleted
// range, none silently dropped.
func TestRecordsDeletedUnderARunningApplication(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, map[string]string{"cleanup.policy": "delete"})
	c.CreateTopic(t, out, 1, nil)
	// 4 KiB values: the fetcher stalls a few hundred records in, far from
	// the end, once the queue and the client's buffers are full.
	payload := strings.Repeat("v", 4096)
	const deleted = 3000
	var msgs []*sarama.ProducerMessage
	for i := range deleted {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.StringEncoder(payload)})
	}
	kafka.Produce(t, c, msgs...)

	top, open := gatedTopology(in, out)
	cfg := baseConfig(c, app, t)
	cfg.Queue = weir.QueueConfig{MaxRecords: 50, MaxBytes: 1 << 20}
	a := start(t, top, cfg)
	t.Cleanup(open)
	srv := httptest.NewServer(a.app.Handler())
	defer srv.Close()
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		ts := a.app.Tasks()
		return len(ts) == 1 && ts[0].Partitions[0].QueuedRecords >= 50, fmt.Sprintf("tasks %+v", ts)
	})
	if err := c.Admin(t).DeleteRecords(in, map[int32]int64{0: deleted}); err != nil {
		t.Fatal(err)
	}
	kafka.Produce(t, c, records(in, 1, 10, deleted)...)
	open()

	// The ten records after the deleted range arrive, and the records of
	// the deleted range processed (each once, whatever at least once
	// repeated) plus those counted lost are the whole range.
	var processed int
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		seen := map[string]bool{} // at least once may write a record twice
		after := 0
		for _, m := range got {
			if string(m.Key) == "key-0" {
				after++
			} else {
				seen[string(m.Key)] = true
			}
		}
		processed = len(seen)
		return after == 10
	})
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		lost, _ := value(scrape(t, srv.URL), "weir_records_lost_total", map[string]string{"topic": in, "partition": "0"})
		return int(lost)+processed == deleted, fmt.Sprintf("%v records counted lost, %d processed: want %d in all", lost, processed, deleted)
	})
	if processed == deleted {
		t.Fatalf("all %d records were processed before their deletion: the test did not make the fetch fail", deleted)
	}
	t.Logf("of %d deleted records, %d were processed and %d counted lost", deleted, processed, deleted-processed)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}
