package repair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// Guard is the repair on a stream thread's side: the checks that run when
// the thread builds a transactional producer (Build), after every abort
// (AfterAbort) and after every commit (AfterCommit), and the fail-safe
// rule they share. A check that cannot be made is retried, with backoff,
// a warning and a dangling_check_failed event each time, for as long as
// it lasts or until the thread stops, and the thread starts no
// transaction meanwhile: its first commit could commit records the check
// has not yet seen. A check the brokers can never answer (before Kafka
// 3.0, refused by ACLs: cannotEverCheck) turns the checks off for the
// thread's life, with one warning.
//
// A Guard serves one thread. Build, AfterAbort, AfterCommit and
// CheckOwnOffsets run on the thread's loop (or while it is built);
// ReportUnstable and EndAbandonedOn are safe from any goroutine.
type Guard struct {
	cfg GuardConfig
	id  string // the producer's transactional id, "" at least once

	// off is set once the brokers showed they can never answer the
	// checks (too old, the checks refused, or an embedded test broker).
	// A check that fails for a reason that passes never sets it.
	off atomic.Bool
	// lastBefore is what the coordinator said of the transactional id's
	// last transaction before the first InitProducerId of the producer
	// being built; nil once a producer passed its checks. Asked again
	// after an init of the thread's own, it would describe that init's
	// empty transaction, and records of a commit would be aborted.
	lastBefore *LastTransaction
	// wait is the wait before the next attempt of a check that failed
	// (awaitCheckable); 0 after one that was made.
	wait time.Duration
	// offsetsPart is the partition of __consumer_offsets holding the
	// group's offsets, nil until known (AfterCommit); offsetsAsked is
	// when the guard last asked.
	offsetsPart  *txn.Partition
	offsetsAsked time.Time
	// absence tracks the processes whose open records the thread may
	// take over (endAbandoned).
	absence absence
}

// GuardConfig is what a Guard works with. The Guard does not own the
// clients: the thread closes them.
type GuardConfig struct {
	// Ctx ends the Guard's waits and retries: the thread's context,
	// cancelled when it must stop.
	Ctx context.Context
	// Name names the thread in errors ("weir: thread 3: ...").
	Name string
	// Client is the producer's client; its configuration names the
	// transactional id. nil, or Admin nil, turns every check off.
	Client sarama.Client
	// Admin asks the brokers about transactions and producers.
	Admin sarama.ClusterAdmin
	// Meta is the client Admin was made from, refreshed when a
	// partition's leader moves; nil when unknown.
	Meta MetadataRefresher
	// Group is the application's consumer group (its id).
	Group string
	// Process is this process's id (client.TransactionalID's).
	Process string
	// Spare is a partition the thread writes, for an abort that has no
	// other record to carry (abortOver).
	Spare txn.Partition
	// Log receives the Guard's warnings.
	Log *slog.Logger
	// Thread is the thread served.
	Thread Thread
}

// Thread is what a Guard asks of the stream thread it serves.
type Thread interface {
	// WrittenTopics returns every topic the thread's producer writes or
	// has written.
	WrittenTopics() []string
	// Generation returns the generation of the thread's newest
	// assignment (0 before the first), never reset.
	Generation() int32
	// Event counts one weir_producer_events_total{reason} of the thread.
	Event(reason string)
}

// NewGuard returns the Guard of one thread.
func NewGuard(cfg GuardConfig) *Guard {
	g := &Guard{cfg: cfg}
	if cfg.Client != nil {
		g.id = cfg.Client.Config().Producer.Transaction.ID
	}
	return g
}

// Off reports whether the checks are off for the thread's life.
func (g *Guard) Off() bool { return g.off.Load() }

// checks reports whether the guard has anything to check with.
func (g *Guard) checks() bool {
	return g.cfg.Client != nil && g.cfg.Admin != nil && g.id != "" && !g.off.Load()
}

func (g *Guard) stopping() bool { return g.cfg.Ctx.Err() != nil }

func (g *Guard) options() []CheckOption {
	if g.cfg.Meta == nil {
		return nil
	}
	return []CheckOption{WithMetadata(g.cfg.Meta)}
}

// Build initialises a transactional producer (create) and runs the
// checks on it (AfterInit), with a new producer epoch when a check is
// fenced (at most producerInitAttempts in all). Before the first
// InitProducerId moves the id on, once per producer built, it asks the
// coordinator whether the id's last transaction committed, and gives
// every check that answer.
func (g *Guard) Build(create func() (*txn.Producer, error)) (*txn.Producer, error) {
	return g.build(create, g.check)
}

func (g *Guard) build(create func() (*txn.Producer, error), check func(*txn.Producer, bool, LastTransaction) error) (*txn.Producer, error) {
	for attempt := 1; ; attempt++ {
		for g.lastBefore == nil {
			last, err := g.lastTransaction()
			if err == nil {
				g.lastBefore = &last
			} else if err := g.awaitCheckable(err); err != nil {
				return nil, err
			}
		}
		p, err := create()
		if err != nil {
			return nil, err
		}
		if err = check(p, false, *g.lastBefore); err == nil {
			g.lastBefore = nil
			return p, nil
		}
		p.Close()
		// Fenced while ending records a broker left open (a coordinator
		// just restarted may fence the epoch it gave): a new producer
		// epoch tries again.
		if !errors.Is(err, txn.ErrFenced) || attempt >= producerInitAttempts || g.stopping() {
			return nil, err
		}
		g.cfg.Log.Warn("producer fenced while ending records left open; initialising it again", "attempt", attempt, "error", err)
	}
}

// AfterAbort runs the check after the thread's producer p aborted a
// transaction (check): the abort's markers can be lost as any other, and
// the next commit would commit what the abort should have ended.
func (g *Guard) AfterAbort(p *txn.Producer) error {
	return g.check(p, true, LastTransaction{})
}

// check runs after the thread's transactional producer p was
// initialised, which ends any transaction of its transactional id: no
// partition the application writes may then hold an open transaction of
// its producer id. One that does kept records of a transaction the
// coordinator aborted without its marker reaching the partition (seen
// after broker restarts), and the thread's next commit there would commit
// them (DanglingError). The guard ends them with an aborted transaction
// of p over those partitions, one record each, checks again, and fails if
// any is still open after danglingAttempts aborts. At least once there is
// nothing to check.
//
// At producer initialisation no transaction of the id can be in progress
// on a real broker (InitProducerId ended it), so one that is reported as
// such means the broker cannot answer this check (an embedded test
// broker): the checks then turn off. After an abort the check waits up to
// danglingWait for the abort's markers.
//
// Records left open on a partition by the id's last transaction, which
// its coordinator reports committed (last, asked before the producer was
// initialised; LastTransaction.Committed), lost their commit marker: an
// abort would drop output whose input offsets are committed. Those the
// guard ends with a commit instead (CommitOver), which writes no record.
// Right after an abort of its own the thread knows no such thing, and
// aborts; once it has nothing pending it asks the coordinator again
// (CheckOwnOffsets).
func (g *Guard) check(p *txn.Producer, afterAbort bool, last LastTransaction) error {
	if !g.checks() {
		return nil
	}
	topics, err := g.checkedPartitions()
	if err != nil {
		return err
	}
	wait := time.Duration(0)
	if afterAbort {
		wait = danglingWait
	}
	for attempt := 0; ; {
		de, err := g.findDangling(topics, wait)
		wait = danglingWait // after an abort of its own
		if err == nil {
			g.wait = 0
		}
		switch {
		case err != nil && (cannotEverCheck(err) || !afterAbort && attempt == 0 && errors.Is(err, ErrTxnInProgress)):
			g.turnOff(err)
			return nil
		case err != nil:
			if err := g.awaitCheckable(err); err != nil {
				return err
			}
			continue
		case de == nil:
			return nil
		case attempt >= danglingAttempts:
			return fmt.Errorf("weir: %s: still open after %d aborts over them: %w", g.cfg.Name, attempt, de)
		}
		attempt++
		if err := g.end(p, de, last); err != nil {
			return err
		}
		// A cluster that just lost a broker may take a while to show the
		// markers on every partition's leader: look again a little later
		// each time.
		if err := g.sleep(min(danglingBackoff<<(attempt-1), 4*time.Second)); err != nil {
			return fmt.Errorf("weir: %s: stopped while ending open records: %w", g.cfg.Name, err)
		}
	}
}

// checkedPartitions returns the partitions check looks at: every
// partition of the topics the thread writes, and of the group's offsets
// topic. The group's offsets are written in the transaction too: an
// offset commit left open there would make the group's offset fetches
// fail as unstable until a marker comes, and the next commit's marker
// would commit the aborted transaction's offsets.
func (g *Guard) checkedPartitions() (map[string][]int32, error) {
	topics := map[string][]int32{}
	for _, topic := range g.cfg.Thread.WrittenTopics() {
		for {
			ps, err := g.cfg.Client.Partitions(topic)
			if err == nil {
				topics[topic] = ps
				break
			}
			if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				break // a topic that does not exist holds no records
			}
			// Not knowing a topic's partitions is not knowing what they hold.
			if err := g.awaitCheckable(fmt.Errorf("partitions of %s: %w", topic, err)); err != nil {
				return nil, err
			}
		}
	}
	// Asked of the admin client, not the producer's: looking a missing
	// topic up in the producer's metadata (an embedded broker has no
	// __consumer_offsets) disturbs the producer. Only a topic that does
	// not exist is left out: not knowing its partitions (a broker down)
	// is not knowing whether the group's offsets of an aborted or
	// committed transaction are open there, and the check waits.
	for {
		ps, err := offsetsPartitions(g.cfg.Admin)
		if err == nil {
			if len(ps) > 0 {
				topics[OffsetsTopic] = ps
			}
			g.noteOffsets(ps)
			break
		}
		if err := g.awaitCheckable(err); err != nil {
			return nil, err
		}
	}
	return topics, nil
}

// end ends the open records de found: those of the id's last
// transaction, which committed (last), with a commit; the others with an
// abort of p.
func (g *Guard) end(p *txn.Producer, de *DanglingError, last LastTransaction) error {
	committed, aborted := splitDangling(de, last)
	if len(committed) > 0 {
		g.cfg.Log.Warn("partitions hold records of this thread's last transaction, which its coordinator committed, without their commit marker; ending them with a commit",
			"transactional_id", g.id, "producer_id", de.ProducerID, "partitions", danglingNames(committed))
		g.cfg.Thread.Event("dangling_committed")
		if err := CommitOver(g.cfg.Ctx, g.cfg.Client, g.cfg.Admin, g.id, g.cfg.Group, committed); err != nil {
			return fmt.Errorf("weir: %s: ending records of a committed transaction left open on %s: %w", g.cfg.Name, danglingNames(committed), err)
		}
	}
	if len(aborted) > 0 {
		ab := &DanglingError{TransactionalID: de.TransactionalID, ProducerID: de.ProducerID, Partitions: aborted}
		g.cfg.Log.Warn("a partition holds records of an aborted transaction of this thread's producer that the broker left open; ending them with an abort", "error", ab)
		g.cfg.Thread.Event("dangling_aborted")
		if err := abortOver(g.cfg.Ctx, p, aborted, g.cfg.Spare, g.addGroupToTxn); err != nil {
			return fmt.Errorf("weir: %s: %w (ending them: %w)", g.cfg.Name, ab, err)
		}
	}
	return nil
}

// sleep waits d, or returns the context's error when the thread stops
// first.
func (g *Guard) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.cfg.Ctx.Done():
		return g.cfg.Ctx.Err()
	case <-t.C:
		return nil
	}
}

// AfterCommit runs after every commit of p under exactly once, before
// the thread's next transaction can begin: Kafka's coordinator completes
// a transaction without writing its marker to a partition whose leader
// it cannot find (a broker restarting), and a partition of the committed
// transaction may hold its records open (EnsureCommitted). The next
// marker of the thread's producer there would decide them, and an abort
// marker (the thread's next transaction aborting, or the check after it,
// which cannot tell whose records they are) would drop output, changelog
// records and offsets whose commit the thread already relied on. Found
// now, they are known to be the committed transaction's, and end with a
// commit marker (log `records of the transaction just committed are still
// open ...; ending them with a commit`, counted as dangling_committed).
//
// A check that fails for a reason that passes is made again, under the
// Guard's rules (awaitCheckable). A thread that stops leaves the check
// to its producer's next initialisation, which finds the same records and
// the same committed transaction (check): AfterCommit then returns nil.
func (g *Guard) AfterCommit(p *txn.Producer) error {
	if !g.checks() || g.stopping() {
		return nil
	}
	for g.offsetsPart == nil {
		err := g.lookUpOffsetsPartition()
		if err == nil {
			break
		}
		if err := g.awaitCheckable(err); err != nil {
			if g.stopping() {
				return nil
			}
			return err
		}
	}
	written := p.LastCommitted()
	if len(written) == 0 && g.offsetsPart == nil {
		return nil
	}
	wait, waited := time.Millisecond, time.Duration(0)
	for {
		ended, err := EnsureCommitted(g.cfg.Ctx, g.cfg.Client, g.cfg.Admin, g.id, g.cfg.Group, written, g.offsetsPart, g.options()...)
		if len(ended) > 0 {
			g.cfg.Log.Warn("records of the transaction just committed are still open, their commit marker missing; ending them with a commit",
				"transactional_id", g.id, "partitions", danglingNames(ended))
			g.cfg.Thread.Event("dangling_committed")
		}
		var de *DanglingError
		switch {
		case err == nil:
			g.wait = 0
			return nil
		case errors.As(err, &de):
			// Not the committed transaction's: the checks of the next
			// producer initialisation, or after the next abort, decide.
			g.cfg.Log.Warn("records of this thread's producer are open that the transaction just committed did not write; leaving them to the next check", "error", de)
			return nil
		case g.stopping():
			return nil
		case cannotEverCheck(err):
			g.turnOff(err)
			return nil
		case errors.Is(err, ErrTxnInProgress) && waited < danglingWait:
			// The coordinator is still writing the commit's markers.
			_ = g.sleep(wait)
			waited += wait
			wait = min(2*wait, 100*time.Millisecond)
		default:
			if err := g.awaitCheckable(err); err != nil {
				if g.stopping() {
					return nil
				}
				return err
			}
		}
	}
}

// turnOff turns the checks off for the thread's life, once a broker
// showed it can never answer them (cannotEverCheck).
func (g *Guard) turnOff(err error) {
	g.off.Store(true)
	g.cfg.Log.Warn("the brokers cannot answer the checks for records of aborted transactions; this thread will not check", "error", err)
}

// lookUpOffsetsPartition sets offsetsPart, the partition of
// __consumer_offsets holding the group's offsets. A cluster without that
// topic (an embedded test broker) is asked again at most once a minute,
// and the check after each commit goes on without it meanwhile. An admin
// client that cannot say returns the error: the check after a commit
// that wrote offsets must not pass without looking at them.
func (g *Guard) lookUpOffsetsPartition() error {
	if time.Since(g.offsetsAsked) < time.Minute {
		return nil
	}
	ps, err := offsetsPartitions(g.cfg.Admin)
	if err != nil {
		return err
	}
	g.offsetsAsked = time.Now()
	g.noteOffsets(ps)
	return nil
}

// noteOffsets sets offsetsPart from the partitions of __consumer_offsets
// (offsetsPartitions), leaving it as it is when there are none.
func (g *Guard) noteOffsets(ps []int32) {
	if len(ps) > 0 {
		g.offsetsPart = &txn.Partition{Topic: OffsetsTopic, Partition: groupPartition(g.cfg.Group, int32(len(ps)))}
	}
}

// splitDangling sorts the partitions of de into those holding records of
// the id's last transaction, which committed (last), and the others.
func splitDangling(de *DanglingError, last LastTransaction) (committed, aborted []DanglingPartition) {
	for _, dp := range de.Partitions {
		if last.Committed(de.ProducerID, dp) {
			committed = append(committed, dp)
		} else {
			aborted = append(aborted, dp)
		}
	}
	return committed, aborted
}

// danglingNames lists parts as "topic/partition@offset".
func danglingNames(parts []DanglingPartition) []string {
	names := make([]string, len(parts))
	for i, dp := range parts {
		names[i] = fmt.Sprintf("%s/%d@%d", dp.Topic, dp.Partition, dp.StartOffset)
	}
	return names
}

// lastTransaction returns what the coordinator of the transactional id
// says of its last transaction (check): the zero value when the checks
// are off, an error when the coordinator did not answer (the Guard's
// rules: one that can never answer turns the checks off). It is asked
// before the producer's InitProducerId, which completes a transaction
// left in PrepareCommit as a commit.
func (g *Guard) lastTransaction() (LastTransaction, error) {
	if !g.checks() {
		return LastTransaction{}, nil
	}
	last, err := withTimeout(g.cfg.Ctx, func() (LastTransaction, error) { return DescribeLast(g.cfg.Admin, g.id) },
		fmt.Errorf("no answer to describing transactional id %s within %v", g.id, danglingCallTimeout))
	if err == nil || g.stopping() {
		return last, err
	}
	if cannotEverCheck(err) {
		g.turnOff(err)
		return LastTransaction{}, nil
	}
	return LastTransaction{}, err
}

// withTimeout runs call on a goroutine of its own and gives up on it
// after danglingCallTimeout with late (sarama's admin calls take no
// context; a broker that does not implement the calls may not answer
// them at all), or when ctx ends.
func withTimeout[T any](ctx context.Context, call func() (T, error), late error) (T, error) {
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := call()
		done <- answer{v, err}
	}()
	var zero T
	select {
	case a := <-done:
		return a.v, a.err
	case <-time.After(danglingCallTimeout):
		return zero, late
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// cannotEverCheck reports whether err says the brokers can never answer
// the open-transaction checks: a broker before Kafka 3.0, requests
// refused by ACLs, an admin client without the calls.
func cannotEverCheck(err error) bool {
	if errors.Is(err, ErrCannotDescribe) {
		return true
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrUnsupportedVersion, sarama.ErrClusterAuthorizationFailed, sarama.ErrTransactionalIDAuthorizationFailed,
			sarama.ErrTopicAuthorizationFailed, sarama.ErrInvalidRequest:
			return true
		}
	}
	return false
}

// awaitCheckable waits before a failed check is made again: a warning
// and a dangling_check_failed event, then wait, doubled from
// checkFirstWait up to checkMaxWait across failures in a row. It returns
// the context's error when the thread stops meanwhile.
func (g *Guard) awaitCheckable(cause error) error {
	g.wait = min(max(2*g.wait, checkFirstWait), checkMaxWait)
	g.cfg.Thread.Event("dangling_check_failed")
	g.cfg.Log.Warn("could not check for records of aborted transactions; no transaction starts until the check passes",
		"retry_in", g.wait, "error", cause)
	if err := g.sleep(g.wait); err != nil {
		return fmt.Errorf("weir: %s: stopped before the check for records of aborted transactions passed (%w): %w", g.cfg.Name, cause, err)
	}
	return nil
}

// Waits between failed checks (awaitCheckable).
const (
	checkFirstWait = 250 * time.Millisecond
	checkMaxWait   = 10 * time.Second
)

// findDangling is FindDangling, asked again while a transaction of the id
// is still ending (for at most wait): what it returns is the open records
// found, or why it could not tell.
func (g *Guard) findDangling(topics map[string][]int32, wait time.Duration) (*DanglingError, error) {
	deadline := time.Now().Add(wait)
	for {
		_, err := withTimeout(g.cfg.Ctx, func() (struct{}, error) { return struct{}{}, FindDangling(g.cfg.Admin, g.id, topics, g.options()...) },
			fmt.Errorf("weir: no answer to describing transactions and producers within %v", danglingCallTimeout))
		var de *DanglingError
		switch {
		case errors.As(err, &de):
			return de, nil
		case !errors.Is(err, ErrTxnInProgress) || time.Now().After(deadline):
			return nil, err
		}
		if err := g.sleep(100 * time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// danglingCallTimeout bounds one check; a broker answers it in
// milliseconds, and FindDangling's attempts after a leader move take well
// under a second more.
const danglingCallTimeout = 5 * time.Second

// producerInitAttempts is how many times Build initialises a producer
// when it is fenced while ending records left open (check).
const producerInitAttempts = 3

// danglingAttempts is how many transactions check runs to end open
// records before it gives up, the checks between them danglingBackoff
// apart, doubled each time up to 4 s (about 20 s in all): the broker that
// left them open (just restarted) may drop the next marker too, and the
// cluster around it may take seconds to settle.
const danglingAttempts = 8

// danglingBackoff is the wait after the first transaction that ends open
// records before check looks again.
const danglingBackoff = 250 * time.Millisecond

// danglingWait bounds how long check waits for an abort of the thread's
// own to end (its markers to be written) before it looks; a broker writes
// them in milliseconds.
const danglingWait = 5 * time.Second
