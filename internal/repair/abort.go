package repair

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/txn"
)

// abortOver opens a transaction of p over parts, one record in each, and
// aborts it: the abort marker ends every open record of p's producer id
// there. The records (key "weir.abort", no value) are aborted with it,
// never read read_committed.
//
// The broker refuses clients' records in __consumer_offsets, where an
// offset commit left open blocks the group's offset fetches (every
// session of the group then ends with UNSTABLE_OFFSET_COMMIT). For that
// partition addGroup adds the group's offsets partition to the
// transaction instead (AddOffsetsToTxn), once the transaction is open;
// spare, a partition the thread writes, carries the transaction's record
// when no other part does.
func abortOver(ctx context.Context, p *txn.Producer, parts []DanglingPartition, spare txn.Partition, addGroup func() error) error {
	send := func(topic string, partition int32) error {
		return p.Send(&sarama.ProducerMessage{Topic: topic, Partition: partition, Key: sarama.StringEncoder("weir.abort"),
			Metadata: &client.Origin{Explicit: true, Offset: -1}})
	}
	offsets, sent := false, 0
	for _, dp := range parts {
		if dp.Topic == OffsetsTopic {
			offsets = true
			continue
		}
		if err := send(dp.Topic, dp.Partition); err != nil {
			return err
		}
		sent++
	}
	if offsets && sent == 0 {
		if err := send(spare.Topic, spare.Partition); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, danglingWait)
	defer cancel()
	if err := p.Wait(wctx); err != nil {
		return err
	}
	if err := p.Err(); err != nil {
		_ = p.Abort(wctx)
		return err
	}
	if offsets {
		if err := addGroup(); err != nil {
			_ = p.Abort(wctx)
			return fmt.Errorf("adding the group's offsets partition to the transaction: %w", err)
		}
	}
	return p.Abort(wctx)
}

// addGroupToTxn adds the group's offsets partition to the transaction the
// thread's producer has open (abortOver): an AddOffsetsToTxn of the
// producer's id and epoch, which the coordinator describes, sent to the
// transaction coordinator on the producer's client.
func (g *Guard) addGroupToTxn() error {
	id := g.id
	ta, ok := g.cfg.Admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return errors.New("the admin client cannot describe transactions")
	}
	states, err := ta.DescribeTransactions([]string{id})
	if err != nil {
		return err
	}
	st, ok := states[id]
	switch {
	case !ok:
		return fmt.Errorf("the coordinator did not describe transactional id %s", id)
	case st.ErrorCode != sarama.ErrNoError:
		return st.ErrorCode
	case st.TransactionState != "Ongoing":
		return fmt.Errorf("transactional id %s is %s, not Ongoing", id, st.TransactionState)
	}
	b, err := g.cfg.Client.TransactionCoordinator(id)
	if err != nil {
		return err
	}
	resp, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 3, TransactionalID: id,
		ProducerID: st.ProducerID, ProducerEpoch: st.ProducerEpoch, GroupID: g.cfg.Group})
	if err != nil {
		return err
	}
	if resp.Err != sarama.ErrNoError {
		return resp.Err
	}
	return nil
}
