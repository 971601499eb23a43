package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/txn"
)

// This file is the thread's transactional producer: building it (with
// retries while its coordinator moves), rebuilding it, and the thread's
// side of the open-transaction repair, whose checks (package repair's
// Guard) run when a producer is built, after every abort and after every
// commit, and start no transaction until they pass.

// newGuard returns the repair guard of th's producer (repair.Guard), on
// the thread's producer client and the instance's admin client.
func (th *Thread) newGuard() *repair.Guard {
	cfg := repair.GuardConfig{
		Ctx:     th.ctx,
		Name:    fmt.Sprintf("thread %d", th.idx),
		Client:  th.pclient,
		Admin:   th.in.Admin,
		Meta:    th.in.AdminMeta,
		Group:   th.in.ApplicationID,
		Process: th.in.ProcessID,
		Spare:   th.spareTopic(),
		Log:     th.log,
		Thread:  guarded{th},
	}
	return repair.NewGuard(cfg)
}

// guarded is a Thread as its repair.Guard sees it.
type guarded struct{ th *Thread }

func (g guarded) WrittenTopics() []string { return g.th.writtenTopics() }

func (g guarded) Generation() int32 { return g.th.newestGen.Load() }

func (g guarded) Event(reason string) {
	g.th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(g.th.idx), reason).Inc()
}

// spareTopic returns a partition the thread writes (the first of its
// sorted output topics, partition 0), for the guard's aborts.
func (th *Thread) spareTopic() txn.Partition {
	topics := slices.Sorted(maps.Keys(th.in.Layout.Limits))
	if len(topics) == 0 {
		return txn.Partition{}
	}
	return txn.Partition{Topic: topics[0], Partition: 0}
}

// reportUnstable runs on the consume goroutine once
// repair.UnstableSessions sessions in a row ended with
// UNSTABLE_OFFSET_COMMIT: it asks the loop to end an offset commit of its
// own producer left open (repair.Guard.CheckOwnOffsets), and has the
// guard report, and in time end, the others (repair.Guard.ReportUnstable).
func (th *Thread) reportUnstable(n int) {
	th.checkOwn.Store(true)
	th.Wake()
	th.guard.ReportUnstable(n)
}

// EndAbandonedOn implements task.AbandonedEnder: a restore of a changelog
// partition held below its high watermark by an open transaction asks the
// thread to end it if a departed process of the application left it
// (repair.Guard.EndAbandonedOn); the restore keeps waiting either way.
func (th *Thread) EndAbandonedOn(ctx context.Context, topic string, partition int32) {
	th.guard.EndAbandonedOn(ctx, topic, partition)
}

// stoppedMidRepair ends a repair that the thread's stop cut short (a
// producer rebuild, or the open-transaction check after an abort, waiting
// for a broker that is down): no transaction has begun since the last one
// ended, so stopping here loses nothing. The tasks close without a commit,
// their uncommitted state discarded; their next owner, or this instance's
// next start, checks for records left open when it initialises its
// producer, and processes again from the committed offsets. The stop is
// clean: it returns nil.
func (th *Thread) stoppedMidRepair(what string, err error) error {
	th.log.Warn(what+" was cut short by the thread's stop; its tasks close without a commit, and their next owner checks for records left open", "error", err)
	th.resetTasks()
	return nil
}

// sendBurst is how many records the thread's producer holds back before
// it hands them to sarama in a row (txn.Producer.SetBurst), at least
// once; under exactly once the producer batches every record itself and
// the burst does nothing. The loop flushes what a round left held. Measured on word count under exactly
// once against records handed over one by one (single interleaved runs):
// at 10k distinct words with the record cache off, about 5% more lines
// per second at 3–5% less CPU per line; at 1M words with the cache at
// 10 MiB, 4–7% less CPU per line. The channel into sarama holds 256
// records, so a burst never waits for room in it while sarama keeps up.
const sendBurst = 64

// rebuildProducer replaces the producer: a fenced producer is dead, and
// one whose last commit has an unknown outcome must not be reused. The new
// producer is created before the old one is closed, so that a failed
// creation leaves the thread a producer to shut down with (whose calls then
// fail with txn.ErrClosed or its own error, never a panic).
func (th *Thread) rebuildProducer() error {
	p, err := th.initProducer()
	if err != nil && th.stopping() {
		return th.stoppedMidRepair("rebuilding the producer", err)
	}
	if err != nil {
		return fmt.Errorf("weir: thread %d: rebuilding producer: %w", th.idx, err)
	}
	if err := th.producer.Close(); err != nil {
		th.log.Debug("closing the old producer", "error", err)
	}
	th.producer = p
	return nil
}

// initProducer builds a producer (newProducer), again and again while it
// fails for a reason that passes. The transaction coordinator may not
// answer at once: one that just took over from a broker that died, or
// whose previous transaction cannot complete while its partitions lack
// in-sync replicas, answers CONCURRENT_TRANSACTIONS or NOT_COORDINATOR for
// as long as that lasts. Stopping the thread would not end it sooner, so
// the thread tries again, with a warning each time, until the coordinator
// answers, the error is not one that passes, or the thread stops.
func (th *Thread) initProducer() (*txn.Producer, error) {
	wait := rebuildFirstWait
	for attempt := 1; ; attempt++ {
		p, err := th.newProducer()
		if err == nil {
			p.SetBurst(sendBurst)
			return p, nil
		}
		if !initRetriable(err) || th.ctx.Err() != nil {
			return nil, err
		}
		th.log.Warn("the transaction coordinator cannot initialise the producer yet; trying again", "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-th.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, rebuildMaxWait)
	}
}

// initRetriable reports whether initialising a transactional producer
// failed for a reason that passes by itself: the coordinator moving,
// loading or finishing the previous transaction, or no broker reachable
// for now. A fenced producer, refused permissions or a bad configuration
// do not pass.
func initRetriable(err error) bool {
	if errors.Is(err, txn.ErrFenced) {
		return false
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrConcurrentTransactions, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer,
			sarama.ErrOffsetsLoadInProgress, sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
			sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition:
			return true
		}
		return false
	}
	var nerr net.Error
	return errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, io.EOF) || errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED)
}
