package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/processor"
)

// resetPlan is what a reset does.
type resetPlan struct {
	offsets  map[string]map[int32]int64 // source topic -> partition -> new offset
	previous map[string]map[int32]int64 // the group's committed offsets before
	deletes  []string                   // internal topics to delete
	dropped  map[string][]int32         // repartition topics whose group offsets go
	epoch    int64                      // the reset epoch after
	// meta is the offset metadata committed with each new offset that
	// rewinds: where the partition stood (task.Progress.ReplayEnd),
	// so that what the replay writes is marked processor.ReplayHeader,
	// and the last table version, which versions continue after.
	meta map[string]map[int32]string
}

func resetCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("reset", "-app ID (-to-earliest | -to-datetime T | -shift-by N) [-dry-run]", errOut, &c)
	earliest := fs.Bool("to-earliest", false, "rewind every input partition to its log start")
	datetime := fs.String("to-datetime", "", "rewind every input partition to its first record at or after T (RFC 3339, such as 2026-11-30T12:00:00Z)")
	shift := fs.Int64("shift-by", 0, "move every input partition's committed offset by N (negative: back), within its log")
	dryRun := fs.Bool("dry-run", false, "print what the reset would do and change nothing")
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	modes := 0
	var at time.Time
	if *earliest {
		modes++
	}
	if *datetime != "" {
		modes++
		t, err := time.Parse(time.RFC3339, *datetime)
		if err != nil {
			return &usageError{fmt.Sprintf("-to-datetime: %v", err)}
		}
		at = t
	}
	if *shift != 0 {
		modes++
	}
	if modes != 1 {
		return &usageError{"give exactly one of -to-earliest, -to-datetime and -shift-by"}
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()

	d, err := stopped(cl, c.app, "nothing rewinds under a running instance")
	if err != nil {
		return err
	}
	plan, err := planReset(cl, c.app, d, *earliest, at, *shift)
	if err != nil {
		return err
	}
	printPlan(out, c.app, plan, *dryRun)
	if *dryRun {
		return nil
	}
	return applyReset(cl, c.app, d, plan, out)
}

// planReset works out the new offsets and the topics to delete.
func planReset(cl *cluster, app string, d *weir.Descriptor, earliest bool, at time.Time, shift int64) (*resetPlan, error) {
	committed, err := cl.committed(app)
	if err != nil {
		return nil, err
	}
	p := &resetPlan{offsets: map[string]map[int32]int64{}, previous: committed, dropped: map[string][]int32{}, epoch: d.ResetEpoch + 1, meta: map[string]map[int32]string{}}
	progress, err := cl.progress(app)
	if err != nil {
		return nil, err
	}
	for _, s := range d.Sources {
		ps, err := cl.partitions(s.Topic)
		if err != nil {
			return nil, err
		}
		p.offsets[s.Topic] = map[int32]int64{}
		for _, part := range ps {
			start, end, err := cl.offsets(s.Topic, part)
			if err != nil {
				return nil, err
			}
			var off int64
			switch {
			case earliest:
				off = start
			case !at.IsZero():
				off, err = cl.client.GetOffset(s.Topic, part, at.UnixMilli())
				if err != nil {
					return nil, fmt.Errorf("offset of %s/%d at %v: %w", s.Topic, part, at, err)
				}
				if off < 0 { // no record at or after it
					off = end
				}
			default:
				cur, ok := committed[s.Topic][part]
				if !ok || cur < 0 {
					cur = start
				}
				off = min(max(cur+shift, start), end)
			}
			p.offsets[s.Topic][part] = off
			if prev, ok := committed[s.Topic][part]; ok && prev > off {
				if p.meta[s.Topic] == nil {
					p.meta[s.Topic] = map[int32]string{}
				}
				p.meta[s.Topic][part] = task.EncodeProgress(task.Progress{Version: progress.Version, ReplayEnd: prev})
			}
		}
	}
	if bad := foreignTopics(app, d); len(bad) > 0 {
		return nil, refused("the topology descriptor of %s (topic %s) lists internal topics that are not %s's changelog or repartition topics: %s; a reset deletes only \"%s-<store>-changelog\" of the descriptor's stores and \"%s-<name>-repartition\", so nothing was changed",
			app, topics.DescriptorTopic(app), app, strings.Join(bad, ", "), app, app)
	}
	existing, err := cl.admin.ListTopics()
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	for _, t := range d.InternalTopics {
		if _, ok := existing[t.Topic]; ok {
			p.deletes = append(p.deletes, t.Topic)
		}
		if t.Kind == "repartition" {
			for part := range committed[t.Topic] {
				p.dropped[t.Topic] = append(p.dropped[t.Topic], part)
			}
			slices.Sort(p.dropped[t.Topic])
		}
	}
	return p, nil
}

// foreignTopics returns the internal topics of d that a reset of app must
// not delete. The descriptor is read from a topic that whoever may write
// it can forge, so the names it lists are not trusted: a changelog must be
// "<app>-<store>-changelog" of one of d's task stores, a repartition topic
// "<app>-<name>-repartition", and neither may be a source or a sink of
// the topology. Anything else (another application's topic, a ledger)
// makes the whole reset refuse.
func foreignTopics(app string, d *weir.Descriptor) []string {
	changelogs := map[string]bool{}
	for _, s := range d.Stores {
		if s.Type != "global" && s.Changelog == app+"-"+s.Name+"-changelog" {
			changelogs[s.Changelog] = true
		}
	}
	external := map[string]bool{}
	for _, t := range append(slices.Clone(d.Sources), d.Sinks...) {
		external[t.Topic] = true
	}
	var bad []string
	for _, t := range d.InternalTopics {
		ok := false
		switch t.Kind {
		case "changelog":
			ok = changelogs[t.Topic]
		case "repartition":
			name, found := strings.CutPrefix(t.Topic, app+"-")
			name, suffixed := strings.CutSuffix(name, "-repartition")
			ok = found && suffixed && name != ""
		}
		if !ok || external[t.Topic] {
			bad = append(bad, fmt.Sprintf("%s (kind %q)", t.Topic, t.Kind))
		}
	}
	return bad
}

func printPlan(w io.Writer, app string, p *resetPlan, dryRun bool) {
	verb := "resets"
	if dryRun {
		verb = "would reset (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "%s %s:\n", verb, app)
	for _, topic := range sortedKeys(p.offsets) {
		for _, part := range sortedKeys(p.offsets[topic]) {
			before := "none"
			if off, ok := p.previous[topic][part]; ok && off >= 0 {
				before = fmt.Sprint(off)
			}
			replay := ""
			if p.meta[topic][part] != "" {
				replay = fmt.Sprintf(" (a replay up to %s: what is written for its records carries %s)", before, processor.ReplayHeader)
			}
			fmt.Fprintf(w, "  offset %s/%d: %s -> %d%s\n", topic, part, before, p.offsets[topic][part], replay)
		}
	}
	for _, topic := range sortedKeys(p.dropped) {
		fmt.Fprintf(w, "  offsets of %s: removed (partitions %v)\n", topic, p.dropped[topic])
	}
	for _, topic := range p.deletes {
		fmt.Fprintf(w, "  topic %s: deleted (created again, empty, at the next start)\n", topic)
	}
	fmt.Fprintf(w, "  reset epoch: %d (every instance deletes its local state at its next start)\n", p.epoch)
}

// applyReset carries the plan out: offsets, internal topics, then the
// epoch, so that an interrupted reset is repeated whole by running it
// again (the epoch, written last, makes instances wipe their state only
// once everything else is done).
func applyReset(cl *cluster, app string, d *weir.Descriptor, p *resetPlan, out io.Writer) error {
	if err := commitOffsets(cl, app, p.offsets, p.meta); err != nil {
		return err
	}
	for _, topic := range sortedKeys(p.dropped) {
		for _, part := range p.dropped[topic] {
			if err := cl.admin.DeleteConsumerGroupOffset(app, topic, part); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				return fmt.Errorf("removing the offset of %s/%d: %w", topic, part, err)
			}
		}
	}
	for _, topic := range p.deletes {
		if err := cl.admin.DeleteTopic(topic); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return fmt.Errorf("deleting %s: %w", topic, err)
		}
	}
	next := *d
	next.ResetEpoch = p.epoch
	if err := cl.writeDescriptor(&next); err != nil {
		return err
	}
	fmt.Fprintln(out, "done")
	return nil
}

// commitOffsets commits offsets for the (empty) group app, each with its
// metadata in meta (none when absent), then reads them back.
func commitOffsets(cl *cluster, app string, offsets map[string]map[int32]int64, meta map[string]map[int32]string) error {
	om, err := sarama.NewOffsetManagerFromClient(app, cl.client)
	if err != nil {
		return fmt.Errorf("offsets of group %s: %w", app, err)
	}
	var poms []sarama.PartitionOffsetManager
	for topic, ps := range offsets {
		for part, off := range ps {
			pom, err := om.ManagePartition(topic, part)
			if err != nil {
				return fmt.Errorf("offset of %s/%d: %w", topic, part, err)
			}
			// ResetOffset only moves back, MarkOffset only forward (a
			// partition with no committed offset starts at -1).
			if cur, _ := pom.NextOffset(); off > cur {
				pom.MarkOffset(off, meta[topic][part])
			} else {
				pom.ResetOffset(off, meta[topic][part])
			}
			poms = append(poms, pom)
		}
	}
	om.Commit()
	for _, pom := range poms {
		_ = pom.Close()
	}
	if err := om.Close(); err != nil {
		return fmt.Errorf("committing offsets of group %s: %w", app, err)
	}
	got, err := cl.committed(app)
	if err != nil {
		return err
	}
	for topic, ps := range offsets {
		for part, off := range ps {
			if got[topic][part] != off {
				return fmt.Errorf("committing offsets of group %s: %s/%d is at %d, not %d (did an instance start?)", app, topic, part, got[topic][part], off)
			}
		}
	}
	return nil
}

func sortedKeys[K int32 | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
