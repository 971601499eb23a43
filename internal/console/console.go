// Package console is weir's operator console: a web page that shows a
// running application (its topology, instances and tasks, lag, commits
// and failures, state), served by every instance under /weir/, with the
// JSON API under /weir/api/ that the page reads. The page's HTML, CSS
// and JavaScript are embedded (package embed): it loads nothing from
// anywhere else.
//
// The console reads the App through [Backend]. A sampler goroutine
// (Console.Run) takes a sample of the instance's figures every
// Config.SampleInterval into a ring of Config.HistorySamples samples,
// which gives the rates, the lag sparklines and the restores' progress.
// One instance's cluster view asks the others for their figures over
// HTTP at their advertised addresses, as interactive queries do.
package console

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/metrics"
)

// Config configures a Console; the App fills it from weir.Config.Console,
// defaults applied.
type Config struct {
	// SampleInterval is how often the sampler samples; HistorySamples is
	// how many samples it keeps.
	SampleInterval time.Duration
	HistorySamples int
	// MaxErrors is how many warnings and errors Events keeps.
	MaxErrors int
	// PeerTimeout bounds a request to another instance.
	PeerTimeout time.Duration
	// PeerClient reaches the other instances; its redirects are not
	// followed. PeerScheme is "http" or "https". PeerCredentials, when
	// set, adds this instance's credentials to each request.
	PeerClient      *http.Client
	PeerScheme      string
	PeerCredentials func(*http.Request) error
}

// Bounds of the cluster view: at most maxPeers other instances are asked
// (the others are listed, status "error"), at most peerConcurrency at a
// time; an answer is read up to maxPeerAnswer bytes; one cluster view is
// reused for clusterReuse, so that many pages open at once ask the others
// once.
const (
	maxPeers        = 64
	peerConcurrency = 8
	maxPeerAnswer   = 4 << 20
	clusterReuse    = time.Second
)

// Console serves one App's console. Its methods are safe for concurrent
// use.
type Console struct {
	b      Backend
	cfg    Config
	events *Events
	hist   *ring[*sample]

	mu sync.Mutex
	// ends are the changelog partitions' ends, as the sampler last looked
	// them up; totals the most records each restore was seen to have left.
	// Both hold only what the last sample had.
	ends   map[TopicPartition]int64
	totals map[restoreKey]int64

	clusterMu sync.Mutex
	cluster   *Cluster // the last view, reused for clusterReuse
}

// New returns the console of b. events is where the App's logger records
// its warnings and errors (Events.Capture).
func New(b Backend, cfg Config, events *Events) *Console {
	return &Console{b: b, cfg: cfg, events: events, hist: newRing[*sample](cfg.HistorySamples),
		ends: map[TopicPartition]int64{}, totals: map[restoreKey]int64{}}
}

// Run samples every SampleInterval until ctx ends.
func (c *Console) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.SampleInterval)
	defer tick.Stop()
	for {
		c.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample is what the sampler keeps of one moment: the counters the rates
// are computed from, and the lags.
type sample struct {
	t         time.Time
	threads   map[int]RawThread
	processed map[string]float64 // by task
	written   map[string]float64 // by topic
	committed float64
	aborted   float64
	commits   metrics.Histogram
	lags      map[TopicPartition]int64
	restores  map[restoreKey]int64 // remaining
}

// restoreKey is a store partition.
type restoreKey struct {
	store     string
	partition int32
}

// Sample takes a sample now, and looks up the ends of the changelogs of
// the store partitions held here (bounded by ctx and PeerTimeout).
func (c *Console) Sample(ctx context.Context) {
	raw := c.b.Raw()
	s := newSample(raw)
	c.hist.push(s)
	c.mu.Lock()
	totals := map[restoreKey]int64{}
	for k, rem := range s.restores {
		totals[k] = max(c.totals[k], rem)
	}
	c.totals = totals
	c.mu.Unlock()

	changelogs := map[string]string{}
	for _, st := range c.b.Topology().Stores {
		changelogs[st.Name] = st.Changelog
	}
	var tps []TopicPartition
	for _, cp := range raw.Checkpoints {
		if t := changelogs[cp.Store]; t != "" {
			tps = append(tps, TopicPartition{t, cp.Partition})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PeerTimeout)
	defer cancel()
	ends := map[TopicPartition]int64{}
	if len(tps) > 0 {
		ends = c.b.LogEnds(ctx, tps)
	}
	c.mu.Lock()
	c.ends = ends
	c.mu.Unlock()
}

// newSample keeps what a sample needs of raw.
func newSample(raw Raw) *sample {
	f := raw.Figures
	s := &sample{
		t: raw.Time, threads: map[int]RawThread{}, processed: f.ProcessedByTask, written: f.WrittenByTopic,
		committed: f.TxnByResult["committed"], aborted: f.TxnByResult["aborted"], commits: f.CommitSeconds,
		lags: map[TopicPartition]int64{}, restores: map[restoreKey]int64{},
	}
	for _, th := range raw.Threads {
		s.threads[th.Thread] = th
	}
	for _, p := range inputs(raw) {
		if lag := lagOf(p.raw); lag >= 0 {
			s.lags[TopicPartition{p.raw.Topic, p.raw.Partition}] = lag
		}
	}
	for _, t := range raw.Tasks {
		for _, r := range t.Restores {
			s.restores[restoreKey{r.Store, r.Partition}] = r.Remaining
		}
	}
	return s
}

// input is an input partition and the task reading it ("" not known).
type input struct {
	raw  RawPartition
	task string
}

// inputs returns the input partitions of raw's tasks, then the claimed
// partitions no task has published yet.
func inputs(raw Raw) []input {
	var out []input
	seen := map[TopicPartition]bool{}
	for _, t := range raw.Tasks {
		for _, p := range t.Partitions {
			seen[TopicPartition{p.Topic, p.Partition}] = true
			out = append(out, input{p, t.ID})
		}
	}
	for _, p := range raw.Claimed {
		if !seen[TopicPartition{p.Topic, p.Partition}] {
			out = append(out, input{raw: p})
		}
	}
	return out
}

// lagOf returns p's offset lag, -1 unknown.
func lagOf(p RawPartition) int64 {
	if p.LogEnd < 0 || p.Position < 0 {
		return -1
	}
	return max(p.LogEnd-p.Position, 0)
}
