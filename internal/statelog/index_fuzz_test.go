package statelog

import "testing"

// FuzzRestoreEntries feeds restore records of any bytes to the restore
// path of every store kind (key-value, window, session, TTL): a changelog
// is written by whoever may write the topic, so its records are untrusted
// too. No panic, and every record becomes an entry or an error.
func FuzzRestoreEntries(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), []byte{}, false)
	f.Add(make([]byte, 12), []byte{1}, []byte{0, 0, 0, 0, 0, 0, 0, 1}, true)
	f.Add([]byte{0xff}, []byte(nil), []byte{}, false)
	indexes := []Index{nil, WindowIndex(), SessionIndex(), TTLIndex()}
	f.Fuzz(func(t *testing.T, key, value, key2 []byte, tombstone bool) {
		if tombstone {
			value = nil
		}
		recs := []Record{{Key: key, Value: value}, {Key: key2, Value: value, Offset: 1}}
		for _, idx := range indexes {
			out, err := RestoreEntries(nil, recs, idx, false)
			if err == nil && len(out) < len(recs) && idx == nil {
				t.Fatalf("%d records became %d entries", len(recs), len(out))
			}
		}
	})
}
