package kafka

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// upper forwards each record with its value in upper case.
type upper struct{}

func (upper) Init(processor.Context[string, string]) error { return nil }

func (upper) Close() error { return nil }

func (upper) Process(ctx processor.Context[string, string], r processor.Record[string, string]) error {
	r.Value = strings.ToUpper(r.Value)
	return ctx.Forward(r)
}

// The embedded broker runs an App end to end with the kit's helpers: the
// wiring a quick test checks (not Kafka's behaviour).
func TestEmbeddedRunsAnApp(t *testing.T) {
	t.Parallel()
	c := Embedded(t, 2, "in")
	if c.Source != SourceEmbedded || c.RegistryURL != "" || len(c.Brokers) == 0 {
		t.Fatalf("embedded env: %+v", c)
	}
	out := c.Name(t, "out")
	c.CreateTopic(t, out, 2, nil)

	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	up := top.AddProcessor("upper", func() processor.Processor[string, string, string, string] { return upper{} }, src)
	top.AddSink("out", out, serde.String(), serde.String(), up)
	app, err := weir.New(top, weir.Config{ApplicationID: c.Name(t, "app"), Brokers: c.Brokers, StateDir: t.TempDir(), Guarantee: weir.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	Run(t, app)
	if st, _ := app.State(); st != weir.StateRunning {
		t.Fatalf("Run returned with the App %v", st)
	}

	Produce(t, c, &sarama.ProducerMessage{Topic: "in", Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("hello")})
	got := ReadAll(t, c, out, sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
	if string(got[0].Key) != "k" || string(got[0].Value) != "HELLO" {
		t.Fatalf("output %q=%q, want k=HELLO", got[0].Key, got[0].Value)
	}
}
