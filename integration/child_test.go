package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// spawnInstance runs the test binary again as a child process that serves
// as an instance: env=JSON of cfg in its environment tells it what to run
// (the test's TestMain reads it). Its stderr goes to the end of the log at
// logPath, after a "=== test: started pid" mark; line gets each line the
// child prints on stdout, on a goroutine of the child's own, and done is
// closed once the child has exited and its output is read.
func spawnInstance(t *testing.T, env string, cfg any, logPath string, line func([]byte)) (cmd *exec.Cmd, done chan struct{}) {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(js))
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a child (%s): %v", env, err)
	}
	fmt.Fprintf(logFile, "=== test: started pid %d at %s\n", cmd.Process.Pid, time.Now().Format(time.StampMilli))
	done = make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line(sc.Bytes())
		}
		_ = cmd.Wait()
	}()
	return cmd, done
}

// TestRepairEventsQuoteTheRuntime keeps repairCounts honest: each message
// it counts is one the runtime logs, so a reworded warning cannot make a
// repair path read as never taken.
func TestRepairEventsQuoteTheRuntime(t *testing.T) {
	var src strings.Builder
	for _, dir := range []string{"../internal/stream", "../internal/repair"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, e := range repairEvents {
		text := strings.TrimSuffix(strings.TrimPrefix(e.msg, `msg="`), `"`)
		if !strings.Contains(src.String(), text) {
			t.Errorf("repair event %q counts lines with %q, which no Go source of internal/stream or internal/repair logs", e.name, text)
		}
	}
}
