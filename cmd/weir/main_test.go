package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) {
	if os.Getenv(rescaleChildEnv) != "" {
		os.Exit(rescaleChild())
	}
	if os.Getenv(cliChildEnv) != "" {
		os.Exit(cliChild())
	}
	kafka.Main(m)
}

// weirCmd runs the command line args and returns the exit code, stdout
// and stderr.
func weirCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Every command's -h names its flags and the exit codes, and exits 0.
func TestHelpNamesFlagsAndExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd   string
		flags []string
	}{
		{"describe", []string{"-app", "-brokers", "-o"}},
		{"check-upgrade", []string{"-app", "-brokers", "-describe", "-registry", "-registry-user", "-registry-password-file", "-registry-ca"}},
		{"reset", []string{"-app", "-brokers", "-to-earliest", "-to-datetime", "-shift-by", "-dry-run"}},
		{"fork", []string{"-from", "-to", "-brokers", "-dry-run", "-registry"}},
		{"inspect", []string{"-app", "-store", "-key", "-limit", "-registry", "-registry-user", "-registry-password-file", "-registry-ca", "-o"}},
		{"rescale", []string{"-from", "-to", "-partitions", "-allow-unread", "-dry-run", "Procedure", "-check", "-registry"}},
		{"rename-store", []string{"-app", "-from", "-to", "-dry-run", "-registry"}},
	} {
		code, _, help := weirCmd(t, tc.cmd, "-h")
		if code != exitOK {
			t.Errorf("weir %s -h exited %d", tc.cmd, code)
		}
		for _, want := range append(tc.flags, "Exit codes", "1 refused", "2 bad usage", "3 the cluster") {
			if !strings.Contains(help, want) {
				t.Errorf("weir %s -h does not name %q:\n%s", tc.cmd, want, help)
			}
		}
	}
	if code, _, help := weirCmd(t, "-h"); code != exitOK || !strings.Contains(help, "reset") || !strings.Contains(help, "Exit codes") {
		t.Errorf("weir -h = %d:\n%s", code, help)
	}
}

// Bad command lines exit 2 with the reason, before any connection.
func TestBadUsageExits2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"describe"}, "-app is required"},
		{[]string{"describe", "-app", "a", "-o", "yaml"}, `-o "yaml"`},
		{[]string{"reset", "-app", "a"}, "exactly one of"},
		{[]string{"reset", "-app", "a", "-to-earliest", "-shift-by", "-3"}, "exactly one of"},
		{[]string{"reset", "-app", "a", "-to-datetime", "yesterday"}, "-to-datetime"},
		{[]string{"check-upgrade", "-app", "a"}, "-describe is required"},
		{[]string{"fork", "-to", "b"}, "-from is required"},
		{[]string{"inspect", "-app", "a"}, "-store is required"},
		{[]string{"fork", "-from", "a", "-to", "a"}, "must differ"},
		{[]string{"check-upgrade", "-app", "a", "-describe", "/nonexistent.json"}, "nonexistent.json"},
	} {
		code, _, errOut := weirCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("weir %q = %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// An unreachable cluster exits 3 with the reason.
func TestUnreachableClusterExits3(t *testing.T) {
	t.Parallel()
	code, _, errOut := weirCmd(t, "describe", "-app", "a", "-brokers", "127.0.0.1:1")
	if code != exitCluster || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("weir describe on a closed port = %d, %q", code, errOut)
	}
}

func TestTasksOfAssignedPartitions(t *testing.T) {
	t.Parallel()
	got := tasksOf([]string{"in/1", "in/0", "app-x-repartition/0", "other/3"}, map[string]int{"in": 0, "app-x-repartition": 1})
	if strings.Join(got, " ") != "0_0 0_1 1_0" {
		t.Fatalf("tasks %v", got)
	}
}

// The table output of describe, on a fixed report.
func TestDescribeTableGolden(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &describeReport{
		Application: "wordcount", Descriptor: true, At: at,
		Group: groupReport{State: "Stable", Protocol: "cooperative-sticky", Members: []memberRow{
			{MemberID: "wordcount-0-1f2e", InstanceID: "host-a-0", ClientID: "wordcount-0", Host: "/10.0.0.1", Assigned: []string{"text-input/0", "text-input/1", "wordcount-words-repartition/0", "wordcount-words-repartition/1"}, Tasks: []string{"0_0", "0_1", "1_0", "1_1"}},
			{MemberID: "wordcount-0-9a8b", ClientID: "wordcount-0", Host: "/10.0.0.2", Assigned: []string{"text-input/2", "wordcount-words-repartition/2"}, Tasks: []string{"0_2", "1_2"}},
		}},
		Partitions: []partitionRow{
			{Topic: "text-input", Partition: 0, End: 1200, Committed: 1150, Lag: 50, OldestUnread: at.Add(-90 * time.Second), AgeMs: 90_000, RetentionMs: 7 * 24 * 3600 * 1000, HeadroomMs: 7*24*3600*1000 - 90_000},
			{Topic: "text-input", Partition: 1, End: 800, Committed: 800, Lag: 0, RetentionMs: 7 * 24 * 3600 * 1000, HeadroomMs: -1},
			{Topic: "wordcount-words-repartition", Partition: 0, End: 5000, Committed: -1, Lag: 5000, OldestUnread: at.Add(-2 * time.Second), AgeMs: 2000, RetentionMs: -1, HeadroomMs: -1},
		},
		Stores: []storeRow{{Store: "counts", Type: "key-value", Changelog: "wordcount-counts-changelog", Partitions: 3, End: 42_000, Records: 10_000, Bytes: 512_000}},
	}
	var b bytes.Buffer
	if err := writeDescribeTable(&b, r); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "describe.golden", b.String())
}

// The command connects as weir does: TLS and SASL, here to the broker's
// SASL_SSL listener of `make kafka-up` (skipped without it, failed under
// CI=true); a wrong password exits 3 naming the refusal.
func TestDescribeOverSASLSSL(t *testing.T) {
	l := kafka.SASLSSL(t)
	brokers, ca, user, pass := l.BrokerList(), l.CAFile, l.SCRAMUser, l.SCRAMPassword
	t.Setenv("WEIR_SASL_PASSWORD", pass)
	code, out, errOut := weirCmd(t, "describe", "-brokers", brokers, "-tls-ca", ca, "-sasl-mechanism", "SCRAM-SHA-512", "-sasl-user", user, "-app", "weir-cli-nothing-here")
	if code != exitOK || !strings.Contains(out, "weir-cli-nothing-here") {
		t.Fatalf("describe over SASL_SSL = %d: %s%s", code, out, errOut)
	}
	t.Setenv("WEIR_SASL_PASSWORD", "wrong-password-5e2d")
	code, _, errOut = weirCmd(t, "describe", "-brokers", brokers, "-tls-ca", ca, "-sasl-mechanism", "SCRAM-SHA-512", "-sasl-user", user, "-app", "x")
	if code != exitCluster || strings.Contains(errOut, "wrong-password-5e2d") {
		t.Fatalf("a wrong password = %d: %s", code, errOut)
	}
	if code, _, errOut := weirCmd(t, "describe", "-app", "x", "-sasl-mechanism", "GSSAPI", "-sasl-user", "u"); code != exitUsage || !strings.Contains(errOut, "SASL.Mechanism") {
		t.Fatalf("an unknown mechanism = %d: %s", code, errOut)
	}
}

// The plan reset prints, on a fixed plan.
func TestResetPlanGolden(t *testing.T) {
	t.Parallel()
	p := &resetPlan{
		offsets:  map[string]map[int32]int64{"text-input": {0: 0, 1: 0}},
		previous: map[string]map[int32]int64{"text-input": {0: 1150, 1: 800}, "wordcount-words-repartition": {0: 5000}},
		deletes:  []string{"wordcount-counts-changelog", "wordcount-words-repartition"},
		dropped:  map[string][]int32{"wordcount-words-repartition": {0}},
		epoch:    3,
	}
	var b bytes.Buffer
	printPlan(&b, "wordcount", p, true)
	checkGolden(t, "reset-plan.golden", b.String())
}

// checkGolden compares got with testdata/name (go test -update rewrites
// it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed (go test -update rewrites it):\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// What check-upgrade prints for the differences of two descriptors: a new
// store, and a store whose key serde changed (refused).
func TestCheckUpgradeDifferencesGolden(t *testing.T) {
	t.Parallel()
	read := func(name string) *weir.Descriptor {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		d, err := weir.ParseDescriptor(data)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var b bytes.Buffer
	refused := printDifferences(&b, weir.CompareDescriptors(read("wordcount-v1.json"), read("wordcount-v2.json")))
	if strings.Join(refused, ",") != "counts" {
		t.Fatalf("refused stores %v, want counts", refused)
	}
	checkGolden(t, "check-upgrade.golden", b.String())
}

// The plan fork prints, on a fixed plan.
func TestForkPlanGolden(t *testing.T) {
	t.Parallel()
	d := &weir.Descriptor{ApplicationID: "wordcount", Sources: []weir.TopicDescriptor{{Topic: "text-input"}}}
	committed := map[string]map[int32]int64{"text-input": {1: 800, 0: 1150}, "wordcount-words-repartition": {0: 4990}}
	copies := []forkCopy{
		{from: "wordcount-counts-changelog", to: "wordcount-pre-v2-counts-changelog", kind: "changelog", partitions: []int32{0, 1},
			start: map[int32]int64{0: 0, 1: 0}, end: map[int32]int64{0: 30_000, 1: 12_000}},
		{from: "wordcount-words-repartition", to: "wordcount-pre-v2-words-repartition", kind: "repartition", partitions: []int32{0},
			start: map[int32]int64{0: 4990}, end: map[int32]int64{0: 5000}},
	}
	var b bytes.Buffer
	printForkPlan(&b, "wordcount", "wordcount-pre-v2", d, committed, copies, true)
	checkGolden(t, "fork-plan.golden", b.String())
}

// The table inspect prints, on fixed entries: text as it is, other values
// as JSON.
func TestInspectTableGolden(t *testing.T) {
	t.Parallel()
	rows := []entry{
		{Partition: 0, Offset: 17, Key: "alpha", Value: int64(42)},
		{Partition: 1, Offset: 3, Key: "beta", Value: "plain text"},
		{Partition: 1, Offset: 9, Key: "gamma", Value: map[string]any{"count": 2, "last": "2026-12-01T10:00:00Z"}},
	}
	var b bytes.Buffer
	if err := writeInspectTable(&b, rows, "wordcount-counts-changelog"); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "inspect.golden", b.String())
}

// A reset deletes only the topics weir names for the application: a
// descriptor that lists any other topic (forged by whoever can write the
// topology topic) is refused whole.
func TestResetRefusesForeignTopics(t *testing.T) {
	t.Parallel()
	stores := []weir.StoreDescriptor{
		{Name: "counts", Type: "key-value", Changelog: "wc-counts-changelog"},
		{Name: "table", Type: "key-value", Changelog: "table-source"}, // a source table's changelog is its topic
		{Name: "geo", Type: "global", Changelog: "wc-geo-changelog"},
	}
	cases := []struct {
		name     string
		internal []weir.TopicDescriptor
		bad      []string
	}{
		{"own topics", []weir.TopicDescriptor{{Topic: "wc-counts-changelog", Kind: "changelog"}, {Topic: "wc-words-repartition", Kind: "repartition"}}, nil},
		{"a ledger", []weir.TopicDescriptor{{Topic: "payments-ledger", Kind: "changelog"}}, []string{"payments-ledger"}},
		{"no kind", []weir.TopicDescriptor{{Topic: "wc-counts-changelog"}}, []string{"wc-counts-changelog"}},
		{"a changelog of no store", []weir.TopicDescriptor{{Topic: "wc-other-changelog", Kind: "changelog"}}, []string{"wc-other-changelog"}},
		{"a source table's topic", []weir.TopicDescriptor{{Topic: "table-source", Kind: "changelog"}}, []string{"table-source"}},
		{"a global store's topic", []weir.TopicDescriptor{{Topic: "wc-geo-changelog", Kind: "changelog"}}, []string{"wc-geo-changelog"}},
		{"another application's repartition", []weir.TopicDescriptor{{Topic: "other-words-repartition", Kind: "repartition"}}, []string{"other-words-repartition"}},
		{"an empty repartition name", []weir.TopicDescriptor{{Topic: "wc--repartition", Kind: "repartition"}}, []string{"wc--repartition"}},
		{"a sink named like a repartition", []weir.TopicDescriptor{{Topic: "wc-out-repartition", Kind: "repartition"}}, []string{"wc-out-repartition"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &weir.Descriptor{ApplicationID: "wc", Stores: stores, InternalTopics: c.internal,
				Sources: []weir.TopicDescriptor{{Topic: "table-source"}}, Sinks: []weir.TopicDescriptor{{Topic: "wc-out-repartition"}}}
			got := foreignTopics("wc", d)
			if len(got) != len(c.bad) {
				t.Fatalf("foreignTopics = %q, want %q", got, c.bad)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.bad[i]+" ") {
					t.Fatalf("foreignTopics = %q, want %q", got, c.bad)
				}
			}
		})
	}
}

// The registry's credentials come from the environment or a file, never a
// flag or the URL, and never go to an http:// URL unless allowed.
func TestRegistryCredentials(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEIR_SCHEMA_REGISTRY_PASSWORD", "env-secret")
	for _, c := range []struct {
		name string
		r    registryFlags
		pw   string // the password the config carries; "" = refused
	}{
		{"environment", registryFlags{url: "https://r:8081", user: "u"}, "env-secret"},
		{"file before environment", registryFlags{url: "https://r:8081", user: "u", passwordFile: pwFile}, "file-secret"},
		{"password without user", registryFlags{url: "https://r:8081"}, ""},
		{"credentials over http", registryFlags{url: "http://r:8081", user: "u"}, ""},
		{"credentials over http, allowed", registryFlags{url: "http://r:8081", user: "u", allowHTTPAuth: true}, "env-secret"},
		{"credentials in the URL", registryFlags{url: "https://u:p@r:8081", user: "u"}, ""},
		{"missing CA file", registryFlags{url: "https://r:8081", user: "u", caFile: filepath.Join(dir, "none.pem")}, ""},
		{"CA file without certificates", registryFlags{url: "https://r:8081", user: "u", caFile: pwFile}, ""},
	} {
		cfg, err := c.r.config()
		switch {
		case c.pw == "" && err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.pw != "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.pw != "" && cfg.Password != c.pw:
			t.Errorf("%s: password %q, want %q", c.name, cfg.Password, c.pw)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: the error quotes the password: %v", c.name, err)
		}
	}
}
