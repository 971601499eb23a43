package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// rescaleProcedure is the procedure -h prints after the flags.
const rescaleProcedure = `Procedure (docs/operations.md, "Rescale"); until step 4 ends, ID can start again as it was:
  1. weir rescale -check -from ID -to ID2 -partitions N, while ID runs: it changes nothing.
  2. Stop the input's producers, let the application catch up (weir describe: lag 0), then stop every instance.
  3. weir rescale -from ID -to ID2 -partitions N -dry-run.
  4. weir rescale -from ID -to ID2 -partitions N: it copies and verifies the state, then adds
     the partitions to the input topics that lack them; from then on only ID2 can start.
  5. Start the new version with ApplicationID ID2, then the producers; check it (weir describe -app ID2).
  6. Delete ID's topics once ID2 is trusted (weir fork -from ID2 first, if you want a savepoint).

rescale reads each store of ID from its changelog (read_committed: its last
commit), writes every entry to ID2's changelog in the partition Kafka's murmur2
partitioner gives its key (the key part of a window, session or versioned
store's entry), and verifies the copy: per store the number of keys and a
checksum of keys and values, and every key's partition. It copies the stores'
registry subjects (every version, and the level) to ID2's. ID2's input offsets
continue where ID's stopped on the old partitions and start at the beginning of
the new ones. It refuses: while ID has members; a store not declared keyed by
its partitioning key (processor.Topology.KeyedByPartition; the DSL declares all
of its own, suppression buffers and join stores included), or one restored from
an input topic; repartition topics with records ID has not consumed; and,
without -allow-unread, input records ID has not consumed: a record written to
an old partition before the partitions were added belongs to the old
partitioning. Input producers must partition by murmur2 of the key (Kafka's
Java default; sarama's NewMurmur2Partitioner). A store is copied one old
partition at a time, read twice: what is held is that partition's key hashes,
35 to 56 bytes a key, not the values. A rescale stopped before its end (killed,
or failed) is resumed by running the same command again: it writes the new
changelogs it finds again.`

// rescaleKinds are the store types whose changelog keys rescale can
// decode (see partitionKey).
var rescaleKinds = []string{"key-value", "ttl", "window", "session", "versioned"}

// rescalePlan is what a rescale of from to to does.
type rescalePlan struct {
	from, to string
	old, n   int32
	// offsets are the offsets to commit for to, with their metadata.
	offsets map[string]map[int32]int64
	meta    string
	// newStart marks the offsets of new partitions (their log start).
	newStart map[string]map[int32]bool
	stores   []weir.StoreDescriptor // those to copy, global stores left out
	// lagging are the refusals of records not consumed yet (refused
	// unless the plan is a -check).
	lagging []string
	// grow are the input topics that still have the old count: rescale
	// adds their partitions after the state is copied and verified.
	grow   []string
	unread []string // input partitions with unread records (-allow-unread)
}

func rescaleCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlagsApp("rescale", "-from ID -to ID2 -partitions N [-check] [-allow-unread] [-dry-run]", "from", "the application to rescale (required): it must be stopped, except for -check", errOut, &c)
	to := fs.String("to", "", "the new application id (required): it must not have run")
	n := fs.Int("partitions", 0, "the new partition count (required); input topics that still have the old count get the new partitions from rescale, after the state is copied and verified")
	allowUnread := fs.Bool("allow-unread", false, "go on although input partitions hold records -from has not consumed: only when the partitions were added before, and every one of them was written after that")
	dryRun := fs.Bool("dry-run", false, "print what the rescale would do and change nothing")
	check := fs.Bool("check", false, "check, even while -from runs, that it can be rescaled, print what is left to do, and change nothing")
	var registry registryFlags
	registry.add(fs, "schema registry URL (default $WEIR_SCHEMA_REGISTRY_URL): the versions of the stores' subjects are copied to the new id's; required when a store keeps its schemas there")
	flagsUsage := fs.Usage
	fs.Usage = func() {
		flagsUsage()
		fmt.Fprintln(errOut, "\n"+rescaleProcedure)
	}
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *to == "" || *to == c.app {
		return &usageError{"-to is required and must differ from -from"}
	}
	if *n < 1 || *n > 1<<20 {
		return &usageError{"-partitions is required: the new partition count"}
	}
	reg, err := registry.client()
	if err != nil {
		return err
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()

	var d *weir.Descriptor
	if *check {
		d, err = described(cl, c.app)
	} else {
		d, err = stopped(cl, c.app, "the rescale is of its last commit")
	}
	if err != nil {
		return err
	}
	p, err := planRescale(cl, d, *to, int32(*n), *allowUnread, *check)
	if err != nil {
		return err
	}
	if err := checkRescaleTarget(cl, p); err != nil {
		return err
	}
	next := rescaled(d, p)
	subjects := storeSubjects(d, next)
	if err := needRegistry(reg, subjects); err != nil {
		return err
	}
	if *check {
		return printRescaleCheck(cl, out, p, c.app)
	}
	printRescalePlan(out, p, *dryRun)
	printSubjectPlan(out, subjects)
	if *dryRun {
		return nil
	}
	start := time.Now()
	if err := copySubjects(ctx, reg, subjects, out); err != nil {
		return err
	}
	for _, s := range p.stores {
		if err := rescaleStore(ctx, cl, p, s, out); err != nil {
			return err
		}
		rescaleStep("store " + s.Name)
	}
	if err := growInput(cl, p, out); err != nil {
		return err
	}
	rescaleStep("grown")
	if err := commitOffsetsWith(cl, p.to, p.offsets, func(string, int32) string { return p.meta }); err != nil {
		return err
	}
	rescaleStep("committed")
	if err := cl.writeDescriptor(next); err != nil {
		return err
	}
	fmt.Fprintf(out, "done in %v: every store verified (keys, checksum and partition of every key); start %s on the %d partitions\n", time.Since(start).Round(time.Millisecond), p.to, p.n)
	return nil
}

// rescaleStep is called after each step of a rescale that changes the
// cluster ("store NAME", "grown", "committed"); the tests stop the command
// there with SIGKILL, to check that running it again completes it.
var rescaleStep = func(step string) {}

// checkRescaleTarget refuses a new id that has run, as checkFresh does,
// except for what a rescale of the same plan that was stopped before its
// end leaves: a topology topic without a descriptor (writeDescriptor
// creates the topic, then writes it), and committed offsets that are the
// plan's (committed just before the descriptor). Running the same rescale
// again then completes it; rescaleStore writes the changelogs it finds
// again (createCopyChangelog).
func checkRescaleTarget(cl *cluster, p *rescalePlan) error {
	existing, err := cl.admin.ListTopics()
	if err != nil {
		return fmt.Errorf("listing topics: %w", err)
	}
	if _, ok := existing[topics.DescriptorTopic(p.to)]; ok {
		d, err := readDescriptor(cl, p.to)
		if err != nil {
			return err
		}
		if d != nil {
			return refused("%s already has a topology topic (%s): fork only to an application id that never ran", p.to, topics.DescriptorTopic(p.to))
		}
	}
	committed, err := cl.committed(p.to)
	if err != nil {
		return err
	}
	for topic, ps := range committed {
		for part, off := range ps {
			if want, ok := p.offsets[topic][part]; !ok || off != want {
				return refused("group %s already has committed offsets: fork only to an application id that never ran", p.to)
			}
		}
	}
	return nil
}

// growInput adds the new partitions to the input topics that still have
// the old count (p.grow), and waits until the metadata shows them. It runs
// after every store is copied and verified: up to here, -from can start
// again as it was; from here on, only -to can (its changelogs match the
// new count, -from's do not).
func growInput(cl *cluster, p *rescalePlan, out io.Writer) error {
	for _, topic := range p.grow {
		if err := cl.admin.CreatePartitions(topic, p.n, nil, false); err != nil && !errors.Is(err, sarama.ErrInvalidPartitions) {
			return fmt.Errorf("adding partitions to input topic %s (%d to %d): %w; %s can still start as it was", topic, p.old, p.n, err, p.from)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			ps, err := cl.partitions(topic)
			if err == nil && int32(len(ps)) == p.n {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("input topic %s: the metadata does not show %d partitions a minute after adding them (%d, %v)", topic, p.n, len(ps), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Fprintf(out, "  added partitions to input topic %s: %d -> %d (from here on, only %s can start)\n", topic, p.old, p.n, p.to)
	}
	return nil
}

// printRescaleCheck prints the result of -check: what the rescale would
// copy and what is left to do before it.
func printRescaleCheck(cl *cluster, out io.Writer, p *rescalePlan, app string) error {
	fmt.Fprintf(out, "%s can be rescaled from %d to %d partitions as %s:\n", app, p.old, p.n, p.to)
	for _, s := range p.stores {
		fmt.Fprintf(out, "  store %s (%s): each entry to the partition of its key\n", s.Name, s.Type)
	}
	fmt.Fprintln(out, "left to do:")
	g, err := cl.group(app)
	if err != nil {
		return err
	}
	if len(g.Members) > 0 {
		fmt.Fprintf(out, "  - stop every instance of %s (%d member(s) now), once its lag is 0 (weir describe -app %s)\n", app, len(g.Members), app)
	}
	for _, l := range p.lagging {
		fmt.Fprintf(out, "  - %s\n", l)
	}
	fmt.Fprintf(out, "  - weir rescale -from %s -to %s -partitions %d", app, p.to, p.n)
	if len(p.grow) > 0 {
		fmt.Fprintf(out, " (it adds the partitions of %s last)", strings.Join(p.grow, ", "))
	}
	fmt.Fprintf(out, "\n  - start %s with ApplicationID %q\n", p.to, p.to)
	return nil
}

// planRescale checks that d's application can move to n partitions as
// application to and returns what that takes, or the refusal.
//
// With check set (weir rescale -check, which may run while the
// application does), records not consumed yet are not a refusal: they are
// listed in the plan's lagging, as what the real run would refuse.
func planRescale(cl *cluster, d *weir.Descriptor, to string, n int32, allowUnread, check bool) (*rescalePlan, error) {
	p := &rescalePlan{from: d.ApplicationID, to: to, n: n, offsets: map[string]map[int32]int64{}, newStart: map[string]map[int32]bool{}}
	internal := map[string]string{} // topic -> kind
	for _, t := range d.InternalTopics {
		internal[t.Topic] = t.Kind
	}
	var problems []string
	for _, s := range d.Stores {
		switch {
		case s.Type == "global":
			continue // a global store follows its topic, whole, in every instance
		case !s.PartitionKeyed:
			problems = append(problems, fmt.Sprintf("store %q is not declared keyed by its input's partitioning key (processor.Topology.KeyedByPartition): its entries could land in the wrong task", s.Name))
		case internal[s.Changelog] != "changelog":
			problems = append(problems, fmt.Sprintf("store %q restores from input topic %s, whose old partitions keep the old partitioning: give it a changelog of its own first", s.Name, s.Changelog))
		case !slices.Contains(rescaleKinds, s.Type):
			problems = append(problems, fmt.Sprintf("store %q is a %s store, whose entries rescale cannot place", s.Name, s.Type))
		case s.KeyLayout != "":
			if l, err := graph.ParseKeyLayout(s.KeyLayout); err != nil {
				problems = append(problems, fmt.Sprintf("store %q: %v (a descriptor of a later weir?)", s.Name, err))
			} else if !l.IsZero() && s.Type != "key-value" {
				problems = append(problems, fmt.Sprintf("store %q: a %s store with key layout %q, which rescale cannot place", s.Name, s.Type, s.KeyLayout))
			}
		}
		p.stores = append(p.stores, s)
	}
	// The old count: every changelog and repartition topic has it.
	for _, t := range d.InternalTopics {
		ps, err := cl.partitions(t.Topic)
		if err != nil {
			return nil, err
		}
		switch {
		case p.old == 0:
			p.old = int32(len(ps))
		case int32(len(ps)) != p.old:
			problems = append(problems, fmt.Sprintf("%s has %d partitions and other internal topics %d: a fixed partition count cannot be rescaled", t.Topic, len(ps), p.old))
		}
	}
	committed, err := cl.committed(p.from)
	if err != nil {
		return nil, err
	}
	progress, err := cl.progress(p.from)
	if err != nil {
		return nil, err
	}
	p.meta = task.EncodeProgress(progress)
	for _, t := range d.InternalTopics {
		if t.Kind != "repartition" {
			continue
		}
		ps, err := cl.partitions(t.Topic)
		if err != nil {
			return nil, err
		}
		for _, part := range ps {
			if lag, err := unread(cl, t.Topic, part, committed); err != nil {
				return nil, err
			} else if lag > 0 {
				p.lagging = append(p.lagging, fmt.Sprintf("repartition topic %s/%d holds %d record(s) %s has not consumed: start it until its lag is 0, and stop it again", t.Topic, part, lag, p.from))
			}
		}
	}
	for _, s := range d.Sources {
		if s.Subtopology == nil {
			continue // a global store's topic
		}
		ps, err := cl.partitions(s.Topic)
		if err != nil {
			return nil, err
		}
		switch int32(len(ps)) {
		case n:
		case p.old:
			// rescale adds them itself, once the state is copied and
			// verified: until then the application can still start.
			if !slices.Contains(p.grow, s.Topic) {
				p.grow = append(p.grow, s.Topic)
			}
			for part := int32(len(ps)); part < n; part++ {
				ps = append(ps, part)
			}
		default:
			problems = append(problems, fmt.Sprintf("input topic %s has %d partitions, neither the application's %d nor the new %d", s.Topic, len(ps), p.old, n))
			continue
		}
		p.offsets[s.Topic] = map[int32]int64{}
		p.newStart[s.Topic] = map[int32]bool{}
		for _, part := range ps {
			if slices.Contains(p.grow, s.Topic) && part >= p.old {
				p.offsets[s.Topic][part] = 0 // a new partition starts at 0
				p.newStart[s.Topic][part] = true
				continue
			}
			if part < p.old {
				off, ok := committed[s.Topic][part]
				if ok && off >= 0 {
					p.offsets[s.Topic][part] = off
				}
				lag, err := unread(cl, s.Topic, part, committed)
				if err != nil {
					return nil, err
				}
				if lag > 0 {
					p.unread = append(p.unread, fmt.Sprintf("%s/%d (%d)", s.Topic, part, lag))
				}
				continue
			}
			start, _, err := cl.offsets(s.Topic, part)
			if err != nil {
				return nil, err
			}
			p.offsets[s.Topic][part] = start
			p.newStart[s.Topic][part] = true
		}
	}
	if p.old == 0 {
		problems = append(problems, fmt.Sprintf("%s has no internal topics: a stateless application needs no rescale, start it under its own id", p.from))
	} else if n <= p.old {
		problems = append(problems, fmt.Sprintf("-partitions %d is not above the current %d (Kafka cannot remove partitions)", n, p.old))
	}
	if len(p.unread) > 0 && !allowUnread {
		p.lagging = append(p.lagging, fmt.Sprintf("input partitions hold records %s has not consumed: %s; records written before the partitions were added belong to the old partitioning. Let %s catch up before adding partitions, or pass -allow-unread if every one of them was written after", p.from, strings.Join(p.unread, ", "), p.from))
	}
	if !check {
		problems = append(problems, p.lagging...)
	}
	if len(problems) > 0 {
		return nil, refused("%s cannot be rescaled:\n  %s", p.from, strings.Join(problems, "\n  "))
	}
	return p, nil
}

// unread returns how many offsets of topic/p the committed offsets leave
// unconsumed: 0 when they hold no record a read_committed reader gets
// (markers and aborted records only), else all of them, markers included.
func unread(cl *cluster, topic string, p int32, committed map[string]map[int32]int64) (int64, error) {
	start, end, err := cl.offsets(topic, p)
	if err != nil {
		return 0, err
	}
	off, ok := committed[topic][p]
	if !ok || off < start {
		off = start
	}
	if end <= off {
		return 0, nil
	}
	// The offsets left may be transaction markers (a repartition topic
	// ends with the commit marker of the transaction that consumed its
	// last record) or aborted records: nothing a reader gets.
	if none, err := onlyMarkersLeft(cl, topic, p, off, end); err != nil {
		return 0, err
	} else if none {
		return 0, nil
	}
	return end - off, nil
}

// printRescalePlan prints what the rescale does.
func printRescalePlan(out io.Writer, p *rescalePlan, dryRun bool) {
	verb := "rescales"
	if dryRun {
		verb = "would rescale (dry run: nothing changed)"
	}
	fmt.Fprintf(out, "%s %s (%d partitions) to %s (%d partitions):\n", verb, p.from, p.old, p.to, p.n)
	for _, topic := range sortedKeys(p.offsets) {
		for _, part := range sortedKeys(p.offsets[topic]) {
			how := "continues"
			if p.newStart[topic][part] {
				how = "new partition: from its start"
			}
			fmt.Fprintf(out, "  offset %s/%d: %d (%s)\n", topic, part, p.offsets[topic][part], how)
		}
	}
	for _, s := range p.stores {
		fmt.Fprintf(out, "  store %s (%s): %s -> %s, %d partitions\n", s.Name, s.Type, s.Changelog, renameTopic(s.Changelog, p.from, p.to), p.n)
	}
	if len(p.unread) > 0 {
		fmt.Fprintf(out, "  unread input, taken as written after the partitions were added (-allow-unread): %s\n", strings.Join(p.unread, ", "))
	}
}

// rescaleStore copies store s of p.from into its changelog of p.to, each
// entry in the partition of its key, and verifies the copy. It streams
// (see storeCopy.copyPartition): what it holds is one source partition's
// key hashes.
func rescaleStore(ctx context.Context, cl *cluster, p *rescalePlan, s weir.StoreDescriptor, out io.Writer) error {
	start := time.Now()
	layout, err := graph.ParseKeyLayout(s.KeyLayout)
	if err != nil {
		return fmt.Errorf("store %q: %w", s.Name, err)
	}
	target := renameTopic(s.Changelog, p.from, p.to)
	sources, err := cl.partitions(s.Changelog)
	if err != nil {
		return err
	}
	cfgs, err := cl.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: s.Changelog})
	if err != nil {
		return fmt.Errorf("configuration of %s: %w", s.Changelog, err)
	}
	configs := map[string]*string{}
	for _, e := range cfgs {
		if !e.Default && !e.ReadOnly && e.Source == sarama.SourceTopic {
			configs[e.Name] = &e.Value
		}
	}
	if err := createCopyChangelog(cl, target, p.n, configs, out); err != nil {
		return err
	}
	producer, err := newCopyProducer(cl, target)
	if err != nil {
		return err
	}
	defer producer.close()
	rd, err := copyReader(cl)
	if err != nil {
		return err
	}
	defer rd.client.Close()
	c := &storeCopy{s: s, layout: layout, target: target, n: p.n, hash: newKeyHasher(), producer: producer,
		stamp: []sarama.RecordHeader{{Key: []byte(statelog.TimeHeader), Value: []byte{}}}, shared: map[string]raw{}}
	for _, sp := range sources {
		if err := c.copyPartition(ctx, rd, sp); err != nil {
			return err
		}
	}
	if err := c.sendShared(ctx); err != nil {
		return err
	}
	if err := producer.close(); err != nil {
		return err
	}
	want := c.want
	got, err := c.verify(ctx, rd)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("verifying %s: %d keys (checksum %016x) read from %s, %d (%016x) from the copy", target, want.records, want.sum, s.Changelog, got.records, got.sum)
	}
	fmt.Fprintf(out, "  rescaled %s: %d keys into %d partitions of %s in %v, checksum %016x\n", s.Name, c.keys, p.n, target, time.Since(start).Round(time.Millisecond), want.sum)
	return nil
}

// murmur2 is Kafka's murmur2 partitioner, made once: making one seeds a
// random source (for null keys, which it is never given), which costs
// more than the hash; for non-nil keys it keeps no state.
var murmur2 = sarama.NewMurmur2Partitioner("")

// rescalePartition returns the partition of n that a store entry of the
// given type with changelog key k belongs to: the one the runtime's
// murmur2 partitioner gives the key it was partitioned by.
func rescalePartition(kind string, layout graph.KeyLayout, k []byte, n int32) (int32, error) {
	key, err := partitionKey(kind, layout, k)
	if err != nil {
		return 0, err
	}
	return murmur2.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
}

// partitionKey returns the user key in a changelog key of a store of the
// given type (see the layouts in package internal/statelog and
// processor.Versioned).
func partitionKey(kind string, layout graph.KeyLayout, k []byte) ([]byte, error) {
	switch kind {
	case "key-value":
		return layout.PartitionKey(k)
	case "ttl":
		if len(k) == 0 || k[0] != 0x01 {
			return nil, fmt.Errorf("not a TTL store entry")
		}
		return k[1:], nil
	case "window", "session":
		if len(k) == 0 || k[0] != 0x01 {
			return nil, fmt.Errorf("not a %s store entry", kind)
		}
		key, _, err := statelog.DecodeKey(k[1:])
		return key, err
	case "versioned":
		l, n := binary.Uvarint(k)
		if n <= 0 || uint64(len(k)-n) < l {
			return nil, fmt.Errorf("not a versioned store entry")
		}
		return k[n : n+int(l)], nil
	}
	return nil, fmt.Errorf("a %s store's entries cannot be placed", kind)
}

// commitOffsetsWith commits offsets for group app, each with the metadata
// metadata gives it, and checks that the group has them.
func commitOffsetsWith(cl *cluster, app string, offsets map[string]map[int32]int64, metadata func(topic string, p int32) string) error {
	om, err := sarama.NewOffsetManagerFromClient(app, cl.client)
	if err != nil {
		return fmt.Errorf("offsets of group %s: %w", app, err)
	}
	var poms []sarama.PartitionOffsetManager
	for _, topic := range sortedKeys(offsets) {
		for _, p := range sortedKeys(offsets[topic]) {
			pom, err := om.ManagePartition(topic, p)
			if err != nil {
				return fmt.Errorf("offset of %s/%d: %w", topic, p, err)
			}
			pom.MarkOffset(offsets[topic][p], metadata(topic, p))
			poms = append(poms, pom)
		}
	}
	om.Commit()
	// Close waits for the offset manager's next tick, a second per
	// partition one after the other: om.Close releases them all at once.
	// The offsets are read back below.
	for _, pom := range poms {
		pom.AsyncClose()
	}
	if err := om.Close(); err != nil {
		return fmt.Errorf("committing offsets of group %s: %w", app, err)
	}
	got, err := cl.committed(app)
	if err != nil {
		return err
	}
	for topic, ps := range offsets {
		for p, off := range ps {
			if got[topic][p] != off {
				return fmt.Errorf("committing offsets of group %s: %s/%d is at %d, not %d", app, topic, p, got[topic][p], off)
			}
		}
	}
	return nil
}

// rescaled returns the descriptor of p.to: d renamed, with the new
// partition count on its input and internal topics and its stores.
func rescaled(d *weir.Descriptor, p *rescalePlan) *weir.Descriptor {
	next := rename(d, p.from, p.to)
	for i := range next.Sources {
		if next.Sources[i].Subtopology != nil {
			next.Sources[i].Partitions = p.n
		}
	}
	for i := range next.InternalTopics {
		next.InternalTopics[i].Partitions = p.n
	}
	for i := range next.Stores {
		if next.Stores[i].Type != "global" {
			next.Stores[i].Partitions = p.n
		}
	}
	return next
}
