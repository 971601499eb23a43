package main

// The rescale workload (-workloads rescale, not in the default set) times
// `weir rescale` (cmd/weir) on a stopped application whose key-value store
// holds -rescale-records entries, as an operator runs it.
//
// For each size it fills the store the way the restore workload does: it
// creates the store's changelog (compacted) and the input topic with
// -partitions partitions, loads the changelog with a sarama AsyncProducer
// (distinct 16-byte keys, -value-size values, murmur2), and runs the
// application once, until its restore ends, so that it writes its
// descriptor; then it stops it. The input then grows to
// -rescale-partitions partitions, and per round `weir rescale -from app
// -to app-rN -partitions P` copies the store to a new application id; the
// bench times the command (wall clock, CPU and peak memory of the
// process) and reads the copy time it prints. In round 1 (with -verify)
// it starts the new application and checks that it restores exactly the
// store's entries over the new partitions.
//
// The command is the binary of -weir-cli, or one built from ../cmd/weir
// (the bench runs from its own directory).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirstream/weir/internal/topics"
)

// rescaleResult is one timed `weir rescale`.
type rescaleResult struct {
	// Entries is the store's size: the changelog's distinct keys.
	Entries int64 `json:"entries"`
	From    int32 `json:"from_partitions"`
	To      int32 `json:"to_partitions"`
	Round   int   `json:"round"`
	// Seconds is the command's wall-clock time, from exec to exit: the
	// checks, the copy and the verification of every store, the offsets
	// and the descriptor.
	Seconds float64 `json:"seconds"`
	// CopySeconds is the time the command reports for the copy and its
	// verification ("done in ...").
	CopySeconds float64 `json:"copy_seconds"`
	// Rate is Entries over Seconds.
	Rate float64 `json:"entries_per_second"`
	// CPUSeconds is the command's user and system CPU time; PeakRSSMB its
	// peak resident memory (0 where not measured).
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	// FillRestoreSeconds is the first application's restore of the store
	// (how it got its state); RestoreSeconds the new application's, over
	// the new partitions (0 when not verified).
	FillRestoreSeconds float64 `json:"fill_restore_seconds"`
	RestoreSeconds     float64 `json:"restore_seconds,omitempty"`
	Note               string  `json:"note,omitempty"`
}

func (r *rescaleResult) summary() string {
	s := fmt.Sprintf("rescale %d entries, %d -> %d partitions (round %d): weir rescale took %.2fs (copy %.2fs): %.0f entries/s; %.2f CPU s; peak RSS %.0f MB",
		r.Entries, r.From, r.To, r.Round, r.Seconds, r.CopySeconds, r.Rate, r.CPUSeconds, r.PeakRSSMB)
	if r.RestoreSeconds > 0 {
		s += fmt.Sprintf("; the new application restored them in %.2fs", r.RestoreSeconds)
	}
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

// rescaleTo is the partition count the rescale workload grows to.
func (o *options) rescaleTo() int32 {
	if o.rescalePartitions > 0 {
		return int32(o.rescalePartitions)
	}
	return 2 * o.partitions
}

// doneIn is the line `weir rescale` ends with: "done in 1m2.5s: ...".
var doneIn = regexp.MustCompile(`(?m)^done in ([0-9.hmµns]+):`)

// runRescales runs the rescale workload for every -rescale-records size.
func runRescales(ctx context.Context, o *options, c *cluster, logger *slog.Logger, prefix string, rep *report, progress func(string, ...any)) error {
	to := o.rescaleTo()
	if to <= o.partitions {
		return fmt.Errorf("rescale: -rescale-partitions %d is not above -partitions %d", to, o.partitions)
	}
	cli, err := weirCLI(ctx, o, c, progress)
	if err != nil {
		return err
	}
	conc := o.restoreConcurrency[0]
	for _, n := range o.rescaleRecords {
		app := fmt.Sprintf("%s-rescale-%d", prefix, n)
		input := app + "-in"
		changelog := app + "-" + restoreStore.Name() + "-changelog"
		progress("creating %s (compacted) and %s (%d partitions each), loading %d records into the changelog", changelog, input, o.partitions, n)
		if err := c.createTopicConfig(ctx, changelog, o.partitions, map[string]*string{"cleanup.policy": new("compact")}); err != nil {
			return err
		}
		if err := c.createTopic(ctx, input, o.partitions); err != nil {
			return err
		}
		c.addGroup(app)
		c.addTopic(topics.DescriptorTopic(app))
		load, hwm, err := loadTopic(ctx, o, c, changelog, n, fmt.Sprintf("load-rescale-%d", n), fmt.Sprintf("load changelog %d (sarama AsyncProducer)", n))
		if err != nil {
			return err
		}
		rep.add(load)
		progress("%s", load.summary())
		dir, err := c.stateDir()
		if err != nil {
			return err
		}
		fill, err := runWeirRestore(ctx, o, logger, app, input, dir, restoreFull, conc, n, hwm, 0, false)
		if err != nil {
			return fmt.Errorf("rescale: filling the store: %w", err)
		}
		progress("the application restored its store of %d entries in %.2fs and stopped", n, fill.Seconds)

		if err := c.admin.CreatePartitions(input, to, nil, false); err != nil {
			return fmt.Errorf("rescale: adding partitions to %s: %w", input, err)
		}
		if err := c.waitPartitions(ctx, input, to); err != nil {
			return err
		}
		for round := 1; round <= o.rounds; round++ {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			app2 := fmt.Sprintf("%s-r%d", app, round)
			c.addGroup(app2)
			c.addTopic(topics.DescriptorTopic(app2))
			c.addTopic(app2 + "-" + restoreStore.Name() + "-changelog")
			res, err := runRescaleCLI(ctx, o, cli, app, app2, to)
			if err != nil {
				return err
			}
			res.Entries, res.From, res.Round, res.FillRestoreSeconds = n, o.partitions, round, fill.Seconds
			if res.Seconds > 0 {
				res.Rate = float64(n) / res.Seconds
			}
			if o.verify && round == 1 {
				dir2, err := c.stateDir()
				if err != nil {
					return err
				}
				o2 := *o
				o2.partitions = to
				// runWeirRestore fails unless the new application restores
				// exactly n entries and every one of its store partitions
				// ends its restore.
				check, err := runWeirRestore(ctx, &o2, logger, app2, input, dir2, restoreFull, conc, n, nil, round, false)
				if err != nil {
					return fmt.Errorf("rescale: the new application %s: %w", app2, err)
				}
				res.RestoreSeconds = check.Seconds
				res.Note = "new application restored every entry: " + check.Note
			}
			rep.Rescales = append(rep.Rescales, res)
			progress("%s", res.summary())
		}
	}
	return nil
}

// weirCLI returns the path of the weir command: -weir-cli, or one built
// from ../cmd/weir into a directory the cleanup removes.
func weirCLI(ctx context.Context, o *options, c *cluster, progress func(string, ...any)) (string, error) {
	if o.weirCLI != "" {
		return o.weirCLI, nil
	}
	src, err := filepath.Abs(filepath.Join("..", "cmd", "weir"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		return "", fmt.Errorf("rescale: no %s to build weir from (run the bench from its directory, or pass -weir-cli): %w", src, err)
	}
	dir, err := c.stateDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "weir")
	progress("building %s", src)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("rescale: building weir: %w\n%s", err, out)
	}
	return bin, nil
}

// runRescaleCLI runs `weir rescale` from from to to on n partitions and
// returns its timings.
func runRescaleCLI(ctx context.Context, o *options, cli, from, to string, n int32) (*rescaleResult, error) {
	var out strings.Builder
	cmd := exec.CommandContext(ctx, cli, "rescale", "-brokers", strings.Join(o.brokers, ","), "-from", from, "-to", to, "-partitions", fmt.Sprint(n))
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Start()
	var hwm int64
	if err == nil {
		stop := hwmWatch(cmd.Process.Pid)
		err = cmd.Wait()
		hwm = stop()
	}
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("weir rescale -from %s -to %s: %w\n%s", from, to, err, out.String())
	}
	res := &rescaleResult{To: n, Seconds: took.Seconds()}
	if ps := cmd.ProcessState; ps != nil {
		res.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
		res.PeakRSSMB = float64(peakRSS(ps)) / 1e6
	}
	if hwm > 0 {
		// /proc's figure is the command's own (see hwmWatch).
		res.PeakRSSMB = float64(hwm) / 1e6
	}
	m := doneIn.FindStringSubmatch(out.String())
	if m == nil {
		return nil, fmt.Errorf("weir rescale -from %s -to %s exited 0 without its \"done in\" line:\n%s", from, to, out.String())
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return nil, fmt.Errorf("weir rescale: reading %q: %w", m[0], err)
	}
	res.CopySeconds = d.Seconds()
	return res, nil
}

// waitPartitions waits until the metadata shows topic with n partitions.
func (c *cluster) waitPartitions(ctx context.Context, topic string, n int32) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := c.admin.DescribeTopics([]string{topic})
		if err == nil && len(ds) == 1 && int32(len(ds[0].Partitions)) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not show %d partitions 30 s after adding them (%v)", topic, n, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s's partitions: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeRescaleTable prints the rescale workload's figures.
func (r *report) writeRescaleTable(w io.Writer) error {
	fmt.Fprintln(w, "\nrescales (weir rescale on a stopped application):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "entries\tpartitions\tround\trescale s\tcopy s\tentries/s\tCPU s\tpeak RSS MB\tfill restore s\tnew app restore s\t\n")
	for _, res := range r.Rescales {
		fmt.Fprintf(tw, "%d\t%d -> %d\t%d\t%.2f\t%.2f\t%.0f\t%.2f\t%.0f\t%.2f\t%.2f\t\n", res.Entries, res.From, res.To, res.Round,
			res.Seconds, res.CopySeconds, res.Rate, res.CPUSeconds, res.PeakRSSMB, res.FillRestoreSeconds, res.RestoreSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	for _, res := range r.Rescales {
		if res.Note != "" {
			fmt.Fprintf(w, "  %d entries (round %d): %s\n", res.Entries, res.Round, res.Note)
		}
	}
	_, err := fmt.Fprintln(w, "\nrescale s = the weir rescale process from exec to exit; copy s = what it reports (copy and verification of the stores); CPU and peak RSS = that process's; fill restore s = the old application's restore of the loaded changelog; new app restore s = the new application's restore over the new partitions (round 1, -verify).")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
