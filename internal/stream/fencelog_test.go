package stream

import (
	"testing"
	"time"
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
		if n := f.fenced(t0.Add(time.Duration(i) * time.Second)); n != 1 {
			t.Fatalf("fencing %d after a commit counts %d, want 1", i, n)
		}
		f.committed()
	}
	var g fenceLog
	var n int
	for i := range maxFences {
		n = g.fenced(t0.Add(time.Duration(i) * time.Second))
	}
	if n != maxFences {
		t.Errorf("%d fencings without a commit count %d, want %d", maxFences, n, maxFences)
	}
	// The first fencing, at 0 s, is now older than the window; those at
	// 1 s and 2 s are not.
	if n := g.fenced(t0.Add(fenceWindow + time.Second)); n != maxFences {
		t.Errorf("a fencing a window after the first counts %d, want %d", n, maxFences)
	}
}
