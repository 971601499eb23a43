package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// closeTimeout bounds stopping a consumer group or a weir application.
const closeTimeout = 60 * time.Second

// countHandler is a sarama consumer group handler that marks and counts
// every record: the least an at-least-once sarama application does.
type countHandler struct{ c *counter }

func (countHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (countHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h countHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			sess.MarkMessage(m, "")
			h.c.add()
		case <-sess.Context().Done():
			return nil
		}
	}
}

// runSaramaGroup reads topic with a bare sarama consumer group of
// o.threads members, configured as weir configures its members (Kafka 4
// protocol, 50 ms fetch max wait, oldest offset, read_committed), until
// every record is seen. Offsets are marked per record and auto-committed
// every second, sarama's default.
func runSaramaGroup(ctx context.Context, o *options, c *cluster, topic, group string, round int) (*result, error) {
	const name = "bare sarama consumer group"
	c.addGroup(group)
	cnt := newCounter(o.records)
	failed := make(chan error, o.threads)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	var groups []sarama.ConsumerGroup
	var wg sync.WaitGroup
	closeAll := func() error {
		stopConsuming()
		var errs []error
		for _, g := range groups {
			if err := g.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	m, err := startMeasurement(o.profiling, wlSarama, round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	cnt.reset()
	for i := range o.threads {
		sc := saramaConfig(group + "-" + strconv.Itoa(i))
		sc.Consumer.MaxWaitTime = 50 * time.Millisecond
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
		sc.Consumer.Return.Errors = true
		g, err := sarama.NewConsumerGroup(o.brokers, group, sc)
		if err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("%s: member %d: %w", name, i, err)
		}
		groups = append(groups, g)
		wg.Go(func() {
			for consumeCtx.Err() == nil {
				err := g.Consume(consumeCtx, []string{topic}, countHandler{cnt})
				if consumeCtx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
					return
				}
				if err != nil {
					failed <- fmt.Errorf("member %d: %w", i, err)
					return
				}
			}
		})
		wg.Go(func() {
			for err := range g.Errors() {
				fmt.Fprintf(os.Stderr, "bench: %s: member %d: %v\n", name, i, err)
			}
		})
	}
	werr := cnt.waitDone(ctx, name, o.timeout, failed)
	cpu, perr := m.stop()

	closeStart := time.Now()
	cerr := withTimeout(closeTimeout, closeAll)
	closeTime := time.Since(closeStart)
	if err := errors.Join(werr, perr); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s: closing: %w", name, cerr)
	}

	r := &result{
		Workload:         wlSarama,
		Name:             name,
		Round:            round,
		Records:          o.records,
		Bytes:            o.records * int64(keySize+o.valueSize),
		FirstSeconds:     time.Duration(cnt.first.Load()).Seconds(),
		ProcessedSeconds: time.Duration(cnt.last.Load()).Seconds(),
		EndSeconds:       time.Duration(cnt.last.Load()).Seconds(),
		CPUSeconds:       cpu.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
		Note:             fmt.Sprintf("%d member(s), MarkMessage per record, auto-commit 1s", o.threads),
	}
	r.finish()
	return r, nil
}

// runWeir runs a weir application on input until it has processed every
// record. With output == "" its one processor only counts (source-only);
// otherwise it forwards every record to a sink writing output, and the
// measurement ends when the output topic holds every record.
func runWeir(ctx context.Context, o *options, c *cluster, logger *slog.Logger, input, output, id string, round int) (*result, error) {
	passthrough := output != ""
	name, workload := "weir source-only", wlSource
	if passthrough {
		name, workload = "weir passthrough", wlPassthrough
	}
	cnt := newCounter(o.records)

	t := processor.NewTopology()
	src := t.AddSource("in", input, serde.Bytes(), serde.Bytes())
	if passthrough {
		p := t.AddProcessor("count", processor.Func(func(pc processor.Context[[]byte, []byte], rec processor.Record[[]byte, []byte]) error {
			cnt.add()
			return pc.Forward(rec)
		}), src)
		t.AddSink("out", output, serde.Bytes(), serde.Bytes(), p)
	} else {
		t.AddProcessor("count", processor.Func(func(processor.Context[[]byte, []byte], processor.Record[[]byte, []byte]) error {
			cnt.add()
			return nil
		}), src)
	}
	dir, err := c.stateDir()
	if err != nil {
		return nil, err
	}
	app, err := weir.New(t, weir.Config{
		ApplicationID:  id,
		Brokers:        o.brokers,
		StateDir:       dir,
		Guarantee:      o.guarantee,
		Threads:        o.threads,
		CommitInterval: o.commitInterval,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.addGroup(id)

	m, err := startMeasurement(o.profiling, workload, round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	runErr := make(chan error, 1)
	cnt.reset()
	go func() { runErr <- app.Run(context.Background()) }()

	// stopApp closes the application, bounded, and returns Run's error.
	stopApp := func() (time.Duration, error) {
		start := time.Now()
		err := withTimeout(closeTimeout, app.Close)
		took := time.Since(start)
		if err != nil {
			return took, fmt.Errorf("%s: stopping the application: %w", name, err)
		}
		select {
		case err := <-runErr:
			if err != nil {
				return took, fmt.Errorf("%s: Run: %w", name, err)
			}
		case <-time.After(5 * time.Second):
			return took, fmt.Errorf("%s: Run did not return 5s after Close", name)
		}
		return took, nil
	}

	deadline := time.Now().Add(o.timeout)
	werr := cnt.waitDone(ctx, name, o.timeout, runErr)
	if werr != nil {
		_, _ = m.stop()
		// Run may have returned already, leaving runErr empty; Close
		// works either way.
		_ = withTimeout(closeTimeout, app.Close)
		return nil, werr
	}
	processed := time.Duration(cnt.last.Load())
	end := processed
	note := "end = last record processed"
	if passthrough {
		if end, err = c.waitOutput(ctx, o, output, cnt, deadline, runErr); err != nil {
			_, _ = m.stop()
			_ = withTimeout(closeTimeout, app.Close)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		note = "end = output complete"
		if o.guarantee == weir.AtLeastOnce {
			note += " (high watermarks sum to N)"
		} else {
			note += " (committed records counted)"
		}
	}
	cpu, perr := m.stop()
	closeTime, serr := stopApp()
	if err := errors.Join(perr, serr); err != nil {
		return nil, err
	}
	note += fmt.Sprintf(", commit interval %s", commitIntervalLabel(o))

	r := &result{
		Workload:         workload,
		Name:             name,
		Round:            round,
		Records:          o.records,
		Bytes:            o.records * int64(keySize+o.valueSize),
		FirstSeconds:     time.Duration(cnt.first.Load()).Seconds(),
		ProcessedSeconds: processed.Seconds(),
		EndSeconds:       end.Seconds(),
		CPUSeconds:       cpu.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
		Note:             note,
	}
	if passthrough && o.verify {
		n, err := c.verifyOutput(ctx, o, output)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.Verified = &n
		switch {
		case n < o.records:
			return nil, fmt.Errorf("%s: the output topic %s holds %d committed records, want %d: records were lost", name, output, n, o.records)
		case n > o.records:
			// Allowed at least once, but unexpected without a failure.
			r.Note += fmt.Sprintf("; DUPLICATES: output has %d records, want %d", n, o.records)
		}
	}
	r.finish()
	return r, nil
}

// waitOutput polls output's end offsets every 10 ms until it holds every
// record, and returns the time since cnt's start when it first did. Under
// at-least-once the high watermarks must sum to o.records. Under
// exactly-once commit markers take offsets too, so it waits until no
// transaction is open (last stable offsets equal the high watermarks) and
// counts the committed records.
func (c *cluster) waitOutput(ctx context.Context, o *options, output string, cnt *counter, deadline time.Time, runErr <-chan error) (time.Duration, error) {
	for {
		hwm, err := c.offsets(output, o.partitions, sarama.ReadUncommitted)
		if err != nil {
			return 0, err
		}
		seen := cnt.since()
		var sum int64
		for _, h := range hwm {
			sum += h
		}
		if sum >= o.records {
			if o.guarantee == weir.AtLeastOnce {
				return seen, nil
			}
			lso, err := c.offsets(output, o.partitions, sarama.ReadCommitted)
			if err != nil {
				return 0, err
			}
			stable := true
			for p := range lso {
				stable = stable && lso[p] == hwm[p]
			}
			if stable {
				n, err := c.countRecords(ctx, output, lso, o.records, time.Now().Add(5*time.Second))
				if err != nil {
					return 0, err
				}
				if n >= o.records {
					return seen, nil
				}
			}
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case err := <-runErr:
			return 0, fmt.Errorf("waiting for the output: application stopped: %w", err)
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the output: %w", ctx.Err())
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("timed out after %v waiting for %s to hold %d records (it holds %d offsets)", o.timeout, output, o.records, sum)
		}
	}
}

// verifyOutput counts the committed records of output after the run.
func (c *cluster) verifyOutput(ctx context.Context, o *options, output string) (int64, error) {
	hwm, err := c.offsets(output, o.partitions, sarama.ReadUncommitted)
	if err != nil {
		return 0, err
	}
	var stopAt int64
	if o.guarantee != weir.AtLeastOnce {
		// Commit markers end the partitions: the count cannot tell when a
		// partition is read to its end, so stop at the expected count.
		stopAt = o.records
	}
	return c.countRecords(ctx, output, hwm, stopAt, time.Now().Add(o.timeout))
}

// withTimeout runs fn and gives up waiting for it after d.
func withTimeout(d time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("still running after %v", d)
	}
}

// forwardHandler is a sarama consumer group handler that copies every
// record to a producer, counts it and marks it.
type forwardHandler struct {
	c        *counter
	output   string
	producer sarama.AsyncProducer
}

func (forwardHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (forwardHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h forwardHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.c.add()
			msg := &sarama.ProducerMessage{Topic: h.output, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value), Timestamp: m.Timestamp}
			select {
			case h.producer.Input() <- msg:
			case <-sess.Context().Done():
				return nil
			}
			sess.MarkMessage(m, "")
		case <-sess.Context().Done():
			return nil
		}
	}
}

// weirProducerConfig sets a producer up as weir's stream threads do: the
// idempotent producer, acks from all replicas, one request in flight,
// murmur2 partitioning and a 5 ms linger.
func weirProducerConfig(sc *sarama.Config) {
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
}

// runSaramaPassthrough is the sarama peer of the weir passthrough: a
// consumer group (configured as in runSaramaGroup) whose handler sends
// every record to an AsyncProducer configured as weir's. With one member
// per -threads. The group and the producer use separate clients unless
// o.sharedClient, which makes them share one client, and so one broker
// connection, as a weir thread does. It does not wait for acks before it
// marks offsets: an upper bound for a consume-produce loop.
func runSaramaPassthrough(ctx context.Context, o *options, c *cluster, input, output, group string, round int) (*result, error) {
	const name = "sarama passthrough"
	c.addGroup(group)
	cnt := newCounter(o.records)
	failed := make(chan error, 2*o.threads)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	var closers []func() error // in closing order
	var wg sync.WaitGroup
	closeAll := func() error {
		stopConsuming()
		var errs []error
		for _, f := range closers {
			if err := f(); err != nil {
				errs = append(errs, err)
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	m, err := startMeasurement(o.profiling, wlSaramaPassthrough, round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	cnt.reset()
	for i := range o.threads {
		sc := saramaConfig(group + "-" + strconv.Itoa(i))
		sc.Consumer.MaxWaitTime = 50 * time.Millisecond
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
		sc.Consumer.Return.Errors = true
		weirProducerConfig(sc)
		var g sarama.ConsumerGroup
		var p sarama.AsyncProducer
		if o.sharedClient {
			client, err := sarama.NewClient(o.brokers, sc)
			if err == nil {
				if g, err = sarama.NewConsumerGroupFromClient(group, client); err == nil {
					if p, err = sarama.NewAsyncProducerFromClient(client); err != nil {
						g.Close()
					}
				}
				if err != nil {
					client.Close()
				}
			}
			if err != nil {
				_ = closeAll()
				return nil, fmt.Errorf("%s: member %d: %w", name, i, err)
			}
			closers = append(closers, g.Close, p.Close, client.Close)
		} else {
			pc := saramaConfig(group + "-producer-" + strconv.Itoa(i))
			weirProducerConfig(pc)
			g, err = sarama.NewConsumerGroup(o.brokers, group, sc)
			if err == nil {
				if p, err = sarama.NewAsyncProducer(o.brokers, pc); err != nil {
					g.Close()
				}
			}
			if err != nil {
				_ = closeAll()
				return nil, fmt.Errorf("%s: member %d: %w", name, i, err)
			}
			closers = append(closers, g.Close, p.Close)
		}
		h := forwardHandler{c: cnt, output: output, producer: p}
		wg.Go(func() {
			for consumeCtx.Err() == nil {
				err := g.Consume(consumeCtx, []string{input}, h)
				if consumeCtx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
					return
				}
				if err != nil {
					failed <- fmt.Errorf("member %d: %w", i, err)
					return
				}
			}
		})
		wg.Go(func() {
			for err := range g.Errors() {
				fmt.Fprintf(os.Stderr, "bench: %s: member %d: %v\n", name, i, err)
			}
		})
		wg.Go(func() {
			for range p.Successes() {
			}
		})
		wg.Go(func() {
			for e := range p.Errors() {
				select {
				case failed <- fmt.Errorf("member %d: producing: %w", i, e.Err):
				default:
				}
			}
		})
	}
	deadline := time.Now().Add(o.timeout)
	werr := cnt.waitDone(ctx, name, o.timeout, failed)
	end := time.Duration(cnt.last.Load())
	if werr == nil {
		end, werr = c.waitOutput(ctx, o, output, cnt, deadline, failed)
	}
	cpu, perr := m.stop()

	closeStart := time.Now()
	cerr := withTimeout(closeTimeout, closeAll)
	closeTime := time.Since(closeStart)
	if err := errors.Join(werr, perr); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s: closing: %w", name, cerr)
	}
	clients := "separate clients for group and producer"
	if o.sharedClient {
		clients = "one client shared by group and producer (as weir)"
	}
	r := &result{
		Workload:         wlSaramaPassthrough,
		Name:             name,
		Round:            round,
		Records:          o.records,
		Bytes:            o.records * int64(keySize+o.valueSize),
		FirstSeconds:     time.Duration(cnt.first.Load()).Seconds(),
		ProcessedSeconds: time.Duration(cnt.last.Load()).Seconds(),
		EndSeconds:       end.Seconds(),
		CPUSeconds:       cpu.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
		Note:             fmt.Sprintf("end = output complete; %d member(s), weir's producer settings, %s", o.threads, clients),
	}
	r.finish()
	return r, nil
}
