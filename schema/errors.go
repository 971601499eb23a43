package schema

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrNotFound is matched (errors.Is) by the error of a call about a schema
// id, subject or version that the registry does not have (HTTP 404).
var ErrNotFound = errors.New("schema: not found")

// RegistryError is an answer of the registry that is not a success and not
// one of the typed cases ([*IncompatibleError], and [ErrNotFound], which it
// matches when Status is 404).
type RegistryError struct {
	Op      string // the call, such as "register" or "get schema by id"
	Subject string // the subject, if the call had one
	ID      int    // the schema id, if the call had one; else 0
	Status  int    // HTTP status
	Code    int    // the registry's error_code, such as 40403; 0 if none
	Message string // the registry's message
	Err     error  // srclient's error
}

func (e *RegistryError) Error() string {
	what := e.Op
	if e.Subject != "" {
		what += " subject " + e.Subject
	}
	if e.ID != 0 {
		what += fmt.Sprintf(" id %d", e.ID)
	}
	status := http.StatusText(e.Status)
	if e.Status == 0 {
		status = "error"
	}
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Code != 0 {
		return fmt.Sprintf("schema: %s: registry answered %d %s (code %d): %s", what, e.Status, status, e.Code, msg)
	}
	return fmt.Sprintf("schema: %s: registry answered %d %s: %s", what, e.Status, status, msg)
}

// Unwrap returns srclient's error.
func (e *RegistryError) Unwrap() error { return e.Err }

// Is reports whether e is a 404 when target is [ErrNotFound].
func (e *RegistryError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// IncompatibleError reports a schema that the registry refuses for a
// subject under the subject's compatibility level (HTTP 409 on
// registration, or a negative compatibility check).
type IncompatibleError struct {
	Subject string
	// Reason is the registry's message; when the registry gives none (a
	// compatibility check answers only true or false), weir's own Avro
	// compatibility check against the subject's latest schema fills it in.
	Reason string
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("schema: subject %s refuses the schema: %s", e.Subject, e.Reason)
}

// UnreachableError reports a registry that did not answer (connection
// refused, timeout, TLS failure) or answered 5xx or 429 on every attempt
// within [Config.RetryTimeout].
type UnreachableError struct {
	URL      string        // the registry's URL, password redacted
	Op       string        // the call, such as "register"
	Attempts int           // requests made
	Elapsed  time.Duration // time spent, from the call's start
	Err      error         // the last attempt's error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("schema: %s: registry at %s unreachable after %d attempts in %v: %v",
		e.Op, e.URL, e.Attempts, e.Elapsed.Round(time.Millisecond), e.Err)
}

// Unwrap returns the last attempt's error.
func (e *UnreachableError) Unwrap() error { return e.Err }
