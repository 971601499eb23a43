package weir

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// TestDefaultLoggerPassesWarnings pins item 4 of issue 20: the default
// Config.Logger discarded everything, which hid an application aborting
// every transaction. It passes warnings and errors to slog.Default() and
// drops the rest. Not parallel: it replaces slog.Default().
func TestDefaultLoggerPassesWarnings(t *testing.T) {
	var buf bytes.Buffer
	prev, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer func() {
		// SetDefault also redirects the log package: put it back too.
		slog.SetDefault(prev)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	}()

	l := Config{ApplicationID: "a", Brokers: []string{"h:1"}}.withDefaults().Logger
	l = l.With("thread", 0)
	l.Debug("debug line")
	l.Info("info line")
	l.Warn("transaction aborted", "error", "boom")
	l.WithGroup("g").Error("thread stopped")

	out := buf.String()
	for _, want := range []string{"level=WARN msg=\"transaction aborted\" thread=0 error=boom", "level=ERROR msg=\"thread stopped\" thread=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("slog.Default() did not get %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "debug line") || strings.Contains(out, "info line") {
		t.Errorf("the default logger passed info or debug:\n%s", out)
	}

	// A logger the application sets is used as it is.
	var own bytes.Buffer
	set := slog.New(slog.NewTextHandler(&own, nil))
	if got := (Config{Logger: set}).withDefaults().Logger; got != set {
		t.Error("withDefaults replaced the application's logger")
	}
}
