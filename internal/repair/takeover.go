package repair

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/txn"
)

// UnstableSessions is how many group sessions of a thread in a row may
// end with UNSTABLE_OFFSET_COMMIT before it looks for the transaction
// holding the group's offsets (Guard.ReportUnstable). sarama ends a session
// when its offset fetch (require_stable, as read_committed needs) still
// finds a transactional offset commit pending after its retries; a live
// transaction ends within the transaction timeout, so sessions ending
// like this again and again mean one whose marker never came.
const UnstableSessions = 3

// takeOverSessions is how many group sessions of a thread in a row must
// end with UNSTABLE_OFFSET_COMMIT before it ends a transaction held open
// on the group's offsets partition by another process of the application
// that is not in the group (endAbandoned). By then (about a minute) the
// process, were it running, would have ended records of its own producer
// (its threads check after every assignment, checkOwnOffsets), or its
// next commit would have.
const takeOverSessions = 3 * UnstableSessions

// ReportUnstable runs on the thread's consume goroutine once
// UnstableSessions sessions in a row ended with UNSTABLE_OFFSET_COMMIT
// (n in all). It logs, at warn level, the transactions open on the
// group's offsets partition (producer id, epoch, start offset, age), with
// the command that ends one an operator judges stuck; the thread's loop
// meanwhile ends any of them that is its own producer's
// (CheckOwnOffsets). From takeOverSessions on it also ends those whose
// producer is gone (endAbandoned). The group rebalances every time a
// member fails this way, so every member of the group stalls until the
// transaction ends.
func (g *Guard) ReportUnstable(n int) {
	ta, ok := g.cfg.Admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return
	}
	part, held, err := openOnOffsetsPartition(ta, g.cfg.Meta, g.cfg.Group)
	if err != nil {
		g.cfg.Log.Warn("the group's offsets are held by an open transaction: every session of the group ends until it does; could not look it up", "sessions", n, "error", err)
		return
	}
	open := make([]string, len(held))
	for i, ap := range held {
		open[i] = fmt.Sprintf("producer id %d epoch %d from offset %d (last write %s ago)",
			ap.ProducerID, ap.ProducerEpoch, ap.CurrentTxnStartOffset, time.Since(time.UnixMilli(ap.LastTimestamp)).Round(time.Second))
	}
	g.cfg.Log.Warn("the group's offsets are held by an open transaction: every session of the group ends until it does",
		"sessions", n, "partition", fmt.Sprintf("%s/%d", OffsetsTopic, part), "open_transactions", strings.Join(open, "; "),
		"fix", fmt.Sprintf("if one stays open past the transaction timeout, end it with kafka-transactions.sh --bootstrap-server ... abort --topic %s --partition %d --start-offset <its start offset>", OffsetsTopic, part))
	if n >= takeOverSessions && len(held) > 0 {
		g.endAbandoned(g.cfg.Ctx, ta, fmt.Sprintf("%s/%d", OffsetsTopic, part), held)
	}
}

// openOnOffsetsPartition returns the partition of __consumer_offsets
// holding group's offsets and the producers with a transaction open on
// it; an error when its leader did not say (OpenTransactions).
func openOnOffsetsPartition(ta sarama.TransactionClusterAdmin, meta MetadataRefresher, group string) (int32, []sarama.ProducerState, error) {
	part, err := offsetsPartition(ta, group)
	if err != nil {
		return 0, nil, err
	}
	var opts []CheckOption
	if meta != nil {
		opts = append(opts, WithMetadata(meta))
	}
	open, err := OpenTransactions(ta, map[string][]int32{OffsetsTopic: {part}}, opts...)
	if err != nil {
		return 0, nil, err
	}
	return part, open[OffsetsTopic][part], nil
}

// CheckOwnOffsets runs on the thread's loop, with no transaction of p
// pending, after every assignment and every ReportUnstable. An offset
// commit of the thread's producer still open on the group's offsets
// partition then lost its marker: no other transaction of the producer
// runs to end it. The member itself fetches no offsets for the partitions
// it keeps across a rebalance, so nothing of it fails, but every member
// that takes a partition of that commit fails its offset fetch as
// unstable, and the group rebalances until the records end: the guard
// ends them as the coordinator completed its last transaction (check), a
// commit over a commit, which keeps the committed offsets. It asks the
// coordinator first (one DescribeTransactions) and the offsets partition
// second (one DescribeProducers); while the last transaction is not
// complete it does nothing, and the next assignment asks again.
func (g *Guard) CheckOwnOffsets(p *txn.Producer) error {
	if !g.checks() {
		return nil
	}
	last, err := g.lastTransaction()
	if err != nil {
		g.cfg.Log.Debug("could not describe this thread's last transaction", "error", err)
		return nil
	}
	if last.State != "CompleteCommit" && last.State != "CompleteAbort" {
		return nil
	}
	open, err := g.openOnOffsets(last.ProducerID)
	if err != nil {
		g.cfg.Log.Debug("could not look for an open offset commit of this thread", "error", err)
		return nil
	}
	if !open {
		return nil
	}
	return g.check(p, true, last)
}

// openOnOffsets reports whether producer id pid holds a transaction open
// on the group's offsets partition, given up on after
// danglingCallTimeout.
func (g *Guard) openOnOffsets(pid int64) (bool, error) {
	ta, ok := g.cfg.Admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return false, nil
	}
	return withTimeout(g.cfg.Ctx, func() (bool, error) {
		_, held, err := openOnOffsetsPartition(ta, g.cfg.Meta, g.cfg.Group)
		return slices.ContainsFunc(held, func(ap sarama.ProducerState) bool { return ap.ProducerID == pid }), err
	}, fmt.Errorf("weir: no answer to describing the producers of %s within %v", OffsetsTopic, danglingCallTimeout))
}

// endAbandoned ends the transactions of held, open on the partition
// where (the group's offsets partition, or a changelog partition a
// restore waits on), that a lost marker left open in a process of the
// application that is gone: for each, the transactional id of its
// producer id is looked up (ListTransactions), and, when abandonedBy says
// they may be, the records it holds open on every partition the
// application writes (where included) are ended as that id's coordinator
// completed its last transaction (EndAbandoned, which takes the id
// over). Kafka Streams leaves such records to an operator's
// kafka-transactions.sh, which can only abort them, one partition at a
// time: committed offsets and output would be dropped, and the group
// would process their input again. Failures are logged; the next report
// tries again. It is safe from any goroutine.
func (g *Guard) endAbandoned(ctx context.Context, ta sarama.TransactionClusterAdmin, where string, held []sarama.ProducerState) {
	if g.cfg.Client == nil || len(held) == 0 {
		return
	}
	live, err := g.groupProcesses()
	if err != nil {
		g.cfg.Log.Info("not ending open transactions of other processes: the group's members are unknown", "error", err)
		return
	}
	for _, ap := range held {
		txs, err := ta.ListTransactions(nil, []int64{ap.ProducerID}, -1)
		if err != nil {
			g.cfg.Log.Info("could not look up the transactional id of an open transaction", "producer_id", ap.ProducerID, "error", err)
			continue
		}
		id := ""
		for _, tx := range txs {
			if tx.ProducerID == ap.ProducerID {
				id = tx.TransactionalID
			}
		}
		if id == "" {
			continue
		}
		last, err := DescribeLast(g.cfg.Admin, id)
		if err != nil {
			g.cfg.Log.Info("could not describe an open transaction", "transactional_id", id, "error", err)
			continue
		}
		why := g.absence.judge(g.cfg.Group, g.cfg.Process, live, g.cfg.Thread.Generation(), time.Now(), id, ap, last)
		if why != "" {
			g.cfg.Log.Debug("leaving an open transaction of another process", "partition", where, "transactional_id", id, "why", why)
			continue
		}
		parts, err := g.heldBy(ap.ProducerID)
		if err != nil {
			g.cfg.Log.Info("not ending an open transaction of another process: the partitions it holds are unknown", "transactional_id", id, "error", err)
			continue
		}
		outcome := "abort"
		if last.State == "CompleteCommit" {
			outcome = "commit"
		}
		g.cfg.Log.Warn("records of a transaction of a process that is not in the group, which its coordinator completed without the marker reaching them, are open; taking its transactional id over to end them with a "+outcome,
			"transactional_id", id, "producer_id", ap.ProducerID, "epoch", ap.ProducerEpoch, "found_on", where, "partitions", danglingNames(parts))
		ectx, cancel := context.WithTimeout(ctx, 2*danglingWait)
		ended, err := EndAbandoned(ectx, g.cfg.Client, id, g.cfg.Group, parts, last)
		cancel()
		switch {
		case err != nil:
			g.cfg.Log.Warn("could not end the open transaction", "transactional_id", id, "error", err)
		case ended:
			g.cfg.Thread.Event("dangling_taken_over")
		default:
			g.cfg.Log.Info("another producer of the transactional id acted meanwhile; its markers end the records", "transactional_id", id)
		}
	}
}

// heldBy returns every partition the application writes (the thread's
// written topics and the group's offsets partition) on which producer id
// pid holds a transaction open; an error when one of them did not say.
func (g *Guard) heldBy(pid int64) ([]DanglingPartition, error) {
	topics := map[string][]int32{}
	for _, topic := range g.cfg.Thread.WrittenTopics() {
		ps, err := g.cfg.Client.Partitions(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return nil, err
		}
		topics[topic] = ps
	}
	part, err := offsetsPartition(g.cfg.Admin, g.cfg.Group)
	if err != nil {
		return nil, err
	}
	topics[OffsetsTopic] = []int32{part}
	open, err := OpenTransactions(g.cfg.Admin, topics, g.options()...)
	if err != nil {
		return nil, err
	}
	var parts []DanglingPartition
	for topic, ps := range open {
		for p, held := range ps {
			for _, ap := range held {
				if ap.ProducerID == pid {
					parts = append(parts, DanglingPartition{Topic: topic, Partition: p, StartOffset: ap.CurrentTxnStartOffset, ProducerEpoch: ap.ProducerEpoch})
				}
			}
		}
	}
	slices.SortFunc(parts, func(a, b DanglingPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return parts, nil
}

// EndAbandonedOn ends the transaction holding a changelog partition
// below its high watermark, which a restore waits on, if a departed
// process of the application left it (endAbandoned). Failures are logged.
func (g *Guard) EndAbandonedOn(ctx context.Context, topic string, partition int32) {
	ta, ok := g.cfg.Admin.(sarama.TransactionClusterAdmin)
	if !ok || g.off.Load() {
		return
	}
	open, err := OpenTransactions(ta, map[string][]int32{topic: {partition}}, g.options()...)
	if err != nil {
		g.cfg.Log.Info("could not look up the transactions open on a changelog partition", "topic", topic, "partition", partition, "error", err)
		return
	}
	g.endAbandoned(ctx, ta, fmt.Sprintf("%s/%d", topic, partition), open[topic][partition])
}

// absence remembers, for each process of the application seen out of the
// group while records of its producers were open, when it was first seen
// so (the generation this thread was then assigned in, and the time), and
// judges with abandonedBy whether the records may be taken over. Safe for
// concurrent use.
type absence struct {
	mu    sync.Mutex
	since map[string]absentMark
}

type absentMark struct {
	gen int32
	at  time.Time
}

// takeOverAbsence is how long a process out of the group in one
// generation must stay out before its records are taken over: longer than
// a process takes to restart and rejoin.
const takeOverAbsence = time.Minute

// judge records what live (the group's processes) says of the process of
// transactional id id at generation gen and time now, then returns
// abandonedBy's answer.
func (a *absence) judge(app, self string, live map[string]bool, gen int32, now time.Time, id string, ap sarama.ProducerState, last LastTransaction) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.since == nil {
		a.since = map[string]absentMark{}
	}
	for p := range a.since {
		if live[p] {
			delete(a.since, p)
		}
	}
	proc, _, ok := client.ParseTransactionalID(app, id)
	if _, seen := a.since[proc]; ok && !seen && !live[proc] {
		a.since[proc] = absentMark{gen, now}
	}
	m, seen := a.since[proc]
	gone := seen && (m.gen < gen || now.Sub(m.at) >= takeOverAbsence)
	return abandonedBy(app, self, live, gone, id, ap, last)
}

// abandonedBy says why the records that ap holds open, in a transaction
// of transactional id id whose coordinator describes last, must not be
// ended by taking the id over (endAbandoned); "" means they may be. They
// may when:
//   - id is a thread's of application app (client.TransactionalID), so
//     every transaction of it commits the group's offsets: a later one
//     would have ended the records, and the last is theirs;
//   - its process is neither this one (whose threads end their own) nor
//     in live, the processes of the group's members, and is gone: out of
//     the group since an earlier generation than the one this thread now
//     runs, or for takeOverAbsence (absence.judge). A process restarting,
//     or rejoining after a session timeout, is out of the group only
//     briefly, and ending its records would fence it;
//   - last is a completed commit or abort of ap's producer id and epoch:
//     the marker never came, and nothing else will bring it. A
//     transaction still in progress ends by itself within its timeout.
func abandonedBy(app, self string, live map[string]bool, gone bool, id string, ap sarama.ProducerState, last LastTransaction) string {
	proc, _, ok := client.ParseTransactionalID(app, id)
	switch {
	case !ok:
		return "not a transactional id of this application"
	case proc == self:
		return "a thread of this process"
	case live[proc]:
		return "its process is in the group"
	case !gone:
		return "its process has been out of the group only briefly"
	case last.ProducerID != ap.ProducerID || int32(last.ProducerEpoch) != ap.ProducerEpoch:
		return fmt.Sprintf("the coordinator describes producer id %d epoch %d", last.ProducerID, last.ProducerEpoch)
	case last.State != "CompleteCommit" && last.State != "CompleteAbort":
		return "its transaction is " + last.State
	}
	return ""
}

// groupProcessWait bounds how long groupProcesses waits for the group to
// be stable, the only state in which the coordinator describes its
// members' subscriptions.
const groupProcessWait = 5 * time.Second

// groupProcesses returns the process ids of the group's members, from
// their subscriptions, once the group is stable (liveProcesses).
func (g *Guard) groupProcesses() (map[string]bool, error) {
	deadline := time.Now().Add(groupProcessWait)
	for {
		gs, err := g.cfg.Admin.DescribeConsumerGroups([]string{g.cfg.Group})
		if err != nil {
			return nil, err
		}
		if len(gs) != 1 || gs[0].Err != sarama.ErrNoError {
			return nil, fmt.Errorf("cannot describe group %s", g.cfg.Group)
		}
		if g := gs[0]; g.State == "Stable" {
			return liveProcesses(g)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("group %s was not stable within %v", g.cfg.Group, groupProcessWait)
		}
		select {
		case <-g.cfg.Ctx.Done():
			return nil, g.cfg.Ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// liveProcesses returns the process ids of the members of g, a stable
// group, from their subscriptions' user data; probes run no process's
// tasks and are left out. A member whose user data this weir cannot read
// (a newer weir during a rolling upgrade, or any other client) may be any
// process: the answer is then an error, and nothing is taken over, since
// counting it as gone could fence a live process.
func liveProcesses(g *sarama.GroupDescription) (map[string]bool, error) {
	live := map[string]bool{}
	for id, m := range g.Members {
		md, err := m.GetMemberMetadata()
		if err != nil || md == nil {
			return nil, fmt.Errorf("member %s (client %s): unreadable subscription", id, m.ClientId)
		}
		if assign.IsProbe(md.UserData) {
			continue
		}
		proc, ok := assign.SubscriptionProcess(md.UserData)
		if !ok {
			return nil, fmt.Errorf("member %s (client %s): subscription user data this weir cannot read, so its process is unknown", id, m.ClientId)
		}
		live[proc] = true
	}
	return live, nil
}

// offsetsPartition returns the partition of __consumer_offsets that holds
// group's offsets, as the broker places it (groupPartition).
func offsetsPartition(admin sarama.ClusterAdmin, group string) (int32, error) {
	ps, err := offsetsPartitions(admin)
	if err != nil {
		return 0, err
	}
	if len(ps) == 0 {
		return 0, fmt.Errorf("the cluster has no %s", OffsetsTopic)
	}
	return groupPartition(group, int32(len(ps))), nil
}

// offsetsPartitions returns the partitions of __consumer_offsets: none
// when the cluster has no such topic (an embedded test broker; a real one
// creates it at the first group's coordinator lookup), an error when the
// admin client could not say.
func offsetsPartitions(admin sarama.ClusterAdmin) ([]int32, error) {
	ds, err := admin.DescribeTopics([]string{OffsetsTopic})
	switch {
	case err != nil:
		return nil, fmt.Errorf("describing %s: %w", OffsetsTopic, err)
	case len(ds) != 1:
		return nil, fmt.Errorf("describing %s: %d topics in the answer", OffsetsTopic, len(ds))
	case ds[0].Err == sarama.ErrUnknownTopicOrPartition:
		return nil, nil
	case ds[0].Err != sarama.ErrNoError:
		return nil, fmt.Errorf("describing %s: %w", OffsetsTopic, ds[0].Err)
	case len(ds[0].Partitions) == 0:
		return nil, fmt.Errorf("describing %s: no partitions in the answer", OffsetsTopic)
	}
	ps := make([]int32, 0, len(ds[0].Partitions))
	for _, pm := range ds[0].Partitions {
		ps = append(ps, pm.ID)
	}
	return ps, nil
}

// groupPartition is Kafka's partition of group among n offsets
// partitions: Utils.abs(group.hashCode()) % n, the absolute value of
// Java's string hash (0 for the smallest int).
func groupPartition(group string, n int32) int32 {
	var h int32
	for _, c := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(c)
	}
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return h % n
}
