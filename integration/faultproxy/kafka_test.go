package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// The tests in this file run sarama against the test broker through the
// proxy. They need the broker's PROXIED listener (WEIR_PROXIED_UPSTREAM),
// which advertises the proxy's address (WEIR_FAULT_PROXY_ADDR), and listen
// on that fixed address, so they do not run in parallel.

// startProxied starts the proxy on WEIR_FAULT_PROXY_ADDR in front of
// WEIR_PROXIED_UPSTREAM, skipping the test without them (failing under
// CI=true, where integration tests never skip).
func startProxied(t *testing.T) *Proxy {
	t.Helper()
	upstream, listen := os.Getenv("WEIR_PROXIED_UPSTREAM"), os.Getenv("WEIR_FAULT_PROXY_ADDR")
	if upstream == "" || listen == "" {
		msg := "WEIR_PROXIED_UPSTREAM or WEIR_FAULT_PROXY_ADDR is not set (integration/env/up.sh writes both to its env.sh)"
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// The address is fixed by the broker's configuration, so another test
	// binary of the module (go test runs packages in parallel) may hold it:
	// wait for it to be free, for a bounded time.
	var p *Proxy
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var err error
		if p, err = Start(listen, upstream); err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		for _, e := range p.Log() {
			t.Log("fault:", e)
		}
		p.Close()
	})
	return p
}

// saramaOut receives sarama's log. Sarama's Logger is a global that its
// background goroutines read (closing a broker asynchronously, for one), so
// it is set once here and never swapped; saramaLog points the writer at one
// test's buffer instead. These tests are not parallel for that reason too.
var saramaOut switchWriter

func init() { sarama.Logger = log.New(&saramaOut, "sarama: ", log.Lmicroseconds) }

type switchWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer // nil: discard
}

func (w *switchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf != nil {
		w.buf.Write(p)
	}
	return len(p), nil
}

// saramaLog collects sarama's log for the test's duration and prints it if
// the test fails or runs with -v. It returns a function giving the log so
// far.
func saramaLog(t *testing.T) func() string {
	buf := new(bytes.Buffer)
	saramaOut.mu.Lock()
	saramaOut.buf = buf
	saramaOut.mu.Unlock()
	text := func() string {
		saramaOut.mu.Lock()
		defer saramaOut.mu.Unlock()
		return buf.String()
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Log(text())
		}
		saramaOut.mu.Lock()
		saramaOut.buf = nil
		saramaOut.mu.Unlock()
	})
	return text
}

func saramaConfig(clientID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ClientID = clientID
	return cfg
}

// createTopic creates a one-partition topic with a unique name through the
// proxy and deletes it when the test ends.
func createTopic(t *testing.T, p *Proxy, name string) string {
	t.Helper()
	admin, err := sarama.NewClusterAdmin([]string{p.Addr()}, saramaConfig("faultproxy-admin"))
	if err != nil {
		t.Fatal(err)
	}
	topic := fmt.Sprintf("faultproxy-%s-%d", name, time.Now().UnixNano())
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Clear()
		if err := admin.DeleteTopic(topic); err != nil {
			t.Errorf("delete %s: %v", topic, err)
		}
		admin.Close()
	})
	return topic
}

// consume reads want records from the start of the topic's partition 0
// through the proxy, with the given isolation level.
func consume(t *testing.T, p *Proxy, topic string, isolation sarama.IsolationLevel, want int) []string {
	t.Helper()
	cfg := saramaConfig("faultproxy-consumer")
	cfg.Consumer.IsolationLevel = isolation
	consumer, err := sarama.NewConsumer([]string{p.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []string
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
		case err := <-pc.Errors():
			t.Fatalf("consume %s: %v", topic, err)
		case <-timeout:
			t.Fatalf("consumed %v from %s in 30s, want %d records", got, topic, want)
		}
	}
	return got
}

func values(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "v" + strconv.Itoa(i)
	}
	return out
}

// TestKafkaThroughProxy produces and consumes through the proxy and checks
// that the broker's metadata sends every connection back through it.
func TestKafkaThroughProxy(t *testing.T) {
	p := startProxied(t)
	saramaLog(t)
	topic := createTopic(t, p, "plain")

	cfg := saramaConfig("faultproxy-producer")
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	client, err := sarama.NewClient([]string{p.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, b := range client.Brokers() {
		if b.Addr() != p.Addr() {
			t.Fatalf("metadata names broker %s, want the proxy %s: the PROXIED listener must advertise it", b.Addr(), p.Addr())
		}
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	want := values(10)
	for _, v := range want {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := producer.Close(); err != nil {
		t.Fatal(err)
	}
	if got := consume(t, p, topic, sarama.ReadUncommitted, len(want)); !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
	st := p.Stats()
	if st.Requests[Produce] < 1 || st.Requests[Fetch] < 1 || st.Requests[Metadata] < 1 || st.Cut != 0 {
		t.Fatalf("stats %+v, want Produce, Fetch and Metadata through the proxy and no cut", st)
	}
}

// TestKafkaDroppedEndTxn drops the response to a transactional producer's
// EndTxn, once, for a commit and for an abort, the rule telling the two
// apart by the request's committed flag as sarama encodes it. The broker
// ends the transaction either way, as a read_committed consumer shows.
// What the producer learns depends on sarama's retries: by default
// (Producer.Transaction.Retry.Max = 50, what weir uses) it takes the cut
// connection for a network error, sends EndTxn again on a new one, and the
// broker answers the retry with success because that transaction already
// ended that way, so CommitTxn (AbortTxn) succeeds. Without retries
// CommitTxn fails although the broker committed: the ambiguous outcome
// weir's transaction handling must not take for an abort.
func TestKafkaDroppedEndTxn(t *testing.T) {
	for _, tc := range []struct {
		name         string
		abort        bool
		retries      int // Producer.Transaction.Retry.Max; -1 = sarama's default
		wantErr      bool
		wantRequests int // EndTxn requests through the proxy
	}{
		{"commit, sarama retries", false, -1, false, 2},
		{"commit, no retries", false, 0, true, 1},
		{"abort, sarama retries", true, -1, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxied(t)
			saramaLog(t)
			topic := createTopic(t, p, "txn")

			cfg := saramaConfig("faultproxy-txn")
			cfg.Producer.Idempotent = true
			cfg.Producer.RequiredAcks = sarama.WaitForAll
			cfg.Producer.Return.Successes = true
			cfg.Net.MaxOpenRequests = 1
			cfg.Producer.Transaction.ID = topic
			if tc.retries >= 0 {
				cfg.Producer.Transaction.Retry.Max = tc.retries
			}
			producer, err := sarama.NewSyncProducer([]string{p.Addr()}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer producer.Close()

			end, other := CommitTxnEnd, AbortTxnEnd
			if tc.abort {
				end, other = other, end
			}
			// The rule for the other end never fires: it is checked first,
			// so it would act on this EndTxn if it matched.
			p.Add(Rule{APIs: []APIKey{EndTxn}, TxnEnd: other, Action: Cut})
			p.Add(Rule{APIs: []APIKey{EndTxn}, TxnEnd: end, Action: DropResponse, Once: true})
			send := func(vs []string) {
				t.Helper()
				if err := producer.BeginTxn(); err != nil {
					t.Fatal(err)
				}
				for _, v := range vs {
					if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := values(3)
			send(want)
			if tc.abort {
				err = producer.AbortTxn()
			} else {
				err = producer.CommitTxn()
			}
			t.Logf("EndTxn (%v): %v; transaction status %v; EndTxn requests %d",
				end, err, producer.TxnStatus(), p.Stats().Requests[EndTxn])
			if (err != nil) != tc.wantErr {
				t.Fatalf("ending the transaction returned %v, want an error: %t", err, tc.wantErr)
			}
			if st := p.Stats(); st.Fired[DropResponse] != 1 || st.Fired[Cut] != 0 || st.Requests[EndTxn] != tc.wantRequests {
				t.Fatalf("stats %+v, want 1 EndTxn response dropped of %d EndTxn, nothing cut", st, tc.wantRequests)
			}
			if tc.abort {
				// A committed transaction after the aborted one: read
				// read_committed, it must be all there is.
				p.Clear()
				want = []string{"after the abort"}
				send(want)
				if err := producer.CommitTxn(); err != nil {
					t.Fatal(err)
				}
			}
			if got := consume(t, p, topic, sarama.ReadCommitted, len(want)); !slices.Equal(got, want) {
				t.Fatalf("read_committed consumed %v, want %v", got, want)
			}
		})
	}
}
