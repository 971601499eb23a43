package txn

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/txntest"
)

var offsets = map[string]map[int32]int64{"in": {0: 10}}

func TestCommitClassifiesFailures(t *testing.T) {
	t.Parallel()
	abortable := sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	fatal := sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	cases := []struct {
		name         string
		commitErr    error
		commitStatus sarama.ProducerTxnStatusFlag
		abortErr     error
		want         error
		wantAborts   int
	}{
		{"stale generation is abortable", sarama.ErrIllegalGeneration, abortable, nil, ErrAborted, 1},
		{"fatal status is fenced", sarama.ErrOutOfOrderSequenceNumber, fatal, nil, ErrFenced, 0},
		{"PRODUCER_FENCED is fenced", sarama.ErrProducerFenced, sarama.ProducerTxnFlagInError, nil, ErrFenced, 0},
		{"fenced on abort is fenced", sarama.ErrInvalidTxnState, abortable, sarama.ErrProducerFenced, ErrFenced, 1},
		{"abort failing otherwise is ambiguous", sarama.ErrInvalidTxnState, abortable, sarama.ErrRequestTimedOut, ErrAmbiguous, 1},
		{"unknown outcome is ambiguous", sarama.ErrRequestTimedOut, sarama.ProducerTxnFlagEndTransaction, nil, ErrAmbiguous, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := txntest.New(true)
			f.CommitErr, f.CommitStatus, f.AbortErr = c.commitErr, c.commitStatus, c.abortErr
			p := Wrap(f)
			defer p.Close()
			if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
				t.Fatal(err)
			}
			if p.OpenFor() <= 0 {
				t.Error("OpenFor is 0 with a transaction open")
			}
			err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"})
			if !errors.Is(err, c.want) {
				t.Fatalf("Commit = %v, want %v", err, c.want)
			}
			if !errors.Is(err, c.commitErr) {
				t.Errorf("Commit = %v does not wrap the cause %v", err, c.commitErr)
			}
			if f.Aborted != c.wantAborts {
				t.Errorf("AbortTxn called %d times, want %d", f.Aborted, c.wantAborts)
			}
		})
	}
}

func TestCommitSucceedsAndClosesTheTransaction(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	for range 3 {
		if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	if p.OpenFor() != 0 {
		t.Error("OpenFor is not 0 after the commit")
	}
	// With nothing sent and no offsets there is nothing to commit.
	if err := p.Commit(context.Background(), nil, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
}

func TestAtLeastOnceCommitReportsDeliveryFailure(t *testing.T) {
	t.Parallel()
	f := txntest.New(false)
	f.SendErr = sarama.ErrNotEnoughReplicas
	p := Wrap(f)
	defer p.Close()
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background(), nil, nil); !errors.Is(err, sarama.ErrNotEnoughReplicas) {
		t.Fatalf("Commit = %v, want the delivery error", err)
	}
	// The failure is reported once; the next interval starts clean.
	if err := p.Commit(context.Background(), nil, nil); err != nil {
		t.Fatalf("second Commit = %v", err)
	}
}

func TestSendIntoAFailedTransactionIsClassified(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	f.SendErr = sarama.ErrProducerFenced
	p := Wrap(f)
	defer p.Close()
	p.Send(&sarama.ProducerMessage{Topic: "out"})
	p.flushForTest()
	f.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Send after a failed delivery = %v, want ErrFailed", err)
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Commit after a fenced delivery = %v, want ErrFenced", err)
	}
}

// A failed record makes the transaction fail for good: Send never aborts
// it and begins a new one (which would let the next commit carry input
// offsets whose output was lost), and Commit aborts instead of committing.
func TestFailedTransactionIsStickyUntilCommitAborts(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	f.SendErr = sarama.ErrNotEnoughReplicas
	p := Wrap(f)
	defer p.Close()
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	p.flushForTest()
	f.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	f.SendErr = nil
	for range 3 {
		if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); !errors.Is(err, ErrFailed) || !errors.Is(err, sarama.ErrNotEnoughReplicas) {
			t.Fatalf("Send into the failed transaction = %v, want ErrFailed wrapping the delivery error", err)
		}
		if err := p.Err(); !errors.Is(err, ErrFailed) {
			t.Fatalf("Err = %v, want ErrFailed", err)
		}
	}
	if f.Aborted != 0 {
		t.Fatalf("Send aborted the transaction %d times; only Commit or Abort may end it", f.Aborted)
	}
	err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"})
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit of the failed transaction = %v, want ErrAborted", err)
	}
	if f.Committed != 0 || f.Aborted != 1 {
		t.Fatalf("CommitTxn called %d times and AbortTxn %d times, want 0 and 1", f.Committed, f.Aborted)
	}
	// The abort ends the failure: the next transaction starts clean.
	if err := p.Err(); err != nil {
		t.Fatalf("Err after the abort = %v", err)
	}
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
}

func TestRefusedRecordsAreReportedWithTheirMessage(t *testing.T) {
	t.Parallel()
	for _, transactional := range []bool{false, true} {
		f := txntest.New(transactional)
		f.SendErr = sarama.ErrMessageSizeTooLarge
		p := Wrap(f)
		msg := &sarama.ProducerMessage{Topic: "out", Metadata: "origin"}
		if err := p.Send(msg); err != nil {
			t.Fatal(err)
		}
		p.flushForTest()
		var re *RefusedError
		if err := p.Err(); !errors.As(err, &re) || re.Msg != msg {
			t.Fatalf("transactional=%v: Err = %v, want a *RefusedError for the message", transactional, err)
		}
		refused, n := p.TakeRefused()
		if n != 1 || len(refused) != 1 || refused[0].Msg.Metadata != "origin" {
			t.Fatalf("transactional=%v: TakeRefused = %v, %d", transactional, refused, n)
		}
		err := p.Err()
		if transactional && !errors.Is(err, ErrFailed) {
			t.Errorf("the transaction must stay failed after TakeRefused, Err = %v", err)
		}
		if !transactional && err != nil {
			t.Errorf("at least once, the interval goes on after TakeRefused, Err = %v", err)
		}
		p.Close()
	}
}

func TestClosedProducerReturnsErrClosed(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// sarama panics on a closed producer; these must not reach it.
	if err := p.Abort(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Abort = %v, want ErrClosed", err)
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit = %v, want ErrClosed", err)
	}
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send = %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// flushForTest hands over the records held back and waits for their
// acknowledgements without consuming the error.
func (p *Producer) flushForTest() {
	p.Flush()
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	<-idle
}

// A commit made with a context that is already done, as in a consumer
// group handler's Cleanup, used to fail at random: the wait for the
// committed records' acknowledgements raced the done context, turning a
// committed transaction into ErrAmbiguous.
func TestCommitWithADoneContextSucceeds(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(ctx, offsets, &Group{GroupID: "g"}); err != nil {
			t.Fatalf("commit %d with a done context = %v", i, err)
		}
	}
	if f.Committed != 100 {
		t.Fatalf("CommitTxn called %d times, want 100", f.Committed)
	}
}

func TestCommitRefusesOffsetsWithoutGroup(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	err := p.Commit(context.Background(), offsets, nil)
	if err == nil || isOutcome(err) {
		t.Fatalf("Commit without group = %v, want a plain error", err)
	}
	if f.Committed != 0 || f.Aborted != 0 || p.OpenFor() == 0 {
		t.Fatalf("the transaction was touched: %d commits, %d aborts, open %v", f.Committed, f.Aborted, p.OpenFor())
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatalf("Commit with the group = %v", err)
	}
}

func isOutcome(err error) bool {
	return errors.Is(err, ErrAborted) || errors.Is(err, ErrFenced) || errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrFailed)
}

func TestAbortEndsTheTransaction(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	if err := p.Abort(context.Background()); err != nil || f.Aborted != 0 {
		t.Fatalf("Abort with no transaction = %v, %d AbortTxn calls; want nil and none", err, f.Aborted)
	}
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.Aborted != 1 || p.OpenFor() != 0 || p.Pending() {
		t.Fatalf("after Abort: %d AbortTxn calls, open %v, pending %v", f.Aborted, p.OpenFor(), p.Pending())
	}
	f.AbortErr = sarama.ErrProducerFenced
	f.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Abort(context.Background()); !errors.Is(err, ErrFenced) {
		t.Fatalf("Abort of a fenced producer = %v, want ErrFenced", err)
	}
}

func TestRebuildNeedsAProducerMadeByNew(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	np, err := p.Rebuild()
	if err == nil || np != nil {
		t.Fatalf("Rebuild of a wrapped producer = %v, %v; want an error", np, err)
	}
	// The failed rebuild left p as it was.
	if f.Closed != 0 {
		t.Fatal("the failed Rebuild closed the old producer")
	}
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatalf("Send after a failed Rebuild = %v", err)
	}
}

// A commit that aborts on refused records keeps them for TakeRefused,
// while the next transaction starts clean.
func TestAbortKeepsRefusalsForTakeRefused(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	f.SendErr = sarama.ErrInvalidRecord
	f.Gate = make(chan struct{})
	p := Wrap(f)
	defer p.Close()
	for range 2 {
		if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
			t.Fatal(err)
		}
	}
	close(f.Gate)
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err after the abort = %v; the next transaction must start clean", err)
	}
	refused, n := p.TakeRefused()
	if n != 2 || len(refused) != 2 {
		t.Fatalf("TakeRefused after the abort = %d records (%d), want both", len(refused), n)
	}
	if _, n := p.TakeRefused(); n != 0 {
		t.Fatalf("a second TakeRefused found %d", n)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("TakeRefused with no transaction open failed the next one: %v", err)
	}
}

// TestLastCommittedIsWhatTheCommitWrote: LastCommitted names each
// partition the last committed transaction wrote with the offset of its
// last record there; a transaction that aborts leaves it as it was, and
// the next commit replaces it.
func TestLastCommittedIsWhatTheCommitWrote(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	send := func(topic string, partition int32, offset int64) {
		t.Helper()
		if err := p.Send(&sarama.ProducerMessage{Topic: topic, Partition: partition, Offset: offset}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.LastCommitted(); got != nil {
		t.Fatalf("LastCommitted before any commit = %v, want nil", got)
	}
	send("out", 0, 7)
	send("out", 0, 9)
	send("out", 1, 3)
	send("log", 0, 12)
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	want := map[Partition]int64{{"out", 0}: 9, {"out", 1}: 3, {"log", 0}: 12}
	if got := p.LastCommitted(); !maps.Equal(got, want) {
		t.Fatalf("LastCommitted = %v, want %v", got, want)
	}
	send("out", 0, 10)
	if err := p.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.LastCommitted(); !maps.Equal(got, want) {
		t.Fatalf("LastCommitted after an abort = %v, want the last commit's %v", got, want)
	}
	send("out", 2, 5)
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	if got, want := p.LastCommitted(), (map[Partition]int64{{"out", 2}: 5}); !maps.Equal(got, want) {
		t.Fatalf("LastCommitted after the next commit = %v, want %v", got, want)
	}
}

// Deliveries counted in batches (those waiting behind one, under one
// lock) are each counted once: a commit after thousands of records waits
// for every one and knows each partition's last offset.
func TestCommitCountsEveryDeliveryOfABurst(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	p := Wrap(f)
	defer p.Close()
	want := map[Partition]int64{}
	for i := range 5000 {
		part := int32(i % 3)
		off := int64(i)
		if err := p.Send(&sarama.ProducerMessage{Topic: "out", Partition: part, Offset: off}); err != nil {
			t.Fatal(err)
		}
		want[Partition{"out", part}] = off
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	if got := p.LastCommitted(); !maps.Equal(got, want) {
		t.Fatalf("LastCommitted = %v, want %v", got, want)
	}
}

// With a burst set, Send holds records back and hands them to sarama a
// burst at a time, in the order sent; Flush and Wait hand over what it
// holds, so that nothing waits for a burst to fill.
func TestSendHandsRecordsOverInBursts(t *testing.T) {
	t.Parallel()
	const sendBurst = 8
	f := txntest.New(false)
	p := Wrap(f)
	defer p.Close()
	p.SetBurst(sendBurst)
	var want []*sarama.ProducerMessage
	send := func(n int) {
		for range n {
			m := &sarama.ProducerMessage{Topic: "out", Metadata: len(want)}
			want = append(want, m)
			if err := p.Send(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	sentInOrder := func(n int) {
		t.Helper()
		p.mu.Lock()
		idle := p.idle
		p.mu.Unlock()
		select { // every record sent is acknowledged once handed over
		case <-idle:
		case <-time.After(10 * time.Second):
			t.Fatalf("records still held back or unacknowledged; sarama has %d, want %d", len(f.Sent()), n)
		}
		got := f.Sent()
		if len(got) != n {
			t.Fatalf("sarama has %d records, want %d", len(got), n)
		}
		for i, m := range got {
			if m != want[i] {
				t.Fatalf("record %d handed over is record %v", i, m.Metadata)
			}
		}
	}
	send(sendBurst - 1)
	if got := f.Sent(); len(got) != 0 {
		t.Fatalf("sarama has %d records before the burst filled", len(got))
	}
	send(1)
	sentInOrder(sendBurst)
	send(3)
	p.Flush()
	sentInOrder(sendBurst + 3)
	send(5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v: the records held back were not handed over", err)
	}
	sentInOrder(sendBurst + 8)
	// Without a burst, the default, each record is handed over at once.
	send(2)
	p.SetBurst(0)
	send(1)
	sentInOrder(sendBurst + 11)
	send(1)
	sentInOrder(sendBurst + 12)
}

// Deliveries counted together (waiting behind one another) keep, for each
// partition, the highest offset, whatever their order: runs of one
// partition, a partition coming back after another, offsets out of order.
func TestLastCommittedOverDeliveriesCountedTogether(t *testing.T) {
	t.Parallel()
	f := txntest.New(true)
	f.Gate = make(chan struct{})
	p := Wrap(f)
	defer p.Close()
	for _, r := range []struct {
		topic     string
		partition int32
		offset    int64
	}{{"out", 0, 9}, {"out", 0, 7}, {"out", 1, 3}, {"out", 0, 11}, {"out", 0, 10}, {"log", 1, 4}, {"log", 0, 2}, {"out", 1, 1}} {
		if err := p.Send(&sarama.ProducerMessage{Topic: r.topic, Partition: r.partition, Offset: r.offset}); err != nil {
			t.Fatal(err)
		}
	}
	close(f.Gate)
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	want := map[Partition]int64{{"out", 0}: 11, {"out", 1}: 3, {"log", 1}: 4, {"log", 0}: 2}
	if got := p.LastCommitted(); !maps.Equal(got, want) {
		t.Fatalf("LastCommitted = %v, want %v", got, want)
	}
}
