package integration

// Tests of weir over the broker's SASL_SSL listener (make kafka-up starts
// it: TLS with a certificate of its own and SASL PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 users; see integration/env/up.sh).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// secureListener is the broker's SASL_SSL listener and its test users.
type secureListener struct{ kafka.SecureListener }

// saslSSL returns the SASL_SSL listener make kafka-up describes in its
// environment, skipping the test without it (failing under CI=true).
func saslSSL(t *testing.T) secureListener { return secureListener{kafka.SASLSSL(t)} }

// securedConfig is a Config for the SASL_SSL listener with mechanism m.
func (l secureListener) config(t *testing.T, app string, m weir.SASLMechanism) weir.Config {
	user, pass := l.SCRAMUser, l.SCRAMPassword
	if m == weir.SASLPlain {
		user, pass = l.PlainUser, l.PlainPassword
	}
	return weir.Config{
		ApplicationID: app,
		Brokers:       l.Brokers,
		StateDir:      t.TempDir(),
		Guarantee:     weir.ExactlyOnce,
		Security: weir.Security{
			TLS:  &weir.TLS{CAFile: l.CAFile},
			SASL: weir.SASL{Mechanism: m, User: user, Password: pass},
		},
		Logger: testLogger(t),
	}
}

// An exactly-once App with a store runs over TLS with each SASL mechanism:
// its consumers, transactional producer, admin client and changelog all
// connect through the SASL_SSL listener, and its output is exact.
func TestExactlyOnceOverSASLSSL(t *testing.T) {
	t.Parallel()
	l := saslSSL(t)
	c := kafka.Cluster(t)
	for _, m := range []weir.SASLMechanism{weir.SASLScramSHA256, weir.SASLScramSHA512, weir.SASLPlain} {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			in, out := c.Name(t, "sec-in"), c.Name(t, "sec-out")
			c.CreateTopic(t, in, 2, nil)
			c.CreateTopic(t, out, 2, nil)
			const keys, seqs = 20, 10
			var msgs []*sarama.ProducerMessage
			for s := range seqs {
				for k := range keys {
					msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("k%02d", k)), Value: sarama.StringEncoder(strconv.Itoa(s))})
				}
			}
			kafka.Produce(t, c, msgs...)

			app, err := weir.New(maxSeqTopology(in, out), l.config(t, c.Name(t, "sec-app"), m))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan error, 1)
			go func() { stopped <- app.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-stopped; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			// Every key ends at the highest sequence number, seqs-1 (8
			// bytes, big-endian).
			done := map[string]bool{}
			kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
				if len(got) > 0 {
					last := got[len(got)-1]
					if v, err := serde.Int64().Deserialize(out, last.Value); err == nil && v == seqs-1 {
						done[string(last.Key)] = true
					}
				}
				return len(done) == keys
			})
		})
	}
}

// runFailsFast runs an App on the SASL_SSL listener with mechanism m and
// the change made to its Config, which must keep it from connecting, and
// returns Run's error; the test fails if Run is still going after a bound
// far above a fast failure.
func runFailsFast(t *testing.T, m weir.SASLMechanism, change func(*weir.Config)) error {
	t.Helper()
	l := saslSSL(t)
	c := kafka.Cluster(t)
	in, out := c.Name(t, "sec-in"), c.Name(t, "sec-out")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	cfg := l.config(t, c.Name(t, "sec-app"), m)
	change(&cfg)
	app, err := weir.New(maxSeqTopology(in, out), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = app.Run(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want it to fail on its own", err)
	}
	return err
}

func TestWrongPasswordFailsFast(t *testing.T) {
	t.Parallel()
	err := runFailsFast(t, weir.SASLScramSHA256, func(cfg *weir.Config) { cfg.Security.SASL.Password = "not-the-password-4f1c" })
	if !errors.Is(err, weir.ErrAuthentication) || !strings.Contains(err.Error(), "SCRAM-SHA-256") {
		t.Fatalf("Run = %v; want weir.ErrAuthentication naming the mechanism", err)
	}
	if strings.Contains(err.Error(), "not-the-password-4f1c") {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Logf("wrong password: %v", err)
}

func TestUntrustedCertificateFailsFast(t *testing.T) {
	t.Parallel()
	// The system's roots do not hold the test broker's certificate.
	err := runFailsFast(t, weir.SASLScramSHA512, func(cfg *weir.Config) { cfg.Security.TLS = &weir.TLS{} })
	if !errors.Is(err, weir.ErrTLS) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Run = %v; want weir.ErrTLS about the certificate", err)
	}
	t.Logf("untrusted certificate: %v", err)
}

// An App with Stores.EncryptionKey keeps no plaintext key in its state
// directory, refuses to start on it without the key (changing nothing),
// and starts with the key on the state it left.
func TestEncryptedStateAtRest(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "enc-in"), c.Name(t, "enc-out")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	const secret = "enc-secret-7c41e9"
	produce := func(seq int) {
		var msgs []*sarama.ProducerMessage
		for k := range 10 {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("%s-%02d", secret, k)), Value: sarama.StringEncoder(strconv.Itoa(seq))})
		}
		kafka.Produce(t, c, msgs...)
	}
	key := []byte("0123456789abcdef")
	cfg := weir.Config{ApplicationID: c.Name(t, "enc-app"), Brokers: c.Brokers, StateDir: t.TempDir(), Logger: testLogger(t)}
	cfg.Stores.EncryptionKey = key
	// run runs an App on cfg until every key's output reaches seq.
	run := func(cfg weir.Config, seq int64) {
		t.Helper()
		app, err := weir.New(maxSeqTopology(in, out), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- app.Run(ctx) }()
		reached := map[string]bool{}
		kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
			if len(got) > 0 {
				last := got[len(got)-1]
				if v, err := serde.Int64().Deserialize(out, last.Value); err == nil && v == seq {
					reached[string(last.Key)] = true
				}
			}
			return len(reached) == 10
		})
		cancel()
		if err := <-stopped; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	produce(1)
	run(cfg, 1)

	err := filepath.WalkDir(cfg.StateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s holds the plaintext key %q", path, secret)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, wrong := range [][]byte{nil, []byte("fedcba9876543210")} {
		bad := cfg
		bad.Stores.EncryptionKey = wrong
		app, err := weir.New(maxSeqTopology(in, out), bad)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = app.Run(ctx)
		cancel()
		if !errors.Is(err, weir.ErrStateEncryptionKey) || !strings.Contains(err.Error(), "Stores.EncryptionKey") {
			t.Fatalf("Run with key %q = %v; want weir.ErrStateEncryptionKey", wrong, err)
		}
	}

	// The right key finds the state intact: no store partition is
	// restored in full.
	restores := &restoreLog{}
	cfg.Stores.RestoreListener = restores
	produce(2)
	run(cfg, 2)
	for _, e := range restores.snapshot() {
		if e.Kind == "start" && e.Full {
			t.Errorf("store %s/%d restored in full after the refused starts: the state was lost", e.Store, e.Partition)
		}
	}
}
