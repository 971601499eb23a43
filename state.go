package weir

import (
	"time"

	"github.com/weirstream/weir/changelog"
)

// StoresConfig configures local state.
type StoresConfig struct {
	// Badger bounds the instance's Badger database and the read cache in
	// front of it; see changelog.Options for the defaults (about 100 MiB
	// of Badger memory and a 128 MiB read cache).
	Badger changelog.Options
	// EncryptionKey, when set, encrypts the local state at rest (AES, in
	// Badger's tables, value log and memtable logs); it must be 16, 24 or
	// 32 bytes (AES-128, -192, -256). State written with a key opens only
	// with that key, and state written without one only without one: Run
	// fails with ErrStateEncryptionKey and changes nothing, so a wrong key
	// never corrupts state. To change keys, delete the state directory:
	// the stores are restored from their changelogs, which the key does
	// not cover (they are protected by the brokers: TLS in transit, disk
	// encryption at rest). Leave Stores.Badger.EncryptionKey unset.
	EncryptionKey []byte
	// EncryptionKeyRotation is how often a new data key, itself encrypted
	// with EncryptionKey, is made for new files. Default 10 days
	// (Badger's).
	EncryptionKeyRotation time.Duration
	// MaxBufferBytes bounds the state changes a thread buffers between
	// commits (keys and values); crossing it commits at once. Default
	// 16 MiB.
	MaxBufferBytes int
	// MaxConcurrentRestores bounds how many store partitions an instance
	// restores at the same time; each holds one fetch (1 MiB) in memory.
	// Default 2.
	MaxConcurrentRestores int
	// BulkRestoreMinRecords is the smallest full restore, in changelog
	// offsets, that goes through Badger's bulk path: a store partition
	// that is empty when its restore starts is sorted in runs on disk
	// beside the state directory (in "<state>-bulk", at most 64 MiB of a
	// run in memory per restore) and written straight into Badger's
	// tables, at about twice the rate of the normal write path. While a
	// load writes its tables (about a second per million records) the
	// instance's other state writes wait, and at its end reads wait a few
	// milliseconds. The batches a RestoreListener hears of reach the
	// database together, when the restore ends. Smaller restores, replays
	// from a checkpoint and standbys use the normal path. Default 100,000;
	// negative: never.
	BulkRestoreMinRecords int64
	// RestoreListener, when set, is told about every restore. Its methods
	// are called from restore goroutines and must be safe for concurrent
	// use.
	RestoreListener RestoreListener
	// CleanupDelay is how long the local state of a task that moved to
	// another instance is kept, so that a quick move back restores only the
	// changelog's tail; then it is deleted. State found at start for tasks
	// not assigned within the delay is deleted too. Default 10 minutes.
	// Kafka Streams' state.cleanup.delay.ms.
	CleanupDelay time.Duration
}

const (
	defaultMaxBufferBytes        = 16 << 20
	defaultMaxConcurrentRestores = 2
	defaultCleanupDelay          = 10 * time.Minute
	defaultBulkRestoreMinRecords = 100_000
)

// ErrStateEncryptionKey is wrapped by the error Run returns when the state
// directory was written with another Stores.EncryptionKey, or with one when
// none is set, or without one when one is set. Nothing was changed.
var ErrStateEncryptionKey = changelog.ErrEncryptionKey

// RestoreListener observes restores of store partitions from their
// changelogs. Kafka Streams' StateRestoreListener.
type RestoreListener interface {
	// OnRestoreStart is called before a store partition is restored from
	// offset from up to end (exclusive). from is 0 and full is true when
	// the local state was missing or unusable.
	OnRestoreStart(store string, partition int32, from, end int64, full bool)
	// OnBatchRestored is called after each applied batch of records.
	OnBatchRestored(store string, partition int32, next int64, records int)
	// OnRestoreEnd is called when the partition has caught up.
	OnRestoreEnd(store string, partition int32, records int64, took time.Duration)
}
