package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

func size(s string) int { return len(s) }

func TestFIFOAndAccounting(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 3, Bytes: 100}, size, nil)
	ctx := context.Background()
	for _, s := range []string{"a", "bb", "ccc"} {
		if err := q.Push(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := q.Len(); n != 3 || b != 6 {
		t.Fatalf("Len = %d items, %d bytes; want 3, 6", n, b)
	}
	for _, want := range []string{"a", "bb", "ccc"} {
		if got, _ := q.Peek(); got != want {
			t.Fatalf("Peek = %q, want %q", got, want)
		}
		if got, ok := q.Pop(); !ok || got != want {
			t.Fatalf("Pop = %q, %v; want %q", got, ok, want)
		}
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on empty queue reported an item")
	}
}

// waitBlocked polls until a Push has been waiting, bounded.
func pushInBackground(q *Queue[string], v string) chan error {
	done := make(chan error, 1)
	go func() { done <- q.Push(context.Background(), v) }()
	return done
}

func TestPushBlocksOnItemLimitUntilPop(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 2, Bytes: 100}, size, nil)
	q.Push(context.Background(), "a")
	q.Push(context.Background(), "b")
	done := pushInBackground(q, "c")
	select {
	case err := <-done:
		t.Fatalf("Push into a full queue returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n, _ := q.Len(); n != 2 {
		t.Fatalf("full queue holds %d items, want 2", n)
	}
	q.Pop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := q.Len(); n != 2 {
		t.Fatalf("after pop and push: %d items, want 2", n)
	}
	if q.Blocked() <= 0 {
		t.Error("blocked time not recorded")
	}
}

func TestPushBlocksOnByteLimit(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 100, Bytes: 5}, size, nil)
	q.Push(context.Background(), "abcd")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := q.Push(ctx, "ef"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Push past the byte limit = %v, want deadline exceeded", err)
	}
	if _, b := q.Len(); b != 4 {
		t.Fatalf("bytes = %d, want 4", b)
	}
}

func TestOversizedItemAdmittedWhenEmpty(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 10, Bytes: 2}, size, nil)
	if err := q.Push(context.Background(), "larger than the limit"); err != nil {
		t.Fatal(err)
	}
	if n, _ := q.Len(); n != 1 {
		t.Fatal("oversized item not queued")
	}
}

func TestCloseWakesPush(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 1, Bytes: 100}, size, nil)
	q.Push(context.Background(), "a")
	done := pushInBackground(q, "b")
	q.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Push after Close = %v, want ErrClosed", err)
	}
	if n, b := q.Len(); n != 0 || b != 0 {
		t.Fatalf("closed queue holds %d items, %d bytes", n, b)
	}
	select {
	case <-q.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	q.Close() // twice is fine
}

func TestNotifyOnPush(t *testing.T) {
	t.Parallel()
	calls := 0
	q := New(Limits{Items: 4, Bytes: 100}, size, func() { calls++ })
	q.Push(context.Background(), "a")
	q.Push(context.Background(), "b")
	if calls != 2 {
		t.Fatalf("notify called %d times, want 2", calls)
	}
}

// A blocked Push resumes once half the queue is free, not at the first
// Pop: the fetching goroutine is woken once per half queue, not once per
// record.
func TestBlockedPushResumesAtHalf(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 10, Bytes: 1000}, size, nil)
	for range 10 {
		if err := q.Push(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
	}
	done := pushInBackground(q, "y")
	waitForBlockedPush(t, q)
	for i := range 4 {
		q.Pop()
		if n, _ := q.Len(); len(q.space) != 0 || n != 10-i-1 {
			t.Fatalf("a Pop leaving %d of 10 items let the waiting Push go on (%d items queued)", 10-i-1, n)
		}
	}
	q.Pop() // 5 of 10 left: half free
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := q.Len(); n != 6 {
		t.Fatalf("after the resumed Push: %d items, want 6", n)
	}
}

// An item that does not fit at the half mark waits on and goes in once
// the queue has room for it: the mark never strands a Push.
func TestLargeItemResumesBelowTheMark(t *testing.T) {
	t.Parallel()
	q := New(Limits{Items: 10, Bytes: 10}, size, nil)
	for range 10 {
		if err := q.Push(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
	}
	done := pushInBackground(q, "yyyyyyyy") // 8 bytes: fits once 2 are left
	waitForBlockedPush(t, q)
	for range 8 {
		q.Pop()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, b := q.Len(); n != 3 || b != 10 {
		t.Fatalf("Len = %d items, %d bytes; want 3, 10", n, b)
	}
}

// waitForBlockedPush polls, bounded, until a Push is waiting for room.
func waitForBlockedPush(t *testing.T, q *Queue[string]) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); q.Blocked() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("Push into a full queue did not wait")
		}
		time.Sleep(time.Millisecond)
	}
}
