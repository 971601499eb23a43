// Package changelog is what a user of weir's state stores configures and
// handles: the bounds of the instance's Badger database (Options, set
// through weir.Config.Stores.Badger) and the errors a store's reads and
// writes wrap (ErrExpired, ErrKeyTooLarge, ErrMalformedKey,
// ErrEncryptionKey). The stores themselves (key-value, window and session
// stores on byte keys, kept in one Badger database per instance and made
// durable by compacted changelog topics) are weir's runtime.
//
// # Write path
//
// A task writes into a write buffer that reads and scans see merged with
// the database. At commit the buffer's changes go to the store's changelog
// topic, one record per changed key, inside the thread's commit; only once
// the commit succeeded are they written to Badger, followed by the
// checkpoint, the next changelog offset the store partition reflects. An
// aborted commit discards the buffer. Badger therefore holds only committed
// state, and a restarted instance replays only the changelog after its
// checkpoint.
package changelog
