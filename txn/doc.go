// Package txn is an exactly-once producer for sarama. With it, a
// consume-transform-produce loop reads its input with a sarama
// ConsumerGroup, writes its output through a [Producer] and commits output
// records and input offsets together in one Kafka transaction, with the consumer group's metadata so
// that a zombie member is fenced (KIP-447). weir's stream threads commit
// this way; the package is public so that a sarama user gets the same loop
// without a topology.
//
// Without a transactional id the same Producer is an at-least-once
// producer: Commit waits until every record sent is acknowledged, and the
// caller commits the offsets afterwards.
//
// # Two producers underneath
//
// With a transactional id, [New] sends through weir's own producer: Send
// appends the record to its partition's batch on the caller's goroutine,
// and one goroutine writes sealed batches onto the client's broker
// connections with sarama's protocol requests (Produce, InitProducerId,
// AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), one
// request in flight per broker and one batch in flight per partition. A
// batch that meets a retriable error is sent again as it was, with its
// sequence number, so the broker drops a copy it already has. The bytes it
// holds are bounded (32 MiB; Send blocks beyond). sarama's AsyncProducer
// moves each record through four goroutines and returns each
// acknowledgement on a channel; on word count under exactly once that cost
// more CPU than the processing. Without a transactional id, and around a
// producer given to [Wrap], the Producer uses sarama's AsyncProducer. The
// contract below is the same on both.
//
// # Configuration
//
// The producer needs a [sarama.Client] of its own, configured by
// [ConfigureProducer] (idempotent, acks from all in-sync replicas, one
// request in flight, a transactional id, successes and errors returned,
// Version 2.5 or later). sarama's client refuses a transactional
// configuration without the first three; [New] refuses, naming every
// problem at once, what sarama lets through but the Producer cannot work
// with: no successes or errors returned, or a Version below 2.5. The consumer group needs another client, configured by
// [ConfigureConsumer] (read_committed, no automatic offset commits): a
// broker connection serves one request at a time, and a commit queued
// behind the member's JoinGroup would carry the generation the group is
// leaving.
//
// Each running instance needs its own transactional id, the same across its
// restarts: a restarted instance then fences its earlier incarnation and
// aborts the transaction it left open at once, instead of leaving
// read_committed readers waiting until that transaction times out.
//
// # The loop
//
// One Producer serves the whole group member. sarama runs ConsumeClaim in
// a goroutine per claimed partition, so the claims serialise their calls
// (a Producer is not safe for concurrent use). For each input record the
// loop sends its output with [Producer.Send] and notes the next offset of
// its partition; every commit interval (and in the handler's Cleanup, at
// the end of a session) it calls [Producer.Commit] with those offsets and
// the session's [Group] ([SessionGroup]). Input offsets are committed only
// this way: never with the session's MarkOffset or Commit.
//
// The package's Example is a complete loop. It relies on sarama's default,
// eager rebalancing, under which every rebalance ends the session, so that
// Cleanup commits before the partitions move. Under a cooperative strategy
// Cleanup runs only when the member leaves: a claim whose Messages channel
// closes (its partition revoked) must commit before it returns.
//
// # Failures
//
// A record that fails does not end the transaction: the failure is sticky.
// Send and [Producer.Err] report it (wrapping [ErrFailed]) until Commit or
// [Producer.Abort] ends the transaction, and Commit never commits a failed
// transaction: it aborts it. So input whose output was lost is never
// committed, whatever the caller did with the error Send returned.
//
// A failed Commit says what happened and what to do:
//
//   - [ErrAborted]: the transaction was aborted and the producer is ready
//     for the next one. Nothing of the transaction happened: reprocess
//     every record since the last successful commit. A sarama claim cannot
//     seek back, so end the session: return from ConsumeClaim (sarama then
//     ends the session and closes the other claims), and the next session
//     starts from the committed offsets. Send nothing more in the ending
//     session, from any claim: a later commit would carry offsets past the
//     lost records.
//   - [ErrFenced]: a newer producer with the same transactional id, or the
//     coordinator after the transaction timed out, fenced this one. It is
//     dead: replace it ([Producer.Rebuild]) and reprocess as above.
//   - [ErrAmbiguous]: the outcome is unknown (a timeout, or an abort that
//     failed). The producer must never be used again, since neither
//     producer has protection against a late commit landing on a later
//     transaction (KIP-890): replace it and reprocess as above. If the
//     transaction did commit, its offsets were committed with it, so the
//     next session starts after it and nothing is duplicated.
//   - [ErrClosed]: the producer was closed.
//
// # Replacing a fenced producer
//
// [Producer.Rebuild] creates the new producer first and closes the old one
// after: initialising the transactional id bumps its epoch, so nothing the
// old producer still has in flight can land in a later transaction, and the
// broker aborts the transaction it left open. Rebuilding is right when the
// fencing came from this instance's own past (its transaction timed out, or
// an earlier incarnation); when another live instance uses the same
// transactional id the two fence each other for ever, so stop after
// repeated fencings with no commit in between.
//
// # sarama facts this package relies on
//
// Below Version 2.5 sarama sends TxnOffsetCommit without the group's
// generation, and a stale member's commit silently succeeds: no zombie
// fencing at all. Offsets added to a transaction reach the broker only at
// CommitTxn, so a stale generation shows there, as an abortable error.
// Closing a sarama producer twice panics, so a Producer closes its own once
// and returns [ErrClosed] afterwards.
package txn
