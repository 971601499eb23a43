// Command relay copies the records of one topic to another, exactly once,
// with a sarama ConsumerGroup and weir's txn package and no topology: each
// record's value is upper-cased, its key kept. Output records and input
// offsets commit together in one Kafka transaction every commit interval;
// an aborted transaction is reprocessed from the committed offsets (the
// session ends and the next one starts there), and a fenced producer is
// replaced.
//
// With no flags it starts an embedded broker, produces 1000 records, relays
// them, reads the output back (read_committed), checks that each input
// record is there once, prints a summary and exits. With -brokers it runs
// against that cluster, creating the topics if they are missing: with
// -records N it produces N records, relays until N records are relayed and
// exits; without, it relays until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

// options are the command line, a contract that scripts rely on.
type options struct {
	brokers         string
	input           string
	output          string
	group           string
	transactionalID string
	records         int
	commitInterval  time.Duration
	abortEvery      int
}

// defaultRecords is what the embedded run relays without -records.
const defaultRecords = 1000

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated bootstrap servers; empty starts an embedded broker")
	fs.StringVar(&o.input, "input", "relay-input", "input topic")
	fs.StringVar(&o.output, "output", "relay-output", "output topic: each input record with its value upper-cased")
	fs.StringVar(&o.group, "group", "relay", "consumer group id")
	fs.StringVar(&o.transactionalID, "transactional-id", "", "transactional id, unique to this instance and the same across its restarts (default <group>-<hostname>)")
	fs.IntVar(&o.records, "records", 0, fmt.Sprintf("produce this many records to the input, relay until as many are relayed, print a summary and exit (0: %d with the embedded broker; with -brokers, relay until interrupted)", defaultRecords))
	fs.DurationVar(&o.commitInterval, "commit-interval", 100*time.Millisecond, "time between transaction commits")
	fs.IntVar(&o.abortEvery, "abort-every", 0, "abort every N-th transaction on purpose, to show that aborted output is never seen and is relayed again (0: never)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.records < 0 || o.abortEvery < 0 || o.abortEvery == 1 || o.commitInterval <= 0 {
		return o, errors.New("-records must be ≥ 0, -abort-every 0 or ≥ 2 (1 would abort everything), -commit-interval > 0")
	}
	if o.transactionalID == "" {
		host, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("-transactional-id: no hostname for the default: %w", err)
		}
		o.transactionalID = o.group + "-" + host
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.brokers == "" {
		if o.records == 0 {
			o.records = defaultRecords
		}
		return runEmbedded(ctx, o, os.Stdout)
	}
	brokers := strings.Split(o.brokers, ",")
	if err := ensureTopics(brokers, o.input, o.output); err != nil {
		return err
	}
	if o.records > 0 {
		if err := produceRecords(brokers, o.input, 0, o.records); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(os.Stderr, "relay: relaying %s to %s; Ctrl-C stops\n", o.input, o.output)
	}
	st, err := relayTopic(ctx, brokers, o)
	printSummary(os.Stdout, o, st)
	return err
}

// runEmbedded relays o.records records on an embedded broker, then checks
// the output.
func runEmbedded(ctx context.Context, o options, w io.Writer) error {
	cluster, err := startEmbedded(o.input, o.output)
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	if err := produceRecords(brokers, o.input, 0, o.records); err != nil {
		return err
	}
	st, err := relayTopic(ctx, brokers, o)
	printSummary(w, o, st)
	if err != nil {
		return err
	}
	got, err := readOutput(brokers, o.output, o.records)
	if err != nil {
		return err
	}
	if err := checkOutput(got, o.records); err != nil {
		return err
	}
	fmt.Fprintf(w, "read back %d records from %s (read_committed): each input record once, its value upper-cased\n", len(got), o.output)
	return nil
}

// relayTopic runs the relay on brokers until o.records records are
// relayed (o.records > 0) or ctx is done.
func relayTopic(ctx context.Context, brokers []string, o options) (stats, error) {
	pcfg := saramaConfig("relay-producer")
	txn.ConfigureProducer(pcfg, o.transactionalID)
	pclient, err := sarama.NewClient(brokers, pcfg)
	if err != nil {
		return stats{}, fmt.Errorf("connecting the producer: %w", err)
	}
	defer pclient.Close()
	producer, err := txn.New(pclient)
	if err != nil {
		return stats{}, err
	}
	r := newRelay(producer, o.group, o.output, o.commitInterval, o.abortEvery, o.records)
	// The producer the relay ends with: a rebuild replaces the first.
	defer func() { r.producer.Close() }()

	ccfg := saramaConfig("relay")
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	txn.ConfigureConsumer(ccfg)
	group, err := sarama.NewConsumerGroup(brokers, o.group, ccfg)
	if err != nil {
		return stats{}, fmt.Errorf("joining group %s: %w", o.group, err)
	}
	err = r.run(ctx, group, o.input)
	if cerr := group.Close(); err == nil {
		err = cerr
	}
	return r.Stats(), err
}

func printSummary(w io.Writer, o options, st stats) {
	fmt.Fprintf(w, "relayed %d records from %s to %s (transactions committed: %d, aborted and reprocessed: %d; producer rebuilds: %d)\n",
		st.Records, o.input, o.output, st.Transactions, st.Aborted, st.Rebuilds)
}
