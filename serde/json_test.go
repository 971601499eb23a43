package serde

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

type login struct {
	User  string    `json:"user"`
	OK    bool      `json:"ok"`
	Count int8      `json:"count"`
	At    time.Time `json:"at"`
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	s := JSON[login]()
	in := login{User: "ada", OK: true, Count: 3, At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, err := s.Serialize("t", in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"user":"ada","ok":true,"count":3,"at":"2026-01-02T03:04:05Z"}`; string(b) != want {
		t.Errorf("Serialize = %s, want %s", b, want)
	}
	out, err := s.Deserialize("t", b)
	if err != nil || out != in {
		t.Errorf("Deserialize = %+v, %v; want %+v", out, err, in)
	}
	if got, err := s.Deserialize("t", []byte(`{"user":"x","extra":1}`)); err != nil || got.User != "x" {
		t.Errorf("unknown field: %+v, %v; want it ignored", got, err)
	}
	if _, err := s.Deserialize("t", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: %v, want ErrNull", err)
	}
}

func TestJSONErrorsAreFormatErrors(t *testing.T) {
	t.Parallel()
	s := JSON[login]()
	cases := map[string]string{
		"syntax":     `{"user": x}`,
		"truncated":  `{"user":"a`,
		"type":       `{"user": 5}`,
		"overflow":   `{"count": 4242}`,
		"time parse": `{"at": "yesterday"}`,
	}
	for name, in := range cases {
		_, err := s.Deserialize("t", []byte(in))
		var f *FormatError
		if !errors.As(err, &f) || f.Format != "json" || f.SchemaID != NoSchemaID {
			t.Errorf("%s: got %v, want a json FormatError", name, err)
			continue
		}
		if f.Err == nil {
			t.Errorf("%s: the json error is not kept for errors.As", name)
		}
	}
	var syntax *json.SyntaxError
	if _, err := s.Deserialize("t", []byte(`{"user": x}`)); !errors.As(err, &syntax) {
		t.Errorf("the *json.SyntaxError is not reachable: %v", err)
	}
	if _, err := JSON[float64]().Serialize("t", math.NaN()); err == nil {
		t.Error("NaN encoded without error")
	}
}

func FuzzJSON(f *testing.F) {
	f.Add([]byte(`{"user":"a","ok":true,"count":1,"at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"count":300}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := JSON[login]()
		v, err := s.Deserialize("t", data)
		if err != nil {
			var f *FormatError
			if !errors.As(err, &f) && !errors.Is(err, ErrNull) {
				t.Fatalf("error %T %v is not a FormatError", err, err)
			}
			if bytes.Contains([]byte(err.Error()), data) && len(data) > 3 {
				t.Fatalf("error quotes the input: %v", err)
			}
			return
		}
		b, err := s.Serialize("t", v)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", v, err)
		}
		again, err := s.Deserialize("t", b)
		if err != nil || !again.At.Equal(v.At) || again.User != v.User || again.Count != v.Count || again.OK != v.OK {
			t.Fatalf("round trip %+v -> %s -> %+v, %v", v, b, again, err)
		}
	})
}

// JSON nested far deeper than any document is refused as a FormatError,
// without a panic or a stack overflow.
func TestJSONDeepNestingIsAFormatError(t *testing.T) {
	t.Parallel()
	deep := []byte(strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000))
	var fe *FormatError
	if _, err := JSON[any]().Deserialize("t", deep); !errors.As(err, &fe) {
		t.Fatalf("a million nested arrays = %v, want a FormatError", err)
	}
}
