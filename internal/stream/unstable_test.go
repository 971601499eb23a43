package stream

import "testing"

// groupPartition places groups as Kafka does (Utils.abs(hashCode) %
// partitions). A mask instead of the absolute value put groups with a
// negative hash on the wrong partition.
func TestGroupPartition(t *testing.T) {
	for _, c := range []struct {
		group string
		n     int32
		want  int32
	}{
		// Expected values from Java: Math.abs(s.hashCode()) % n.
		{"", 50, 0},
		{"a", 50, 47},
		{"my-group", 50, 12}, // a negative hash code (-1906497762)
		{"app-wordcount", 50, 49},
		{"grüße", 7, 4},
	} {
		if got := groupPartition(c.group, c.n); got != c.want {
			t.Errorf("groupPartition(%q, %d) = %d, want %d", c.group, c.n, got, c.want)
		}
	}
}
