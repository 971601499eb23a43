package weir

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// neverClaim is a line of the README or docs/ that says "never": either a
// property of weir, backed by the tests that would fail were it false, or
// advice to the reader (why says so).
type neverClaim struct {
	file  string   // relative to the repository's root
	line  string   // a part of the line that names it alone in file
	tests []string // test or fuzz functions that check it
	why   string   // for advice: why no test checks it
}

// neverClaims lists every "never" of the README and docs/. A new one
// needs a row here, with its tests.
var neverClaims = []neverClaim{
	{file: "docs/semantics.md", line: "Streams gives that key without caching, in that order: weir never emits", tests: []string{"TestConformance"}},
	{file: "README.md", line: "offset (never its key or value)", tests: []string{"TestContextLoggerCarriesTaskNodeAndRecord", "TestNoRecordDataInLogsErrorsOrMetrics"}},
	{file: "README.md", line: "partition and offset: never its key or value", tests: []string{"TestContextLoggerCarriesTaskNodeAndRecord", "TestNoRecordDataInLogsErrorsOrMetrics"}},
	{file: "README.md", line: "A slow processor makes lag grow, never memory", tests: []string{"TestHeapBoundedWhileLagGrows", "TestSlowProcessorBoundsQueues"}},
	{file: "README.md", line: "offset (never their contents)", tests: []string{"TestNoRecordDataInLogsErrorsOrMetrics", "TestErrorsDoNotQuoteData"}},
	{file: "README.md", line: "so the other members never notice", tests: []string{"TestAbortRewindsInPlace"}},
	{file: "README.md", line: "weir never logs record keys", tests: []string{"TestNoRecordDataInLogsErrorsOrMetrics", "TestBadgerLogLinesDoNotQuoteData"}},

	{file: "docs/operations.md", line: "Look **per partition**, never at a sum", why: "advice on reading the lag metrics"},
	{file: "docs/operations.md", line: "A sink that must never move a key back keeps the epoch", tests: []string{"TestReplayAfterResetNeverRegressesASink"}},
	{file: "docs/operations.md", line: "an application never", tests: []string{"TestConsecutiveAbortsAreBounded"}},
	{file: "docs/operations.md", line: "readers never see them", tests: []string{"TestAbortedTransactionInvisibleToReadCommitted"}},
	{file: "docs/operations.md", line: "key `weir.abort`, never visible read_committed", tests: []string{"TestAbortOverEndsEveryPartition", "TestCheckFailingForAWhileIsRetriedNotTurnedOff"}},
	{file: "docs/operations.md", line: "(`weir.abort`, never read committed)", tests: []string{"TestAbortOverEndsEveryPartition"}},
	{file: "docs/operations.md", line: "weir's own text never includes the record's contents", tests: []string{"TestErrorsDoNotQuoteData", "TestNoRecordDataInLogsErrorsOrMetrics"}},
	{file: "docs/operations.md", line: "built-in serdes never quote their input", tests: []string{"TestErrorsDoNotQuoteData", "TestMalformedKeyErrorsDoNotQuoteData"}},
	{file: "docs/operations.md", line: "record is never skipped: state cannot lose a change", tests: []string{"TestSendRefusesWhatTheTopicRefuses"}},
	{file: "docs/operations.md", line: "state changes never commit", tests: []string{"TestExactlyOnceAbortHidesPartialWork", "TestDeadLetterSurvivesKill9"}},
	{file: "docs/operations.md", line: "never on the instance running the task, never two copies", tests: []string{"TestPlanStandbys", "TestPlanStandbysSpreadsOverMembers"}},
	{file: "docs/operations.md", line: "a standby never stops", tests: []string{"TestStandbyLagGrowsStaleWhenUpdatesFail"}},
	{file: "docs/operations.md", line: "So a scale-out never stops a task", tests: []string{"TestScaleOutWithWarmups", "TestKeepCaughtUpScaleOut"}},
	{file: "docs/operations.md", line: "never data from a store its", tests: []string{"TestStandbyReadsDoNotSpanADrop", "TestWindowLookupsAcrossInstances"}},
	{file: "docs/operations.md", line: "keys never", tests: []string{"TestAskKeepsKeysOutOfURLsAndErrors"}},
	{file: "docs/operations.md", line: "never answered in part", tests: []string{"TestWindowLookupsAcrossInstances"}},
	{file: "docs/operations.md", line: "never moves a key back", tests: []string{"TestTableUpdatesCarryIncreasingVersions", "TestStampVersion"}},
	{file: "docs/operations.md", line: "those records are never read", tests: []string{"TestAbortedTransactionInvisibleToReadCommitted"}},
	{file: "docs/operations.md", line: "read_committed readers never see", tests: []string{"TestAbortedTransactionInvisibleToReadCommitted"}},
	{file: "docs/operations.md", line: "A failed App is never restarted from inside the process", tests: []string{"TestConsecutiveAbortsAreBounded"}},
	{file: "docs/operations.md", line: "**Never use it for liveness.**", why: "advice on Kubernetes probes"},
	{file: "docs/operations.md", line: "Record keys and values are never logged", tests: []string{"TestNoRecordDataInLogsErrorsOrMetrics", "TestBadgerLogLinesDoNotQuoteData"}},

	{file: "docs/security.md", line: "`-registry-password-file`, never a flag", tests: []string{"TestRegistryCredentials"}},
	{file: "docs/security.md", line: "a planted symbolic link is replaced, never followed", tests: []string{"TestStateDirIsPrivate"}},
	{file: "docs/security.md", line: "weir never puts a record's key or value in them", tests: []string{"TestNoRecordDataInLogsErrorsOrMetrics"}},
	{file: "docs/security.md", line: "so a wrong key never corrupts state", tests: []string{"TestEncryptedState", "TestEncryptedStateAtRest"}},
	{file: "docs/security.md", line: "never the password); a certificate", tests: []string{"TestWrongPasswordFailsFast"}},
	{file: "docs/security.md", line: "A \"never\"", why: "introduces the table of claims below"},
	{file: "docs/security.md", line: "never a crash (`TestPanickingSerdeIsDeadLettered`)", tests: []string{"TestPanickingSerdeIsDeadLettered", "TestHostileAvroInputIsDeadLettered", "FuzzAvroShapes"}},
	{file: "docs/security.md", line: "a schema is parsed, never executed", tests: []string{"TestConfigRefusesCredentialsInTheClear"}, why: "an Avro schema is data, which weir parses; the line's other never, credentials sent in the clear, is the test's"},
	{file: "docs/security.md", line: "renamed into place, never thro", tests: []string{"TestStateDirIsPrivate"}},
	{file: "docs/security.md", line: "never a flag or a URL (`TestRegistryCredentials`)", tests: []string{"TestRegistryCredentials"}},
	{file: "docs/security.md", line: "Keys travel in the request's body, never in a URL", tests: []string{"TestAskKeepsKeysOutOfURLsAndErrors"}},
	{file: "docs/security.md", line: "logs keep URLs), and never in an error", tests: []string{"TestAskKeepsKeysOutOfURLsAndErrors"}},
	{file: "docs/security.md", line: "a view never", tests: []string{"TestAskFollowsNoRedirect"}},

	{file: "docs/testing.md", line: "a CI run never passes by skipping", tests: []string{"TestMissingClusterFailsUnderCI"}},
	{file: "docs/testing.md", line: "never by a fixed sleep", tests: []string{"TestEventuallyPollsUntilTrue", "TestEventuallyFailsWithLastMessage"}},
}

var neverWord = regexp.MustCompile(`(?i)\bnever\b`)

// TestEveryNeverIsBacked: every line of the README and docs/ that says
// "never" has a row in neverClaims (and every row a line), and every test
// a row names exists, so that a "never" is a property a test checks or
// plainly advice, not a promise nothing holds weir to.
func TestEveryNeverIsBacked(t *testing.T) {
	t.Parallel()
	files := []string{"README.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	used := make([]bool, len(neverClaims))
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if !neverWord.MatchString(line) {
				continue
			}
			matched := 0
			for i, c := range neverClaims {
				if c.file == filepath.ToSlash(file) && strings.Contains(line, c.line) {
					used[i] = true
					matched++
				}
			}
			if matched == 0 {
				t.Errorf("%s:%d says never and names no test: add a row to neverClaims (docs_test.go), or say it another way\n\t%s", file, n, line)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	defined := testFunctions(t)
	for i, c := range neverClaims {
		if !used[i] {
			t.Errorf("neverClaims row %q of %s matches no line", c.line, c.file)
		}
		if len(c.tests) == 0 && c.why == "" {
			t.Errorf("neverClaims row %q of %s names no test and no reason", c.line, c.file)
		}
		for _, name := range c.tests {
			if !defined[name] {
				t.Errorf("neverClaims row %q of %s names %s, which no _test.go file defines", c.line, c.file, name)
			}
		}
	}
}

// testFunctions returns the names of every Test and Fuzz function of the
// repository's _test.go files.
func testFunctions(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	names := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
