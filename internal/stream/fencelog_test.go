package stream

import (
	"testing"
	"time"

	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// TestFencingsSeparatedByCommitsDoNotStop: maxFences fencings within
// fenceWindow stop a thread only when no commit came in between (two
// instances fencing each other); a commit between them (a coordinator
// that failed over again and again, as in the soak) starts the count
// anew, and fencings older than the window fall out of it.
func TestFencingsSeparatedByCommitsDoNotStop(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var f fenceLog
	for i := range maxFences {
		if n := f.fenced(t0.Add(time.Duration(i)*time.Second), nil); n != 1 {
			t.Fatalf("fencing %d after a commit counts %d, want 1", i, n)
		}
		f.committed()
	}
	var g fenceLog
	var n int
	for i := range maxFences {
		n = g.fenced(t0.Add(time.Duration(i)*time.Second), nil)
	}
	if n != maxFences {
		t.Errorf("%d fencings without a commit count %d, want %d", maxFences, n, maxFences)
	}
	// The first fencing, at 0 s, is now older than the window; those at
	// 1 s and 2 s are not.
	if n := g.fenced(t0.Add(fenceWindow+time.Second), nil); n != maxFences {
		t.Errorf("a fencing a window after the first counts %d, want %d", n, maxFences)
	}
}

// TestOneProducerIsFencedOnce: the commits a stopping thread tries on a
// producer that is already fenced (before revocation, the final commit)
// fail on the same epoch and are not new fencings; three of them once made
// a thread conclude that another instance ran with its process id and
// exit 1 after SIGTERM (chaos BrokerRestartWithKill9). A rebuilt producer
// fenced again is a new fencing.
func TestOneProducerIsFencedOnce(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	p, q := txn.Wrap(txntest.New(true)), txn.Wrap(txntest.New(true))
	defer p.Close()
	defer q.Close()
	var f fenceLog
	for i := range maxFences {
		if n := f.fenced(t0.Add(time.Duration(i)*time.Millisecond), p); n != 1 {
			t.Fatalf("fencing %d of one producer counts %d, want 1", i, n)
		}
	}
	if n := f.fenced(t0.Add(time.Second), q); n != 2 {
		t.Fatalf("a fencing of the rebuilt producer counts %d, want 2", n)
	}
}
