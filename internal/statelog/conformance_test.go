package statelog_test

import (
	"testing"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/statelog/storetest"
)

// Every Bytes the runtime hands to stores passes the same suite.

func TestMemoryConforms(t *testing.T) {
	storetest.RunBytes(t, func(*testing.T) statelog.Bytes { return &statelog.Memory{} })
}

func openDB(t *testing.T) *statelog.DB {
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSpaceConforms(t *testing.T) {
	storetest.RunBytes(t, func(t *testing.T) statelog.Bytes { return openDB(t).Space("s", 3) })
}

func TestBufferOverMemoryConforms(t *testing.T) {
	storetest.RunBytes(t, func(*testing.T) statelog.Bytes { return statelog.NewBuffer(&statelog.Memory{}) })
}

func TestBufferOverSpaceConforms(t *testing.T) {
	storetest.RunBytes(t, func(t *testing.T) statelog.Bytes { return statelog.NewBuffer(openDB(t).Space("s", 3)) })
}

// TestBufferOverSpaceAfterFlushConforms runs the suite on a buffer whose
// writes are flushed to Badger after every call, so reads come from the
// committed state.
func TestBufferOverSpaceAfterFlushConforms(t *testing.T) {
	storetest.RunBytes(t, func(t *testing.T) statelog.Bytes {
		return flushing{statelog.NewBuffer(openDB(t).Space("s", 3))}
	})
}

type flushing struct{ *statelog.Buffer }

func (f flushing) Put(k, v []byte) error {
	if err := f.Buffer.Put(k, v); err != nil {
		return err
	}
	return f.Flush()
}

func (f flushing) PutStamped(k, v []byte, ts int64) error {
	if err := f.Buffer.PutStamped(k, v, ts); err != nil {
		return err
	}
	return f.Flush()
}

func (f flushing) Delete(k []byte) error {
	if err := f.Buffer.Delete(k); err != nil {
		return err
	}
	return f.Flush()
}
