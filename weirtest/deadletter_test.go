package weirtest_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

type payment struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// paymentTopology reads JSON payments, fails on negative amounts at
// "check" and writes the accepted ones to "ok".
func paymentTopology() *processor.Topology {
	t := processor.NewTopology()
	in := t.AddSource("payments", "payments", serde.String(), serde.JSON[payment]())
	check := t.AddProcessor("check", processor.Func(func(ctx processor.Context[string, payment], rec processor.Record[string, payment]) error {
		if rec.Value.Cents < 0 {
			return errors.New("negative amount")
		}
		return ctx.Forward(rec)
	}), in)
	t.AddSink("ok", "ok", serde.String(), serde.JSON[payment](), check)
	return t
}

func header(r processor.Record[[]byte, []byte], key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// TestDeadLetterKeepsTheRawRecord: under DeadLetter a record that does not
// deserialize and a record a processor fails on go to the dead-letter
// topic with their raw key, value and headers, and headers that say where
// they came from and why; the good records around them are processed.
func TestDeadLetterKeepsTheRawRecord(t *testing.T) {
	t.Parallel()
	d, err := weirtest.New(paymentTopology(), weirtest.Config{
		DeserializationErrors: weir.DeadLetter("dlq"), ProcessingErrors: weir.DeadLetter("dlq"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw := weirtest.Input(d, "payments", serde.Bytes(), serde.Bytes())
	ts := time.UnixMilli(1_700_000_000_000)
	inputs := []struct{ key, value string }{
		{"a", `{"account":"a","cents":5}`},
		{"b", `{"account":"b",`}, // invalid JSON
		{"c", `{"account":"c","cents":-1}`},
		{"d", ``}, // 0 bytes
		{"e", `{"account":"e","cents":7}`},
	}
	for i, in := range inputs {
		if err := raw.Pipe([]byte(in.key), []byte(in.value), ts.Add(time.Duration(i)*time.Second), processor.Header{Key: "trace", Value: []byte(in.key)}); err != nil {
			t.Fatalf("Pipe %s: %v", in.key, err)
		}
	}
	ok, err := weirtest.Output(d, "ok", serde.String(), serde.JSON[payment]()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var accepted []string
	for _, r := range ok {
		accepted = append(accepted, r.Key)
	}
	if !slices.Equal(accepted, []string{"a", "e"}) {
		t.Fatalf("accepted %v, want [a e]", accepted)
	}
	dead, err := weirtest.Output(d, "dlq", serde.Bytes(), serde.Bytes()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ key, kind, node string }{{"b", "deserialization", "payments"}, {"c", "processing", "check"}, {"d", "deserialization", "payments"}}
	if len(dead) != len(want) {
		t.Fatalf("%d dead-letter records, want %d", len(dead), len(want))
	}
	for i, w := range want {
		r := dead[i]
		in := inputs[w.key[0]-'a']
		if string(r.Key) != in.key || string(r.Value) != in.value {
			t.Errorf("dead letter %d = %q/%q, want the raw record %q/%q", i, r.Key, r.Value, in.key, in.value)
		}
		offset := int64(w.key[0] - 'a')
		for k, v := range map[string]string{
			weir.DeadLetterHeaderKind: w.kind, weir.DeadLetterHeaderNode: w.node, weir.DeadLetterHeaderTopic: "payments",
			weir.DeadLetterHeaderPartition: "0", weir.DeadLetterHeaderOffset: strconv.FormatInt(offset, 10),
			weir.DeadLetterHeaderTimestamp:   strconv.FormatInt(ts.Add(time.Duration(offset)*time.Second).UnixMilli(), 10),
			weir.DeadLetterHeaderApplication: "weirtest", "trace": in.key,
		} {
			if got, _ := header(r, k); got != v {
				t.Errorf("dead letter %d (%s): header %s = %q, want %q", i, w.key, k, got, v)
			}
		}
		if msg, _ := header(r, weir.DeadLetterHeaderMessage); msg == "" {
			t.Errorf("dead letter %d (%s) has no error message", i, w.key)
		}
	}
}

// TestTopicErrorsOverrideTheDefault: a policy of Config.TopicErrors
// applies to its topic's records only; the others keep the default.
func TestTopicErrorsOverrideTheDefault(t *testing.T) {
	t.Parallel()
	top := processor.NewTopology()
	for _, topic := range []string{"partner", "own"} {
		src := top.AddSource(topic, topic, serde.String(), serde.JSON[payment]())
		top.AddSink(topic+"-ok", topic+"-ok", serde.String(), serde.JSON[payment](), src)
	}
	d, err := weirtest.New(top, weirtest.Config{
		TopicErrors: map[string]weir.ErrorPolicies{"partner": {Deserialization: weir.DeadLetter("partner-dlq")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	partner := weirtest.Input(d, "partner", serde.String(), serde.String())
	own := weirtest.Input(d, "own", serde.String(), serde.String())
	if err := partner.Pipe("p", "not json", time.Unix(1, 0)); err != nil {
		t.Fatalf("a poison record of partner, dead-lettered: Pipe = %v", err)
	}
	dead, err := weirtest.Output(d, "partner-dlq", serde.String(), serde.String()).ReadAll()
	if err != nil || len(dead) != 1 || dead[0].Value != "not json" {
		t.Fatalf("partner-dlq = %v, %v; want the poison record", dead, err)
	}
	err = own.Pipe("o", "not json", time.Unix(2, 0))
	var re *weir.RecordError
	if !errors.As(err, &re) || re.Topic != "own" || re.Node != "own" {
		t.Fatalf("a poison record of own, under the default Fail: Pipe = %v, want a *weir.RecordError naming own", err)
	}
}

// panicky is a serde whose Deserialize panics on the bytes "boom", as a
// serde with a bug (or a library's decoder) might on bytes it did not
// expect.
type panicky struct{ serde.Serde[string] }

func (p panicky) Deserialize(topic string, data []byte) (string, error) {
	if string(data) == "boom" {
		var m map[string]int
		m["x"]++ // nil map: panics
	}
	return p.Serde.Deserialize(topic, data)
}

// TestPanickingSerdeIsDeadLettered: a deserializer that panics on a record
// does not crash the application: the panic is a deserialization error,
// which the policy dead-letters, and the records around it are processed.
func TestPanickingSerdeIsDeadLettered(t *testing.T) {
	t.Parallel()
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), panicky{serde.String()})
	top.AddSink("out", "out", serde.String(), serde.String(), src)
	d, err := weirtest.New(top, weirtest.Config{DeserializationErrors: weir.DeadLetter("dlq")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	for _, v := range []string{"a", "boom", "b"} {
		if err := in.Pipe("k", v, time.UnixMilli(1)); err != nil {
			t.Fatalf("Pipe %q: %v", v, err)
		}
	}
	out, err := weirtest.Output(d, "out", serde.String(), serde.String()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range out {
		got = append(got, r.Value)
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("processed %v, want [a b]", got)
	}
	dead, err := weirtest.Output(d, "dlq", serde.Bytes(), serde.Bytes()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || string(dead[0].Value) != "boom" {
		t.Fatalf("dead letters %v, want the record boom", dead)
	}
	if kind, _ := header(dead[0], weir.DeadLetterHeaderKind); kind != "deserialization" {
		t.Errorf("dead letter kind %q, want deserialization", kind)
	}
}

// TestTimestampErrors: a record whose timestamp extractor fails stops the
// driver under the default policy, and is skipped under Skip while the
// records around it are processed.
func TestTimestampErrors(t *testing.T) {
	t.Parallel()
	topology := func() *processor.Topology {
		t := processor.NewTopology()
		in := t.AddSource("in", "in", serde.String(), serde.String(),
			processor.WithTimestampExtractor(func(rec processor.Record[string, string], _ time.Time) (time.Time, error) {
				ms, err := strconv.ParseInt(rec.Value, 10, 64)
				return time.UnixMilli(ms), err
			}))
		t.AddSink("out", "out", serde.String(), serde.String(), in)
		return t
	}
	for _, c := range []struct {
		policy  weir.ErrorPolicy
		failed  bool
		outputs []string
	}{
		{weir.Fail, true, []string{"1000"}},
		{weir.Skip, false, []string{"1000", "3000"}},
	} {
		d, err := weirtest.New(topology(), weirtest.Config{TimestampErrors: c.policy})
		if err != nil {
			t.Fatal(err)
		}
		in := weirtest.Input(d, "in", serde.String(), serde.String())
		var errs []error
		for _, v := range []string{"1000", "not a time", "3000"} {
			if err := in.Pipe("k", v, time.UnixMilli(0)); err != nil {
				errs = append(errs, err)
			}
		}
		if failed := len(errs) > 0; failed != c.failed {
			t.Errorf("policy %v: errors %v, want failure %v", c.policy, errs, c.failed)
		}
		recs, err := weirtest.Output(d, "out", serde.String(), serde.String()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Value)
		}
		if !slices.Equal(got, c.outputs) {
			t.Errorf("policy %v: outputs %v, want %v", c.policy, got, c.outputs)
		}
		d.Close()
	}
}
