package weir

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

func TestValidateNamesEveryBadField(t *testing.T) {
	t.Parallel()
	c := Config{
		ApplicationID:   "bad id",
		Brokers:         []string{"nohost"},
		Threads:         -1,
		CommitInterval:  time.Microsecond,
		Queue:           QueueConfig{MaxRecords: -1, MaxBytes: -1},
		Consumer:        ConsumerConfig{SessionTimeout: time.Second, HeartbeatInterval: 2 * time.Second},
		Security:        Security{SASL: SASL{Mechanism: "GSSAPI"}},
		StandbyReplicas: -1,
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, field := range []string{
		"Config.ApplicationID", "Config.Brokers", "Config.Threads", "Config.CommitInterval",
		"Config.Queue.MaxRecords", "Config.Queue.MaxBytes", "Config.Consumer.HeartbeatInterval",
		"Config.Security.SASL.Mechanism", "Config.StandbyReplicas",
	} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s:\n%v", field, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	eos := Config{ApplicationID: "a", Brokers: []string{"h:1"}}.withDefaults()
	alos := Config{ApplicationID: "a", Brokers: []string{"h:1"}, Guarantee: AtLeastOnce}.withDefaults()
	if eos.CommitInterval != 100*time.Millisecond || alos.CommitInterval != 30*time.Second {
		t.Errorf("commit intervals %v / %v, want 100ms / 30s", eos.CommitInterval, alos.CommitInterval)
	}
	if eos.Threads != 1 || eos.Queue.MaxRecords != 1000 || eos.Queue.MaxBytes != 16<<20 || eos.Logger == nil {
		t.Errorf("defaults not applied: %+v", eos)
	}
	if eos.Consumer.HeartbeatInterval != eos.Consumer.SessionTimeout/3 {
		t.Errorf("heartbeat %v, want a third of %v", eos.Consumer.HeartbeatInterval, eos.Consumer.SessionTimeout)
	}
}

func TestParseGuarantee(t *testing.T) {
	t.Parallel()
	for _, g := range []Guarantee{ExactlyOnce, AtLeastOnce} {
		back, err := ParseGuarantee(g.String())
		if err != nil || back != g {
			t.Errorf("ParseGuarantee(%q) = %v, %v", g.String(), back, err)
		}
	}
	if _, err := ParseGuarantee("exactly-once"); err == nil {
		t.Error("accepted a misspelled guarantee")
	}
}

func TestNewReportsTopologyAndConfigTogether(t *testing.T) {
	t.Parallel()
	tp := processor.NewTopology()
	tp.AddSource[string, string]("", "in", nil, serde.String())
	_, err := New(tp, Config{Guarantee: AtLeastOnce})
	if err == nil {
		t.Fatal("New accepted an invalid topology and config")
	}
	for _, want := range []string{"empty name", "nil serde", "Config.ApplicationID", "Config.Brokers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestTransactionTimeoutAboveCommitInterval(t *testing.T) {
	t.Parallel()
	c := Config{ApplicationID: "a", Brokers: []string{"h:1"}, CommitInterval: 5 * time.Second, TransactionTimeout: 2 * time.Second}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Config.TransactionTimeout") {
		t.Fatalf("Validate = %v, want an error naming TransactionTimeout", err)
	}
	d := Config{ApplicationID: "a", Brokers: []string{"h:1"}, CommitInterval: 8 * time.Second}.withDefaults()
	if d.TransactionTimeout != 16*time.Second {
		t.Errorf("default TransactionTimeout with an 8s commit interval = %v, want 16s", d.TransactionTimeout)
	}
	if e := (Config{ApplicationID: "a", Brokers: []string{"h:1"}}).withDefaults(); e.TransactionTimeout != 10*time.Second {
		t.Errorf("default TransactionTimeout = %v, want 10s", e.TransactionTimeout)
	}
}

func TestMaxCommitInterval(t *testing.T) {
	t.Parallel()
	base := Config{ApplicationID: "a", Brokers: []string{"h:1"}}
	for _, c := range []struct {
		name string
		cfg  func(Config) Config
		want time.Duration // the default applied; 0 when Validate must refuse
	}{
		{"exactly once", func(c Config) Config { return c }, time.Second},
		{"at least once", func(c Config) Config { c.Guarantee = AtLeastOnce; return c }, 30 * time.Second},
		{"a long commit interval", func(c Config) Config { c.CommitInterval = 3 * time.Second; return c }, 3 * time.Second},
		{"a short transaction timeout", func(c Config) Config { c.TransactionTimeout = time.Second; return c }, 500 * time.Millisecond},
		{"explicit", func(c Config) Config { c.MaxCommitInterval = 2 * time.Second; return c }, 2 * time.Second},
		{"below the commit interval", func(c Config) Config { c.Guarantee = AtLeastOnce; c.MaxCommitInterval = time.Second; return c }, 0},
		{"not below the transaction timeout", func(c Config) Config {
			c.MaxCommitInterval, c.TransactionTimeout = 2*time.Second, 2*time.Second
			return c
		}, 0},
		{"negative", func(c Config) Config { c.MaxCommitInterval = -time.Second; return c }, 0},
	} {
		cfg := c.cfg(base)
		err := cfg.Validate()
		if c.want == 0 {
			if err == nil || !strings.Contains(err.Error(), "MaxCommitInterval") {
				t.Errorf("%s: Validate = %v, want an error naming MaxCommitInterval", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Validate = %v", c.name, err)
		}
		if d := cfg.withDefaults(); d.MaxCommitInterval != c.want || d.TransactionTimeout <= d.MaxCommitInterval {
			t.Errorf("%s: MaxCommitInterval %v (TransactionTimeout %v), want %v", c.name, d.MaxCommitInterval, d.TransactionTimeout, c.want)
		}
	}
}

// The policies of Config reach the runtime's task configuration.
func TestErrorPolicyMatchesTheRuntimes(t *testing.T) {
	c := Config{ProductionErrors: Skip, DeserializationErrors: DeadLetter("dlq"), ProcessingErrors: DeadLetter("dlq2")}
	tc := c.taskConfig()
	if tc.ProductionErrors != task.Skip || tc.DeserializationErrors.DeadLetterTopic() != "dlq" ||
		tc.ProcessingErrors.DeadLetterTopic() != "dlq2" || !tc.TimestampErrors.Fails() || !tc.ExactlyOnce {
		t.Fatalf("the policies do not reach the runtime: %+v", tc)
	}
	if got := c.deadLetterTopics(); !slices.Equal(got, []string{"dlq", "dlq2"}) {
		t.Fatalf("dead-letter topics = %v, want [dlq dlq2]", got)
	}
	if d := (Config{}).withDefaults(); d.ProcessingErrors != Fail || d.DeserializationErrors != Fail {
		t.Fatalf("default policies = %q, %q; want fail", d.ProcessingErrors, d.DeserializationErrors)
	}
}

func TestErrorPolicyValidation(t *testing.T) {
	for _, c := range []struct {
		policy ErrorPolicy
		ok     bool
	}{
		{"", true}, {Fail, true}, {Skip, true}, {DeadLetter("dlq"), true},
		{DeadLetter(""), false}, {"retry", false}, {"dead-letter", false},
	} {
		cfg := Config{ApplicationID: "a", Brokers: []string{"h:1"}, ProcessingErrors: c.policy}
		d := cfg.withDefaults()
		err := d.Validate()
		if (err == nil) != c.ok {
			t.Errorf("ProcessingErrors %q: Validate = %v, want ok %v", c.policy, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "ProcessingErrors") {
			t.Errorf("ProcessingErrors %q: the error does not name the field: %v", c.policy, err)
		}
	}
	cfg := Config{ApplicationID: "a", Brokers: []string{"h:1"}, ProductionErrors: DeadLetter("b"),
		TopicErrors: map[string]ErrorPolicies{"feed": {Processing: "retry", Deserialization: DeadLetter("a")}}}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `TopicErrors["feed"].Processing`) {
		t.Errorf("Validate with a bad per-topic policy = %v, want an error naming TopicErrors[\"feed\"].Processing", err)
	}
	if got := cfg.deadLetterTopics(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("dead-letter topics = %v, want [a b] (the per-topic one too)", got)
	}
	tc := cfg.taskConfig()
	if p := tc.PoliciesFor("feed"); p.Deserialization != task.DeadLetter("a") || p.Production != task.DeadLetter("b") {
		t.Errorf("policies of feed = %+v, want its own deserialization policy and the default production one", p)
	}
	if DeadLetter("dlq").DeadLetterTopic() != "dlq" || Skip.DeadLetterTopic() != "" {
		t.Error("DeadLetterTopic does not give the topic back")
	}
}

// Record caching is off unless CacheMaxBytes is above 0; a negative
// bound is a mistake, not another way to say off.
func TestCacheMaxBytes(t *testing.T) {
	base := Config{ApplicationID: "a", Brokers: []string{"h:1"}}
	if d := base.withDefaults(); d.cacheBudget() != nil {
		t.Error("caching is on by default")
	}
	on := base
	on.CacheMaxBytes = 1 << 20
	if on.cacheBudget() == nil {
		t.Error("CacheMaxBytes 1 MiB does not turn caching on")
	}
	bad := base
	bad.CacheMaxBytes = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "CacheMaxBytes") {
		t.Errorf("Validate with CacheMaxBytes -1 = %v, want an error naming the field", err)
	}
}

// ClientID names every client weir opens (ApplicationID by default), and
// Net.RequestTimeout reaches sarama's request timeouts.
func TestClientIDAndRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg        Config
		wantThread string
		timeout    time.Duration
	}{
		{Config{ApplicationID: "app", Brokers: []string{"h:1"}}, "app-0", 30 * time.Second},
		{Config{ApplicationID: "app", Brokers: []string{"h:1"}, ClientID: "app-i2", Net: NetConfig{RequestTimeout: 3 * time.Second}}, "app-i2-0", 3 * time.Second},
	} {
		d := tc.cfg.withDefaults()
		sc := client.Thread(d.clientOptions(), "pid", 0, nil)
		if sc.ClientID != tc.wantThread {
			t.Errorf("ClientID %q: thread 0's client id = %q, want %q", tc.cfg.ClientID, sc.ClientID, tc.wantThread)
		}
		if sc.Net.ReadTimeout != tc.timeout || sc.Net.WriteTimeout != tc.timeout {
			t.Errorf("RequestTimeout %v: read/write timeouts %v/%v, want %v", tc.cfg.Net.RequestTimeout, sc.Net.ReadTimeout, sc.Net.WriteTimeout, tc.timeout)
		}
	}
	bad := Config{ApplicationID: "app", Brokers: []string{"h:1"}, Net: NetConfig{RequestTimeout: 500 * time.Millisecond}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Net.RequestTimeout") {
		t.Errorf("RequestTimeout 500ms: Validate = %v, want it named", err)
	}
}

// The deprecated Config.State still configures the stores when Stores is
// left zero, is validated as Stores is, and is refused beside Stores.
func TestDeprecatedStateIsStores(t *testing.T) {
	old := Config{ApplicationID: "a", Brokers: []string{"h:1"}, State: StoresConfig{MaxBufferBytes: 1 << 10}}
	if err := old.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := old.withDefaults(); got.Stores.MaxBufferBytes != 1<<10 || !reflect.ValueOf(got.State).IsZero() {
		t.Fatalf("withDefaults: Stores.MaxBufferBytes = %d, State = %+v; want State moved into Stores", got.Stores.MaxBufferBytes, got.State)
	}
	neg := Config{ApplicationID: "a", Brokers: []string{"h:1"}, State: StoresConfig{MaxBufferBytes: -1}}
	if err := neg.Validate(); err == nil || !strings.Contains(err.Error(), "Stores.MaxBufferBytes") {
		t.Fatalf("a negative State.MaxBufferBytes: %v", err)
	}
	both := Config{ApplicationID: "a", Brokers: []string{"h:1"}, State: StoresConfig{MaxBufferBytes: 1}, Stores: StoresConfig{MaxBufferBytes: 2}}
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "Config.State") {
		t.Fatalf("State and Stores both set: %v", err)
	}
}
