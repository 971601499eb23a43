package serde

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
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
