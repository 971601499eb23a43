package weir

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An instance started while no broker answers waits for one, as Kafka
// Streams does, so that services and brokers may start in any order: it
// logs each attempt, stays starting and not ready, and ends the wait when
// its context ends; Net.StartupTimeout bounds the wait.
func TestRunWaitsForTheBrokers(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := Config{
		ApplicationID: "waits", Brokers: []string{"127.0.0.1:1"}, // nothing listens
		Guarantee: AtLeastOnce, StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	cfg.Net.DialTimeout = time.Second
	app, err := New(passThrough(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(logs.String(), "no broker answers") < 2 {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while no broker answered; want it to wait", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no second attempt logged within a minute:\n%s", logs.String())
		}
	}
	if s, _ := app.State(); s != StateStarting {
		t.Errorf("State while waiting = %v, want starting", s)
	}
	select {
	case <-app.Ready():
		t.Error("Ready while no broker answers")
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after its context ended while waiting = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context's end")
	}

	cfg.Net.StartupTimeout = 2 * time.Second
	cfg.StateDir = t.TempDir()
	if app, err = New(passThrough(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := app.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Run past Net.StartupTimeout = %v, want the connection's error", err)
	}
	if n := strings.Count(logs.String(), "no broker answers"); n < 3 {
		t.Errorf("%d attempts logged in all; want the bounded run to have tried again too", n)
	}
}

// /healthz and /readyz name the state to anyone, and the failure's text
// (broker addresses, the SASL user, a processor's error) only to requests
// Config.Authorizer allows HealthDetails.
func TestHealthShowsTheCauseOnlyWhenAuthorized(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		auth   Authorizer
		detail bool
	}{
		{"no authorizer", nil, false},
		{"refused", AuthorizerFunc(func(*http.Request, Resource) error { return errors.New("no") }), false},
		{"allowed", AuthorizerFunc(func(_ *http.Request, r Resource) error {
			if r != HealthDetails {
				return errors.New("no")
			}
			return nil
		}), true},
	} {
		cfg := Config{ApplicationID: "health", Brokers: []string{"127.0.0.1:1"}, Guarantee: AtLeastOnce, StateDir: t.TempDir(),
			Logger: slog.New(slog.DiscardHandler), Authorizer: c.auth}
		cfg.Net.DialTimeout, cfg.Net.StartupTimeout = time.Second, -1
		app, err := New(passThrough(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Run(context.Background()); err == nil {
			t.Fatal("Run succeeded without a broker")
		}
		srv := httptest.NewServer(app.Handler())
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		if resp.StatusCode != http.StatusServiceUnavailable || lines[0] != "failed" {
			t.Fatalf("%s: /healthz = %d %q, want 503 failed", c.name, resp.StatusCode, body)
		}
		if got := len(lines) > 1 && strings.Contains(string(body), "127.0.0.1:1"); got != c.detail {
			t.Errorf("%s: /healthz = %q; the failure shown %v, want %v", c.name, body, got, c.detail)
		}
	}
}
