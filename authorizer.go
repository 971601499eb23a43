package weir

import (
	"errors"
	"net/http"
)

// Resource names what a request to one of weir's HTTP handlers asks for,
// for an [Authorizer]: [StoreResource] for a query of a store (the
// handler of package ktable), [HealthDetails] for the text of a failure on
// /healthz and /readyz.
type Resource string

// HealthDetails is the Resource of the error text that /healthz and
// /readyz add to the state's name: it may name broker addresses, the SASL
// user, or quote a processor's error.
const HealthDetails Resource = "health:details"

// StoreResource is the Resource of a query of store name.
func StoreResource(name string) Resource { return Resource("store:" + name) }

// Authorizer decides whether an HTTP request may have a resource of the
// App: nil allows it, an error refuses it (HTTP 403; the error's text is
// not sent). It runs for every request, on the server's goroutine, and
// must be safe for concurrent use. Identify the caller from the request:
// its TLS client certificate (req.TLS.PeerCertificates, for mutual TLS
// between instances), a bearer token, the remote address.
type Authorizer interface {
	Authorize(req *http.Request, r Resource) error
}

// AuthorizerFunc adapts a function to [Authorizer].
type AuthorizerFunc func(req *http.Request, r Resource) error

// Authorize implements [Authorizer].
func (f AuthorizerFunc) Authorize(req *http.Request, r Resource) error { return f(req, r) }

// AllowAll allows every request. Use it only where the network the
// handlers listen on is trusted as much as the application itself.
var AllowAll Authorizer = AuthorizerFunc(func(*http.Request, Resource) error { return nil })

// ErrNotAuthorized is returned by [App.Authorize] when Config.Authorizer
// is not set: without one, nothing beyond the health state word is served.
var ErrNotAuthorized = errors.New("weir: not authorized (Config.Authorizer is not set)")

// Authorize asks Config.Authorizer whether req may have r; without an
// authorizer it refuses with [ErrNotAuthorized]. weir's handlers call it
// before they read anything.
func (a *App) Authorize(req *http.Request, r Resource) error {
	if a.cfg.Authorizer == nil {
		return ErrNotAuthorized
	}
	return a.cfg.Authorizer.Authorize(req, r)
}
