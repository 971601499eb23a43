package graph

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// KeyLayout says where the partitioning key sits in a stored key, and
// which entries belong to every partition, for `weir rescale`. Its text
// form (String, ParseKeyLayout) is the descriptor's "key_layout".
type KeyLayout struct {
	// Skip is the number of bytes before the partitioning key.
	Skip int
	// LengthPrefixed says that the key, after Skip, is a uvarint length
	// and that many bytes, followed by bytes of no concern.
	LengthPrefixed bool
	// Shared, when not empty, is the prefix of the stored keys of entries
	// that belong to the task, not to a key (a suppression's wall-clock
	// close point): a rescale gives each new partition the one with the
	// largest value bytes among the old partitions'.
	Shared []byte
}

// IsZero reports whether l is the whole-key layout.
func (l KeyLayout) IsZero() bool { return l.Skip == 0 && !l.LengthPrefixed && len(l.Shared) == 0 }

// String returns l's text form: "" for the zero layout, else
// comma-separated "skip:N", "uvarint" and "shared:<hex>".
func (l KeyLayout) String() string {
	var parts []string
	if l.Skip > 0 {
		parts = append(parts, "skip:"+strconv.Itoa(l.Skip))
	}
	if l.LengthPrefixed {
		parts = append(parts, "uvarint")
	}
	if len(l.Shared) > 0 {
		parts = append(parts, "shared:"+hex.EncodeToString(l.Shared))
	}
	return strings.Join(parts, ",")
}

// ParseKeyLayout parses the text form of a layout (see [KeyLayout.String]).
func ParseKeyLayout(s string) (KeyLayout, error) {
	var l KeyLayout
	if s == "" {
		return l, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		name, arg, _ := strings.Cut(part, ":")
		var err error
		switch name {
		case "skip":
			l.Skip, err = strconv.Atoi(arg)
			if err == nil && (l.Skip < 0 || l.Skip > 1<<10) {
				err = fmt.Errorf("out of range")
			}
		case "uvarint":
			l.LengthPrefixed = true
		case "shared":
			l.Shared, err = hex.DecodeString(arg)
		default:
			err = fmt.Errorf("unknown part")
		}
		if err != nil {
			return KeyLayout{}, fmt.Errorf("key layout %q: %q: %w", s, part, err)
		}
	}
	return l, nil
}

// IsShared reports whether stored is the key of an entry of the task
// (see Shared).
func (l KeyLayout) IsShared(stored []byte) bool {
	return len(l.Shared) > 0 && bytes.HasPrefix(stored, l.Shared)
}

// PartitionKey returns the partitioning key in stored, which must not be
// the key of an entry of the task (see IsShared).
func (l KeyLayout) PartitionKey(stored []byte) ([]byte, error) {
	if len(stored) < l.Skip {
		return nil, fmt.Errorf("a stored key of %d bytes, shorter than the layout's %d before the key", len(stored), l.Skip)
	}
	key := stored[l.Skip:]
	if l.LengthPrefixed {
		n, w := binary.Uvarint(key)
		if w <= 0 || n > uint64(len(key)-w) {
			return nil, fmt.Errorf("a stored key whose length prefix is cut short or too long")
		}
		key = key[w : w+int(n)]
	}
	return key, nil
}

// KeyLayoutOf returns the layout a key serde declares by a method
// KeyLayout() KeyLayout (the DSL's internal key serdes), or the zero
// layout.
func KeyLayoutOf(keys any) KeyLayout {
	if d, ok := keys.(interface{ KeyLayout() KeyLayout }); ok {
		return d.KeyLayout()
	}
	return KeyLayout{}
}
