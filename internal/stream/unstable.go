package stream

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/IBM/sarama"
)

// unstableSessions is how many group sessions of a thread in a row may
// end with UNSTABLE_OFFSET_COMMIT before it looks for the transaction
// holding the group's offsets (reportUnstable). sarama ends a session
// when its offset fetch (require_stable, as read_committed needs) still
// finds a transactional offset commit pending after its retries; a live
// transaction ends within the transaction timeout, so sessions ending
// like this again and again mean one whose marker never came.
const unstableSessions = 3

// reportUnstable runs on the consume goroutine once unstableSessions
// sessions in a row ended with UNSTABLE_OFFSET_COMMIT. It logs, at warn
// level, the transactions open on the group's offsets partition (producer
// id, epoch, start offset, age), with the command that ends one an
// operator judges stuck, and asks the loop to end any of them that is
// this thread's own producer's (checkDangling, once the thread is idle).
// The group rebalances every time a member fails this way, so every
// member of the group stalls until the transaction ends.
func (th *Thread) reportUnstable(n int) {
	th.checkOwn.Store(true)
	th.Wake()
	ta, ok := th.in.Admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return
	}
	part, err := offsetsPartition(th.in.Admin, th.in.ApplicationID)
	if err == nil {
		var ps map[string]map[int32]sarama.DescribeProducersResponsePartition
		if ps, err = ta.DescribeProducers(map[string][]int32{offsetsTopic: {part}}); err == nil {
			var open []string
			for _, ap := range ps[offsetsTopic][part].ActiveProducers {
				if ap.CurrentTxnStartOffset < 0 {
					continue
				}
				open = append(open, fmt.Sprintf("producer id %d epoch %d from offset %d (last write %s ago)",
					ap.ProducerID, ap.ProducerEpoch, ap.CurrentTxnStartOffset, time.Since(time.UnixMilli(ap.LastTimestamp)).Round(time.Second)))
			}
			th.log.Warn("the group's offsets are held by an open transaction: every session of the group ends until it does",
				"sessions", n, "partition", fmt.Sprintf("%s/%d", offsetsTopic, part), "open_transactions", strings.Join(open, "; "),
				"fix", fmt.Sprintf("if one stays open past the transaction timeout, end it with kafka-transactions.sh --bootstrap-server ... abort --topic %s --partition %d --start-offset <its start offset>", offsetsTopic, part))
			return
		}
	}
	th.log.Warn("the group's offsets are held by an open transaction: every session of the group ends until it does; could not look it up", "sessions", n, "error", err)
}

// offsetsPartition returns the partition of __consumer_offsets that holds
// group's offsets, as the broker places it (groupPartition).
func offsetsPartition(admin sarama.ClusterAdmin, group string) (int32, error) {
	ds, err := admin.DescribeTopics([]string{offsetsTopic})
	if err != nil {
		return 0, err
	}
	if len(ds) != 1 || ds[0].Err != sarama.ErrNoError || len(ds[0].Partitions) == 0 {
		return 0, errors.New("cannot describe " + offsetsTopic)
	}
	return groupPartition(group, int32(len(ds[0].Partitions))), nil
}

// groupPartition is Kafka's partition of group among n offsets
// partitions: Utils.abs(group.hashCode()) % n, the absolute value of
// Java's string hash (0 for the smallest int).
func groupPartition(group string, n int32) int32 {
	var h int32
	for _, c := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(c)
	}
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return h % n
}
