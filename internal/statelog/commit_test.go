package statelog

import (
	"github.com/weirstream/weir/changelog"

	"slices"
	"testing"
	"time"
)

// A commit writes the changes of several store partitions and their
// checkpoints together; a cancelled one writes nothing.
func TestCommitWritesChangesThenCheckpoints(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, b := db.Space("a", 0), db.Space("b", 3)
	if err := a.Put([]byte("gone"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_700_000_000_000)
	c := db.NewCommit()
	if err := c.Stage(a, []Entry{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("gone"), Deleted: true}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stage(b, []Entry{{Key: []byte("k"), Value: nil}}); err != nil {
		t.Fatal(err)
	}
	c.Checkpoint(a, 10, at)
	c.Checkpoint(b, 20, at)
	if got := collect(a.Range(nil, nil)); !slices.Equal(got, []string{"gone=x"}) {
		t.Fatalf("before Flush, a = %v: staged changes must not be visible", got)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := collect(a.Range(nil, nil)); !slices.Equal(got, []string{"k=v"}) {
		t.Errorf("a = %v, want k=v", got)
	}
	if got := collect(b.Range(nil, nil)); !slices.Equal(got, []string{"k="}) {
		t.Errorf("b = %v, want k= (an empty value, not a deletion)", got)
	}
	for _, want := range []struct {
		s   *Space
		off int64
	}{{a, 10}, {b, 20}} {
		cp, ok, err := want.s.Checkpoint()
		if err != nil || !ok || cp.Offset != want.off || !cp.Time.Equal(at) {
			t.Errorf("checkpoint = %+v, %v, %v; want offset %d at %v", cp, ok, err, want.off, at)
		}
	}
	if err := c.Flush(); err == nil {
		t.Error("a second Flush succeeded")
	}

	c = db.NewCommit()
	if err := c.Stage(a, []Entry{{Key: []byte("k2"), Value: []byte("v2")}}); err != nil {
		t.Fatal(err)
	}
	c.Checkpoint(a, 99, at)
	c.Cancel()
	c.Cancel()
	if got := collect(a.Range(nil, nil)); !slices.Equal(got, []string{"k=v"}) {
		t.Errorf("after Cancel, a = %v", got)
	}
	if cp, _, _ := a.Checkpoint(); cp.Offset != 10 {
		t.Errorf("after Cancel, checkpoint %d, want 10", cp.Offset)
	}
	// The drop lock is released by Flush and Cancel: a drop goes through.
	if err := b.Drop(); err != nil {
		t.Fatal(err)
	}
}
