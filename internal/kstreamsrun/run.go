// Package kstreamsrun runs inputs through Kafka Streams' own
// TopologyTestDriver, by way of the Java runner of the conformance suite
// (conformance/kstreams, built with Maven), and compares outputs record by
// record. The conformance suite and the examples' tests use it to check
// weir's DSL against Kafka Streams.
package kstreamsrun

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Record is one line of the files exchanged with the runner: an input
// record (with its topic) or an output record. A nil Key or Value is null.
type Record struct {
	Topic string  `json:"topic,omitempty"`
	Key   *string `json:"key"`
	Value *string `json:"value"`
	TS    int64   `json:"ts"`
}

// String shows the record as key → value @timestamp.
func (r Record) String() string {
	show := func(p *string) string {
		if p == nil {
			return "null"
		}
		return strconv.Quote(*p)
	}
	return fmt.Sprintf("%s → %s @%d", show(r.Key), show(r.Value), r.TS)
}

// Equal compares keys, values and timestamps.
func Equal(a, b Record) bool { return equalKeyValue(a, b) && a.TS == b.TS }

// equalKeyValue compares keys and values only.
func equalKeyValue(a, b Record) bool {
	same := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return same(a.Key, b.Key) && same(a.Value, b.Value)
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // runner directory → class path
)

// build packages the runner in dir once per process and returns its
// class path.
func build(dir string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if cp, ok := built[dir]; ok {
		return cp, nil
	}
	for _, tool := range []string{"mvn", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("kstreamsrun: Kafka Streams' runner needs %s (Maven and Java 17, as make test does): %w", tool, err)
		}
	}
	cmd := exec.Command("mvn", "-q", "-B", "package", "-DskipTests")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kstreamsrun: building the Kafka Streams runner (mvn package in %s): %w\n%s", dir, err, out)
	}
	cp := filepath.Join(dir, "target", "classes") + string(os.PathListSeparator) + filepath.Join(dir, "target", "lib", "*")
	built[dir] = cp
	return cp, nil
}

// Run runs every case of cases through Kafka Streams in one JVM, with the
// runner in dir (conformance/kstreams). A case is named
// "<scenario>.<label>": the runner builds the scenario's topology for it.
// It returns each case's output, or the text of the exception it ended
// with; tmp is a directory Run may write its files in.
func Run(dir, tmp string, cases map[string][]Record) (outputs map[string][]Record, failures map[string]string, err error) {
	classpath, err := build(dir)
	if err != nil {
		return nil, nil, err
	}
	in, out := filepath.Join(tmp, "in"), filepath.Join(tmp, "out")
	for _, d := range []string{in, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
	}
	for name, recs := range cases {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return nil, nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(in, name+".jsonl"), buf.Bytes(), 0o644); err != nil {
			return nil, nil, err
		}
	}
	cmd := exec.Command("java", "-cp", classpath, "weir.conformance.Runner", in, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("kstreamsrun: Kafka Streams runner: %w\n%s", err, b)
	}
	outputs, failures = map[string][]Record{}, map[string]string{}
	for name := range cases {
		if b, err := os.ReadFile(filepath.Join(out, name+".error")); err == nil {
			failures[name] = string(b)
			continue
		}
		recs, err := readLines(filepath.Join(out, name+".jsonl"))
		if err != nil {
			return nil, nil, fmt.Errorf("kstreamsrun: Kafka Streams output of %s: %w", name, err)
		}
		outputs[name] = recs
	}
	return outputs, failures, nil
}

func readLines(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%q: %w", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// FirstDifference describes where weir's output first differs from Kafka
// Streams' by eq ("" when they are the same), with the records around
// it.
func FirstDifference(weir, ks []Record, eq func(a, b Record) bool) string {
	i := 0
	for i < len(weir) && i < len(ks) && eq(weir[i], ks[i]) {
		i++
	}
	if i == len(weir) && i == len(ks) {
		return ""
	}
	show := func(recs []Record) string {
		var b strings.Builder
		for j := max(0, i-2); j < min(len(recs), i+3); j++ {
			mark := "  "
			if j == i {
				mark = "> "
			}
			fmt.Fprintf(&b, "\n\t\t%s%d: %s", mark, j, recs[j])
		}
		if i >= len(recs) {
			fmt.Fprintf(&b, "\n\t\t> %d: (no more records)", i)
		}
		return b.String()
	}
	return fmt.Sprintf("output record %d differs (weir wrote %d records, Kafka Streams %d)\n\tweir:%s\n\tKafka Streams:%s",
		i, len(weir), len(ks), show(weir), show(ks))
}
