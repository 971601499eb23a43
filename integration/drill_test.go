package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// The operations drill (docs/operations.md): one service, run as a team
// runs it, through the procedures of its runbook.

// drillOrder is the service's input: JSON orders keyed by customer.
type drillOrder struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// The service's Avro store of per-customer totals, in three versions: v2
// adds a field with a default (a compatible upgrade), v3 one without
// (refused: it cannot read what v1 and v2 wrote).
const (
	drillV1 = `{"type":"record","name":"CustomerTotal","fields":[{"name":"sum","type":"long"},{"name":"orders","type":"long"}]}`
	drillV2 = `{"type":"record","name":"CustomerTotal","fields":[{"name":"sum","type":"long"},{"name":"orders","type":"long"},{"name":"last","type":"long","default":0}]}`
	drillV3 = `{"type":"record","name":"CustomerTotal","fields":[{"name":"sum","type":"long"},{"name":"orders","type":"long"},{"name":"last","type":"long","default":0},{"name":"region","type":"string"}]}`
)

type drillTotalV1 struct {
	Sum    int64 `avro:"sum"`
	Orders int64 `avro:"orders"`
}

type drillTotalV2 struct {
	Sum    int64 `avro:"sum"`
	Orders int64 `avro:"orders"`
	Last   int64 `avro:"last"`
}

type drillTotalV3 struct {
	Sum    int64  `avro:"sum"`
	Orders int64  `avro:"orders"`
	Last   int64  `avro:"last"`
	Region string `avro:"region"`
}

// drillWindow is the service's window: orders per customer and minute,
// each window's count emitted once, when it closes.
const drillWindow = time.Minute

// drillTopology is the service at a store schema version ("1", "2", "3"):
// orders regrouped by customer; their running sum per customer in the
// Avro store customer-totals, each update written to totals; their count
// per customer and minute, suppressed until the window closes, written
// to windows.
func drillTopology(version, orders, totals, windows string, reg *schema.Client) (*kstream.Builder, error) {
	b := kstream.NewBuilder()
	grouped := b.Stream("orders", orders, serde.String(), serde.JSON[drillOrder]()).
		GroupBy("by-customer", func(_ string, o drillOrder) string { return o.Customer }, serde.String(), serde.JSON[drillOrder]())
	var err error
	switch version {
	case "1":
		err = drillTotals(grouped, reg, drillV1, totals, func(a drillTotalV1, o drillOrder) drillTotalV1 {
			return drillTotalV1{Sum: a.Sum + o.Amount, Orders: a.Orders + 1}
		}, func(a drillTotalV1) int64 { return a.Sum })
	case "2":
		err = drillTotals(grouped, reg, drillV2, totals, func(a drillTotalV2, o drillOrder) drillTotalV2 {
			return drillTotalV2{Sum: a.Sum + o.Amount, Orders: a.Orders + 1, Last: o.Amount}
		}, func(a drillTotalV2) int64 { return a.Sum })
	default:
		err = drillTotals(grouped, reg, drillV3, totals, func(a drillTotalV3, o drillOrder) drillTotalV3 {
			return drillTotalV3{Sum: a.Sum + o.Amount, Orders: a.Orders + 1, Last: o.Amount, Region: "eu"}
		}, func(a drillTotalV3) int64 { return a.Sum })
	}
	if err != nil {
		return nil, err
	}
	grouped.WindowedBy(kstream.Tumbling(drillWindow)).Count("orders-per-minute").
		Suppress("orders-per-minute-final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).To(windows, kstream.WindowedSerde(serde.String(), drillWindow), serde.Int64())
	return b, nil
}

func drillTotals[A any](g *kstream.Grouped[string, drillOrder], reg *schema.Client, text, totals string, add func(A, drillOrder) A, sum func(A) int64) error {
	values, err := serde.Avro[A](serde.AvroConfig{Registry: reg, Schema: text})
	if err != nil {
		return err
	}
	g.Aggregate("customer-totals", func() A { var a A; return a }, func(_ string, o drillOrder, a A) A { return add(a, o) }, values).
		ToStream().MapValues(sum).To(totals, serde.String(), serde.Int64())
	return nil
}

// runDrillChild is the service as a process of its own (runDSLChild with
// WEIR_IT_TOPOLOGY=drill).
func runDrillChild(get func(string) string) (weir.Topology, weir.Config, error) {
	reg, err := schema.New(schema.Config{URL: get("REGISTRY"), RetryTimeout: 20 * time.Second})
	if err != nil {
		return nil, weir.Config{}, err
	}
	top, err := drillTopology(get("VERSION"), get("IN"), get("OUT"), get("WINDOWS"), reg)
	if err != nil {
		return nil, weir.Config{}, err
	}
	return top, weir.Config{Registry: schema.Config{URL: get("REGISTRY"), RetryTimeout: 20 * time.Second}}, nil
}

// drill is the state of TestOperationsDrill: the topics, the orders sent
// so far, and the running instances.
type drill struct {
	t                       *testing.T
	c                       *kafka.Env
	orders, totals, windows string
	weirBin                 string
	customers               []string
	sent                    map[string][]int64 // amounts per customer, in order
	batches                 int
	base                    time.Time             // the start of batch 0's window
	procs                   map[string]*drillProc // by name
}

type drillProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
	env  map[string]string
}

// start starts an instance named name of application app at version,
// with state directory dir (made when empty).
func (d *drill) start(name, app, version, dir string, outputs ...string) *drillProc {
	d.t.Helper()
	if dir == "" {
		dir = d.t.TempDir()
	}
	env := map[string]string{"TOPOLOGY": "drill", "BROKERS": strings.Join(d.c.Brokers, ","), "REGISTRY": d.c.RegistryURL,
		"APP": app, "STATE_DIR": dir, "VERSION": version, "IN": d.orders, "OUT": d.totals, "WINDOWS": d.windows}
	if len(outputs) == 2 {
		env["OUT"], env["WINDOWS"] = outputs[0], outputs[1]
	}
	cmd, done := startDSLChild(d.t, env)
	p := &drillProc{cmd: cmd, done: done, dir: dir, env: env}
	d.procs[name] = p
	return p
}

// stop stops the instance name: with SIGTERM, or SIGKILL when kill.
func (d *drill) stop(name string, kill bool) {
	d.t.Helper()
	p := d.procs[name]
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		d.t.Fatalf("instance %s did not stop within 60 s of %v", name, sig)
	}
	delete(d.procs, name)
}

func (d *drill) stopAll() {
	d.t.Helper()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range d.procs {
			if !yield(n) {
				return
			}
		}
	}) {
		d.stop(name, false)
	}
}

// batch sends three orders per customer, keyed by customer, in the
// batch's own minute (so that each batch closes the windows of the one
// before), and records them.
func (d *drill) batch() {
	d.t.Helper()
	base := d.base.Add(time.Duration(d.batches) * drillWindow)
	var msgs []*sarama.ProducerMessage
	for i := range 3 {
		for j, c := range d.customers {
			amount := int64(d.batches*100 + i*10 + j + 1)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: d.orders, Key: sarama.StringEncoder(c),
				Value: sarama.StringEncoder(fmt.Sprintf(`{"customer":%q,"amount":%d}`, c, amount)), Timestamp: base.Add(time.Duration(i) * time.Second)})
			d.sent[c] = append(d.sent[c], amount)
		}
	}
	kafka.Produce(d.t, d.c, msgs...)
	d.batches++
}

// drillUpdate is one record of the totals topic.
type drillUpdate struct {
	sum            int64
	version, epoch uint64
	replay         bool
}

// readTotals reads topic until every customer's updates that are not
// replays number as many as its orders, and returns each customer's
// updates in order.
func (d *drill) readTotals(topic string, want func(c string) int) map[string][]drillUpdate {
	d.t.Helper()
	var byCustomer map[string][]drillUpdate
	kafka.ReadAll(d.t, d.c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		byCustomer = map[string][]drillUpdate{}
		for _, m := range got {
			n, err := serde.Int64().Deserialize(topic, m.Value)
			if err != nil {
				d.t.Fatal(err)
			}
			u := drillUpdate{sum: n}
			for _, h := range m.Headers {
				switch string(h.Key) {
				case processor.VersionHeader:
					u.version, _ = strconv.ParseUint(string(h.Value), 10, 64)
				case processor.EpochHeader:
					u.epoch, _ = strconv.ParseUint(string(h.Value), 10, 64)
				case processor.ReplayHeader:
					u.replay = true
				}
			}
			byCustomer[string(m.Key)] = append(byCustomer[string(m.Key)], u)
		}
		for _, c := range d.customers {
			if len(fresh(byCustomer[c])) < want(c) {
				return false
			}
		}
		return true
	})
	return byCustomer
}

// fresh returns the updates that are not replays.
func fresh(us []drillUpdate) []drillUpdate {
	var out []drillUpdate
	for _, u := range us {
		if !u.replay {
			out = append(out, u)
		}
	}
	return out
}

// checkTotals checks the totals topic exactly: per customer, the updates
// that are not replays are the running sums of its orders, each once, in
// order; and a sink applying the documented rule (processor.ReplayHeader)
// never moves a customer back and ends at its total.
func (d *drill) checkTotals(step string) {
	d.t.Helper()
	got := d.readTotals(d.totals, func(c string) int { return len(d.sent[c]) })
	for _, c := range d.customers {
		var want []int64
		var sum int64
		for _, a := range d.sent[c] {
			sum += a
			want = append(want, sum)
		}
		var sums []int64
		for _, u := range fresh(got[c]) {
			sums = append(sums, u.sum)
		}
		if !slices.Equal(sums, want) {
			d.t.Fatalf("%s: customer %s's totals %v; want the running sums %v, each once", step, c, sums, want)
		}
		var row *drillUpdate
		for _, u := range got[c] {
			apply := row == nil || (u.replay && row.epoch == u.epoch && row.version < u.version) || (!u.replay && row.version < u.version)
			if !apply {
				continue
			}
			if row != nil && u.sum < row.sum {
				d.t.Fatalf("%s: a sink following the rule moved customer %s back from %d to %d", step, c, row.sum, u.sum)
			}
			row = &u
		}
		if row == nil || row.sum != sum {
			d.t.Fatalf("%s: a sink following the rule ends customer %s at %v; want %d", step, c, row, sum)
		}
	}
}

// checkWindows checks the windows topic exactly: every customer's window
// of each batch in [0, upTo) was emitted once (not counting replays),
// with its three orders.
func (d *drill) checkWindows(step string, upTo int) {
	d.t.Helper()
	keys := kstream.WindowedSerde(serde.String(), drillWindow)
	count := func(got []*sarama.ConsumerMessage) map[string][]int64 {
		out := map[string][]int64{}
		for _, m := range got {
			if slices.ContainsFunc(m.Headers, func(h *sarama.RecordHeader) bool { return string(h.Key) == processor.ReplayHeader }) {
				continue
			}
			w, err := keys.Deserialize(d.windows, m.Key)
			if err != nil {
				d.t.Fatal(err)
			}
			n, err := serde.Int64().Deserialize(d.windows, m.Value)
			if err != nil {
				d.t.Fatal(err)
			}
			k := fmt.Sprintf("%s@%d", w.Key, w.Start.UnixMilli())
			out[k] = append(out[k], n)
		}
		return out
	}
	base := d.base
	want := map[string]bool{}
	for b := range upTo {
		for _, c := range d.customers {
			want[fmt.Sprintf("%s@%d", c, base.Add(time.Duration(b)*drillWindow).UnixMilli())] = true
		}
	}
	var got map[string][]int64
	kafka.ReadAll(d.t, d.c, d.windows, sarama.ReadCommitted, func(ms []*sarama.ConsumerMessage) bool {
		got = count(ms)
		for k := range want {
			if len(got[k]) == 0 {
				return false
			}
		}
		return true
	})
	for k := range want {
		if !slices.Equal(got[k], []int64{3}) {
			d.t.Fatalf("%s: window %s emitted %v; want once, with its 3 orders", step, k, got[k])
		}
	}
}

// weir runs the weir command; it must exit 0.
func (d *drill) weir(args ...string) string {
	d.t.Helper()
	cmd := exec.Command(d.weirBin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("weir %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestOperationsDrill runs one service (JSON orders -> per-customer totals
// in an Avro store checked by the registry, and a one-minute window count
// with suppression) through the drills of docs/operations.md, on the real
// broker and registry, each instance a process of its own, under exactly
// once, and checks the outputs exactly after each step: a first deploy of
// three replicas started together, kill -9, a wiped state directory, a
// rolling compatible upgrade, an incompatible upgrade refused, a fork run
// side by side and rolled back to, a reset replayed into a sink that must
// never move back, and a rescale of the topology with its suppression.
func TestOperationsDrill(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	d := &drill{t: t, c: c, orders: c.Name(t, "orders"), totals: c.Name(t, "totals"), windows: c.Name(t, "windows"),
		sent: map[string][]int64{}, procs: map[string]*drillProc{}, base: time.Now().Add(-24 * time.Hour).Truncate(drillWindow)}
	for i := range 8 {
		d.customers = append(d.customers, fmt.Sprintf("customer-%d", i))
	}
	c.CreateTopic(t, d.orders, 2, nil)
	c.CreateTopic(t, d.totals, 2, nil)
	c.CreateTopic(t, d.windows, 2, nil)
	app := c.Name(t, "drill")
	d.weirBin = filepath.Join(t.TempDir(), "weir")
	if out, err := exec.Command("go", "build", "-o", d.weirBin, "github.com/weirstream/weir/cmd/weir").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/weir: %v\n%s", err, out)
	}
	brokers := strings.Join(c.Brokers, ",")
	reg, err := schema.New(schema.Config{URL: c.RegistryURL})
	if err != nil {
		t.Fatal(err)
	}
	subject := schema.StoreSubject(app, "customer-totals", schema.Value)
	versions := func(subject string) int {
		vs, err := reg.Versions(context.Background(), subject)
		if err != nil {
			t.Fatalf("versions of %s: %v", subject, err)
		}
		return len(vs)
	}

	// 1. First deploy: three replicas started together on a new id.
	for i := range 3 {
		d.start(fmt.Sprint("a", i), app, "1", "")
	}
	d.batch()
	d.checkTotals("first deploy")

	// 2. kill -9 of a replica; it comes back on its state directory.
	dir := d.procs["a0"].dir
	d.stop("a0", true)
	d.batch()
	d.start("a0", app, "1", dir)
	d.batch()
	d.checkTotals("kill -9")
	d.checkWindows("kill -9", 2)

	// 3. A replica's state directory wiped: it restores from the changelogs.
	dir = d.procs["a1"].dir
	d.stop("a1", false)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	d.start("a1", app, "1", dir)
	d.batch()
	d.checkTotals("wiped state")

	// 4. A rolling upgrade to a compatible schema, one replica at a time.
	for i := range 3 {
		name := fmt.Sprint("a", i)
		dir := d.procs[name].dir
		d.stop(name, false)
		d.start(name, app, "2", dir)
	}
	d.batch()
	d.checkTotals("rolling upgrade")
	if n := versions(subject); n != 2 {
		t.Fatalf("rolling upgrade: %s has %d versions, want 2", subject, n)
	}

	// 5. An incompatible upgrade is refused at start, the replicas running on.
	p := d.start("bad", app, "3", "")
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("incompatible upgrade: the instance did not stop within 60 s")
	}
	delete(d.procs, "bad")
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatal("incompatible upgrade: the instance exited 0")
	}
	if n := versions(subject); n != 2 {
		t.Fatalf("incompatible upgrade: %s has %d versions, want 2 (nothing registered)", subject, n)
	}
	d.batch()
	d.checkTotals("incompatible upgrade refused")

	// 6. Fork, run side by side (the fork with outputs of its own), then
	//    roll back to the fork: it takes over the outputs.
	d.stopAll()
	fork := app + "-fork"
	cleanupDrillApp(t, c, fork)
	d.weir("fork", "-brokers", brokers, "-from", app, "-to", fork, "-registry", c.RegistryURL)
	forkTotals, forkWindows := c.Name(t, "fork-totals"), c.Name(t, "fork-windows")
	c.CreateTopic(t, forkTotals, 2, nil)
	c.CreateTopic(t, forkWindows, 2, nil)
	before := map[string]int{}
	for _, c := range d.customers {
		before[c] = len(d.sent[c])
	}
	d.start("a0", app, "2", "")
	d.start("f0", fork, "2", "", forkTotals, forkWindows)
	d.batch()
	d.checkTotals("side by side")
	got := d.readTotals(forkTotals, func(c string) int { return len(d.sent[c]) - before[c] })
	main := d.readTotals(d.totals, func(c string) int { return len(d.sent[c]) })
	for _, c := range d.customers {
		f, m := fresh(got[c]), fresh(main[c])
		var fs, ms []int64
		for _, u := range f {
			fs = append(fs, u.sum)
		}
		for _, u := range m[before[c]:] {
			ms = append(ms, u.sum)
		}
		if !slices.Equal(fs, ms) {
			t.Fatalf("side by side: the fork's totals of %s are %v, the source's %v", c, fs, ms)
		}
	}
	d.stopAll()
	forkDir := t.TempDir()
	d.start("f0", fork, "2", forkDir)
	d.batch()
	d.checkTotals("rollback to the fork")
	d.checkWindows("rollback to the fork", d.batches-1)

	// 7. Reset and replay: the sink rule keeps every customer from moving back.
	d.stopAll()
	out := d.weir("reset", "-brokers", brokers, "-app", fork, "-to-earliest")
	if !strings.Contains(out, "a replay up to") {
		t.Fatalf("reset: %s", out)
	}
	d.start("f0", fork, "2", forkDir)
	d.batch()
	d.checkTotals("reset and replay")
	replays := 0
	for _, us := range d.readTotals(d.totals, func(c string) int { return len(d.sent[c]) }) {
		replays += len(us) - len(fresh(us))
	}
	if replays == 0 {
		t.Fatal("reset and replay: no update marked as a replay")
	}

	// 8. Rescale the topology with its suppression: -check while it runs,
	//    then the rescale, which adds the input's partitions last.
	scaled := fork + "-4"
	cleanupDrillApp(t, c, scaled)
	if out := d.weir("rescale", "-brokers", brokers, "-from", fork, "-to", scaled, "-partitions", "4", "-check", "-registry", c.RegistryURL); !strings.Contains(out, "can be rescaled") {
		t.Fatalf("rescale -check: %s", out)
	}
	d.stopAll()
	d.weir("rescale", "-brokers", brokers, "-from", fork, "-to", scaled, "-partitions", "4", "-registry", c.RegistryURL)
	d.start("s0", scaled, "2", "")
	d.start("s1", scaled, "2", "")
	d.batch()
	d.batch()
	d.checkTotals("rescale")
	d.checkWindows("rescale", d.batches-1)
}

// cleanupDrillApp deletes the internal topics of app when the test passed.
func cleanupDrillApp(t *testing.T, c *kafka.Env, app string) {
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		admin := c.Admin(t)
		topics, err := admin.ListTopics()
		if err != nil {
			return
		}
		for name := range topics {
			if strings.HasPrefix(name, app+"-") {
				_ = admin.DeleteTopic(name)
			}
		}
	})
}
