package changelog

import (
	"log/slog"
	"time"
)

// Options bound the Badger database of an instance. The zero value means
// the documented defaults, which keep Badger's own memory near 100 MiB:
// memtables (MemTableSize × NumMemtables = 32 MiB), block cache (32 MiB),
// index cache (16 MiB) plus the mmapped value log and table files, which
// the OS pages in and out; weir's read cache in front of it adds up to
// ReadCacheBytes (128 MiB). Table files are 8 MiB at every level, and
// Badger builds each in a 16 MiB buffer: a compaction or a bulk restore
// holds one per table it writes at once.
type Options struct {
	// InMemory keeps everything in memory: nothing survives Close. For
	// tests.
	InMemory bool
	// MemTableSize is the size of one memtable. Default 16 MiB. Below
	// 7 MiB, values over 15% of it are kept in the value log rather than
	// in the LSM tree (Badger's bound on a write batch).
	MemTableSize int64
	// NumMemtables is how many memtables may be held before writes stall.
	// Default 2.
	NumMemtables int
	// BlockCacheSize caches table blocks. Default 32 MiB.
	BlockCacheSize int64
	// IndexCacheSize caches table indexes and bloom filters. Default
	// 16 MiB.
	IndexCacheSize int64
	// ValueLogFileSize is the size of one value log file. Default 64 MiB.
	ValueLogFileSize int64
	// EncryptionKey, when set, encrypts data at rest with AES; it must be
	// 16, 24 or 32 bytes. A database written with a key can only be opened
	// with the same key, and one written without a key only without one:
	// the start of an App fails with ErrEncryptionKey otherwise, having
	// changed nothing.
	EncryptionKey []byte
	// EncryptionKeyRotation is how often Badger makes a new data key
	// (encrypted with EncryptionKey) for new files. Default 10 days.
	EncryptionKeyRotation time.Duration
	// Logger receives Badger's warnings and errors. Default: discarded.
	Logger *slog.Logger
	// ReadCacheBytes bounds a cache of committed values (and of keys
	// found absent) in front of Badger, which store reads that miss their
	// write buffer consult first: keys, values and about 100 bytes per
	// entry. Default 128 MiB (DefaultReadCacheBytes); negative: no cache.
	ReadCacheBytes int
}

// DefaultReadCacheBytes is Options.ReadCacheBytes when it is zero: about
// a million entries of small keys and values, whichever stores and
// partitions of the instance they belong to. A read the cache answers
// costs a map lookup; one it misses costs a Badger read, several times
// that once the state outgrows Badger's memtables (word count at a million
// distinct words ran about 15% faster with this default than with 32 MiB,
// for 180 MiB more peak RSS). The cache fills only with keys the stores
// read or write, so a small state does not pay for the bound.
const DefaultReadCacheBytes = 128 << 20
