package txn

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

func TestConfigureProducerMakesAValidTransactionalConfig(t *testing.T) {
	t.Parallel()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_1_0_0
	cfg.Producer.Return.Successes = false
	ConfigureProducer(cfg, "relay-1")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sarama rejects the configuration: %v", err)
	}
	if err := checkConfig(cfg); err != nil {
		t.Fatalf("checkConfig rejects the configuration: %v", err)
	}
	if cfg.Producer.Transaction.ID != "relay-1" || cfg.Version != sarama.V2_5_0_0 {
		t.Errorf("transactional id %q, version %s; want relay-1 and 2.5.0", cfg.Producer.Transaction.ID, cfg.Version)
	}
	// A newer version is kept.
	cfg.Version = sarama.V4_0_0_0
	ConfigureProducer(cfg, "relay-1")
	if cfg.Version != sarama.V4_0_0_0 {
		t.Errorf("ConfigureProducer lowered the version to %s", cfg.Version)
	}
}

func TestConfigureConsumer(t *testing.T) {
	t.Parallel()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_0_0_0
	ConfigureConsumer(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sarama rejects the configuration: %v", err)
	}
	if cfg.Consumer.IsolationLevel != sarama.ReadCommitted || cfg.Consumer.Offsets.AutoCommit.Enable || cfg.Version != sarama.V2_5_0_0 {
		t.Errorf("isolation %v, auto commit %v, version %s", cfg.Consumer.IsolationLevel, cfg.Consumer.Offsets.AutoCommit.Enable, cfg.Version)
	}
}

func TestCheckConfigNamesEveryProblem(t *testing.T) {
	t.Parallel()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0
	cfg.Producer.Transaction.ID = "x"
	cfg.Producer.Return.Successes = false
	cfg.Producer.Return.Errors = false
	err := checkConfig(cfg)
	if err == nil {
		t.Fatal("checkConfig accepted a configuration with three problems")
	}
	for _, field := range []string{"Producer.Return.Successes", "Producer.Return.Errors", "Version 2.4.0"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the error does not name %s: %v", field, err)
		}
	}
	// The version matters for transactions only.
	cfg = sarama.NewConfig()
	cfg.Version = sarama.V2_0_0_0
	cfg.Producer.Return.Successes = true
	if err := checkConfig(cfg); err != nil {
		t.Errorf("an at-least-once producer on 2.0 = %v", err)
	}
}

// session is a sarama.ConsumerGroupSession with a generation and member.
type session struct {
	sarama.ConsumerGroupSession
	generation int32
	member     string
}

func (s session) GenerationID() int32 { return s.generation }
func (s session) MemberID() string    { return s.member }

func TestSessionGroup(t *testing.T) {
	t.Parallel()
	s := session{generation: 7, member: "m-1"}
	g := SessionGroup(s, "relay", "")
	if g.GroupID != "relay" || g.GenerationID != 7 || g.MemberID != "m-1" || g.GroupInstanceID != nil {
		t.Errorf("SessionGroup = %+v", g)
	}
	g = SessionGroup(s, "relay", "host-a")
	if g.GroupInstanceID == nil || *g.GroupInstanceID != "host-a" {
		t.Errorf("SessionGroup with static membership = %+v", g)
	}
}
