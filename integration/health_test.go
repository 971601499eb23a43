package integration

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestMissingSinkFailsAtStart: a sink topic that does not exist stops Run
// at start with the topic named, before weir creates any internal topic.
func TestMissingSinkFailsAtStart(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.String())
	rep := top.AddRepartition("by-value", serde.String(), serde.String(), src)
	top.AddSink("out", out, serde.String(), serde.String(), rep)
	inst := start(t, top, baseConfig(c, app, t))

	err := waitRun(t, inst, 60*time.Second)
	var mt *weir.MissingTopicError
	if !errors.As(err, &mt) || !slices.Equal(mt.Topics, []string{out}) {
		t.Fatalf("Run = %v, want a MissingTopicError naming %s", err, out)
	}
	topics, err := c.Admin(t).ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	for name := range topics {
		if strings.HasPrefix(name, app) {
			t.Errorf("topic %s was created although the start failed", name)
		}
	}
}

// TestDeletedSinkFailsWithinTheBound: a sink topic deleted while the App
// runs makes every transaction abort. The App reports itself degraded
// (/readyz 503, "degraded") while it lasts, and fails once
// MaxConsecutiveAborts transactions have aborted in a row, naming the
// cause, instead of aborting forever while looking healthy. Until then the
// last-commit gauge stops advancing.
func TestDeletedSinkFailsWithinTheBound(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	cfg := eosFailureConfig(c, app, t)
	cfg.MaxConsecutiveAborts = 4
	inst := start(t, passthrough(in, out), cfg)
	srv := httptest.NewServer(inst.app.Handler())
	defer srv.Close()

	kafka.Produce(t, c, records(in, 5, 20, 0)...)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, app, in)
		return off == 100, fmt.Sprintf("committed offset %d", off)
	})
	fams := scrape(t, srv.URL)
	if ts, ok := value(fams, "weir_last_commit_timestamp_seconds", map[string]string{"thread": "0"}); !ok || time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Fatalf("weir_last_commit_timestamp_seconds = %v (%v), want a recent time", ts, ok)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the deletion = %d %s", code, body)
	}

	if err := c.Admin(t).DeleteTopic(out); err != nil {
		t.Fatalf("deleting %s: %v", out, err)
	}
	kafka.Produce(t, c, records(in, 5, 20, 20)...)

	degraded := false
	var runErr error
	kafka.Eventually(t, 180*time.Second, 50*time.Millisecond, func() (bool, string) {
		select {
		case runErr = <-inst.done:
			return true, ""
		default:
		}
		if code, body := get(t, srv.URL+"/readyz"); code == http.StatusServiceUnavailable && strings.HasPrefix(body, "degraded") {
			degraded = true
		}
		s, _ := inst.app.State()
		return false, fmt.Sprintf("state %v, degraded seen: %v", s, degraded)
	})
	if !degraded {
		t.Error("/readyz never reported degraded while transactions aborted")
	}
	if runErr == nil || !strings.Contains(runErr.Error(), "aborted in a row") || !strings.Contains(runErr.Error(), out) {
		t.Fatalf("Run = %v, want the abort bound with the sink topic named", runErr)
	}
	if off := committedOffset(t, c, app, in); off != 100 {
		t.Errorf("committed offset %d after the sink was deleted, want 100", off)
	}
}

// TestLagIsKnownFromAssignment: with a backlog on every partition and the
// processor held on its first record, the lag of every assigned partition
// is exported, and right from the first scrape that shows it, before any
// record of it is processed (internal/stream's
// TestClaimedPartitionsReportLagBeforeTheirTask covers the partition
// whose task has not started).
func TestLagIsKnownFromAssignment(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions, perPartition = 3, 50
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	var msgs []*sarama.ProducerMessage
	for _, key := range sentinelKeys(partitions) { // one key per partition
		for range perPartition {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("v")})
		}
	}
	kafka.Produce(t, c, msgs...)
	top, open := gatedTopology(in, out)
	a := start(t, top, baseConfig(c, app, t))
	t.Cleanup(open)
	srv := httptest.NewServer(a.app.Handler())
	defer srv.Close()
	kafka.Eventually(t, 60*time.Second, 5*time.Millisecond, func() (bool, string) {
		fams := scrape(t, srv.URL)
		var lags []string
		ok := true
		for p := range partitions {
			lag, found := value(fams, "weir_partition_offset_lag", map[string]string{"topic": in, "partition": fmt.Sprint(p)})
			if found && lag != perPartition {
				// Nothing is processed while the gate is shut: a lag
				// shown must be the whole backlog, never a 0 from a
				// log end not fetched yet.
				t.Fatalf("partition %d: lag %v shown while %d records wait", p, lag, perPartition)
			}
			lags = append(lags, fmt.Sprintf("%d: %v (%v)", p, lag, found))
			ok = ok && found && lag == perPartition
		}
		return ok, "lags " + strings.Join(lags, ", ")
	})
	open()
}
