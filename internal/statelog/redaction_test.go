package statelog

import (
	"github.com/weirstream/weir/changelog"

	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// redactionMarker is the record data the tests below feed the changelog:
// it must never come back in an error or a log line, as text or in hex.
const redactionMarker = "SECRET-PAYLOAD"

// assertNoMarker fails when text holds the marker in any of the forms an
// error or a log could give it: as is, in hex (either case, as %x and
// hex.Dump write it) or as Go's %v of a byte slice.
func assertNoMarker(t *testing.T, what, text string) {
	t.Helper()
	m := []byte(redactionMarker[:6])
	dump := strings.TrimSpace(hex.Dump(m))
	dump = dump[len("00000000  "):strings.Index(dump, "  |")]
	forms := []string{string(m), hex.EncodeToString(m), strings.ToUpper(hex.EncodeToString(m)), dump, strings.Trim(fmt.Sprint(m), "[]")}
	slices.Sort(forms)
	for _, f := range slices.Compact(forms) {
		if strings.Contains(text, f) {
			t.Errorf("%s quotes the data (%q): %s", what, f, text)
		}
	}
}

// A key or value the changelog cannot decode, found in a store or in a
// changelog being restored, is named by its length, never by its bytes;
// the error still wraps changelog.ErrMalformedKey and says what is wrong.
func TestMalformedKeyErrorsDoNotQuoteData(t *testing.T) {
	t.Parallel()
	marker := []byte(redactionMarker)
	cases := []struct {
		name string
		run  func() error
		want string // what the error must still say
	}{
		{"DecodeKey without terminator", func() error { _, _, err := DecodeKey(marker); return err }, "no terminator (14 bytes)"},
		{"DecodeKey bad escape", func() error {
			_, _, err := DecodeKey(append(append([]byte{}, marker...), escByte, 0x07))
			return err
		}, "invalid escape 0x00 0x07 at offset 14"},
		{"DecodeKey cut in an escape", func() error {
			_, _, err := DecodeKey(append(append([]byte{}, marker...), escByte))
			return err
		}, "ends inside an escape sequence"},
		{"DecodeTime wrong length", func() error { _, err := DecodeTime(marker); return err }, "a time is 14 bytes, not 8"},
		{"DecodeKeyTime short time", func() error {
			_, _, err := DecodeKeyTime(append(AppendKey(nil, marker), 1, 2, 3))
			return err
		}, "a time is 3 bytes, not 8"},
		{"restore: not a window entry", func() error {
			_, err := RestoreEntries(nil, []Record{{Key: append([]byte{prefixByKey}, marker...), Value: marker, Offset: 7}}, WindowIndex(), false)
			return err
		}, "record at offset 7"},
		{"restore: ttl value without expiry", func() error {
			_, err := RestoreEntries(nil, []Record{{Key: append([]byte{prefixByKey}, marker...), Value: marker[:3], Offset: 9}}, TTLIndex(), false)
			return err
		}, "shorter than its expiry"},
	}
	for _, c := range cases {
		err := c.run()
		if !errors.Is(err, changelog.ErrMalformedKey) {
			t.Errorf("%s: %v, want an error wrapping changelog.ErrMalformedKey", c.name, err)
			continue
		}
		assertNoMarker(t, c.name, err.Error())
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.want)
		}
	}
}

// Badger refuses a key over 65000 bytes, and a value over its value log
// file size (or, in memory, its value threshold), with a hex dump of the
// first KiB of it: the changelog's writes say so in their own words, with
// the lengths, and keep Badger's error reachable but out of the text.
func TestOversizedEntryErrorsDoNotQuoteData(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := db.Space("store", 0)
	bigKey := bytes.Repeat([]byte(redactionMarker), 70000/len(redactionMarker))
	bigValue := bytes.Repeat([]byte(redactionMarker), (2<<20)/len(redactionMarker))
	cases := []struct {
		name  string
		entry Entry
		want  string
	}{
		{"key", Entry{Key: bigKey, Value: []byte("v")}, fmt.Sprintf("a key of %d bytes (with the store's prefix) is over Badger's limit of 65000", len(bigKey)+len(s.prefix))},
		{"deleted key", Entry{Key: bigKey, Deleted: true}, "is over Badger's limit of 65000"},
		{"value", Entry{Key: []byte("k"), Value: bigValue}, fmt.Sprintf("a value of %d bytes is over Badger's limit of %d", len(bigValue), 1<<20)},
	}
	for _, c := range cases {
		apply := s.Apply([]Entry{c.entry})
		commit := db.NewCommit()
		stage := commit.Stage(s, []Entry{c.entry})
		commit.Cancel()
		for what, err := range map[string]error{"Apply": apply, "Commit.Stage": stage} {
			if err == nil {
				t.Errorf("%s of an oversized %s: no error", what, c.name)
				continue
			}
			name := what + " of an oversized " + c.name
			assertNoMarker(t, name, err.Error())
			assertNoMarker(t, name, fmt.Sprintf("%+v", err))
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %q does not say %q", name, err, c.want)
			}
			var tooLarge *entryTooLarge
			if !errors.As(err, &tooLarge) || tooLarge.Unwrap() == nil {
				t.Errorf("%s: %v does not keep Badger's error", name, err)
			}
		}
	}
	// An entry within the limits is written as before.
	if err := s.Apply([]Entry{{Key: bigKey[:1000], Value: bigValue[:1000]}}); err != nil {
		t.Fatalf("Apply within the limits: %v", err)
	}
}

// Badger's log lines name the key of a value it cannot read: the lines
// forwarded to the application's logger give a byte slice's length, not its
// bytes, whatever the verb, and keep the rest of the line.
func TestBadgerLogLinesDoNotQuoteData(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := badgerLogger{slog.New(slog.NewTextHandler(&buf, nil))}
	key := []byte(redactionMarker)
	l.Errorf("Unable to read: Key: %v, Version : %v, meta: %v Error: %v", key, uint64(7), byte(2), errors.New("bad value pointer"))
	l.Warningf("While reading key: %x, got error: %v", key, errors.New("EOF"))
	l.Warningf("Key [%s, %d] %q", key, 3, key)
	l.Errorf("writeRequests: %v", time.Second)
	out := buf.String()
	assertNoMarker(t, "badger log", out)
	for _, want := range []string{"Unable to read: Key: <14 bytes>, Version : 7, meta: 2 Error: bad value pointer", "While reading key: <14 bytes>, got error: EOF", "Key [<14 bytes>, 3] <14 bytes>", "writeRequests: 1s"} {
		if !strings.Contains(out, want) {
			t.Errorf("badger log %q lacks %q", out, want)
		}
	}
}
