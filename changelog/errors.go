package changelog

import "errors"

// MaxKeyBytes is the longest key a store takes: Badger takes keys of up
// to 65,000 bytes with the store's prefix. A longer key is refused when it
// is put, before anything reaches the changelog: a changelog record the
// local state cannot hold would fail every restore of the store after it.
const MaxKeyBytes = 64_000

// ErrKeyTooLarge is matched (errors.Is) by the error of a Put or Delete of
// a key longer than MaxKeyBytes.
var ErrKeyTooLarge = errors.New("changelog: store key too large")

// ErrEncryptionKey is wrapped by the error of an App's start when the
// instance's database was written with another encryption key than
// Options.EncryptionKey, or with one while none is given, or without one
// while one is given (weir.ErrStateEncryptionKey). Nothing was changed:
// starting again with the right key finds the state intact.
var ErrEncryptionKey = errors.New("changelog: the state was written with another encryption key, or with none while one is given, or with one while none is")

// ErrMalformedKey is wrapped by the errors of stores (and of weir's
// tools) that meet a stored key they cannot decode: the store's data is
// corrupt, and restoring it from its changelog is the remedy.
var ErrMalformedKey = errors.New("changelog: malformed key")

// ErrExpired is wrapped by the error of a Put whose window or session is
// older than the store's retention allows: the record came too late and was
// dropped. Callers count such records (Kafka Streams' dropped-records
// metric) and go on.
var ErrExpired = errors.New("changelog: expired")
