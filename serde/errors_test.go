package serde

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The built-in serdes never quote their input in an error: weir passes a
// serde's error text on as it is (in a RecordError, in the log line of a
// skipped record), and its promise that record contents never appear
// holds only if the serde keeps it. Every failure of every built-in is fed
// a payload carrying a marker, which must not appear in the error, whether
// as text, quoted or in hex.
func TestErrorsDoNotQuoteData(t *testing.T) {
	t.Parallel()
	const marker = "SECRET-PAYLOAD"
	forms := []string{marker[:6], strings.ToLower(marker[:6]), hex.EncodeToString([]byte(marker[:6])), strings.ToUpper(hex.EncodeToString([]byte(marker[:6])))}
	cases := []struct {
		name string
		run  func() error
	}{
		{"String.Deserialize invalid UTF-8", func() error { _, err := String().Deserialize("t", []byte(marker+"\xff")); return err }},
		{"String.Serialize invalid UTF-8", func() error { _, err := String().Serialize("t", marker+"\xff"); return err }},
		{"Int64.Deserialize short", func() error { _, err := Int64().Deserialize("t", []byte(marker[:5])); return err }},
		{"Int64.Deserialize long", func() error { _, err := Int64().Deserialize("t", []byte(marker)); return err }},
		{"Int32.Deserialize long", func() error { _, err := Int32().Deserialize("t", []byte(marker)); return err }},
		{"Float64.Deserialize long", func() error { _, err := Float64().Deserialize("t", []byte(marker)); return err }},
		{"UUID.Deserialize long", func() error { _, err := UUID().Deserialize("t", []byte(marker)); return err }},
		{"UUID.Deserialize not hex", func() error {
			_, err := UUID().Deserialize("t", []byte("SECRET-P-AYLO-AD00-000000000000SECR"+"E"))
			return err
		}},
		{"JSON.Deserialize syntax", func() error {
			_, err := JSON[map[string]int]().Deserialize("t", []byte(`{"a": `+marker+`}`))
			return err
		}},
		{"JSON.Deserialize string into int", func() error {
			_, err := JSON[map[string]int]().Deserialize("t", []byte(`{"a": "`+marker+`"}`))
			return err
		}},
		{"JSON.Deserialize overflow", func() error {
			_, err := JSON[int8]().Deserialize("t", []byte(`5`+hex.EncodeToString([]byte(marker[:6]))))
			return err
		}},
		{"JSON.Deserialize time", func() error { _, err := JSON[time.Time]().Deserialize("t", []byte(`"`+marker+`"`)); return err }},
		// encoding/json names the field path of a type error, map keys
		// included, and quotes a string that is not a json.Number or a
		// ",string" number.
		{"JSON.Deserialize map key in the field path", func() error {
			_, err := JSON[map[string]map[string]int]().Deserialize("t", []byte(`{"a": {"`+marker+`": "x"}}`))
			return err
		}},
		{"JSON.Deserialize json.Number", func() error { _, err := JSON[json.Number]().Deserialize("t", []byte(`"`+marker+`"`)); return err }},
		{"JSON.Deserialize string tag", func() error {
			_, err := JSON[struct {
				N int `json:",string"`
			}]().Deserialize("t", []byte(`{"N": "`+marker+`"}`))
			return err
		}},
		{"JSON.Serialize unsupported", func() error {
			_, err := JSON[map[string]any]().Serialize("t", map[string]any{marker: make(chan int)})
			return err
		}},
		{"Avro.Deserialize wrong magic", func() error { _, err := avroMarker(t).Deserialize("t", []byte(marker)); return err }},
		{"Avro.Deserialize short", func() error { _, err := avroMarker(t).Deserialize("t", []byte(marker[:4])); return err }},
		{"Avro.Deserialize bad body", func() error {
			_, err := avroMarker(t).Deserialize("t", append([]byte{0, 0, 0, 0, 1, 0xff}, marker...))
			return err
		}},
		{"Avro.Deserialize unknown id", func() error {
			_, err := avroMarker(t).Deserialize("t", append([]byte{0, 0, 0, 0, 9}, marker...))
			return err
		}},
		{"Avro.Serialize bad enum symbol", func() error { _, err := avroMarker(t).Serialize("t", marker); return err }},
	}
	for _, c := range cases {
		err := c.run()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			for _, f := range forms {
				if strings.Contains(text, f) {
					t.Errorf("%s: the error quotes the payload (%q): %s", c.name, f, text)
				}
			}
		}
	}
	// Bytes has no error to quote: it takes anything.
	if _, err := Bytes().Deserialize("t", []byte(marker+"\xff")); err != nil {
		t.Errorf("Bytes.Deserialize: %v", err)
	}
}

// avroMarker returns an Avro serde of an enum whose schema is registered as
// id 1.
func avroMarker(t *testing.T) *AvroSerde[string] {
	t.Helper()
	s, err := Avro[string](AvroConfig{Registry: newFakeRegistry(), Schema: `{"type":"enum","name":"E","symbols":["A","B"]}`})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	return s
}
