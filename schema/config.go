package schema

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config holds the settings of a schema registry. The zero value of every
// field but URL means the documented default. It is meant to be embedded in
// weir's application configuration as its registry settings.
type Config struct {
	// URL is the base URL of the registry's Confluent-compatible REST API,
	// such as "https://registry:8081" or, for Apicurio Registry,
	// "http://host:8080/apis/ccompat/v7". Required. Roughly Kafka's
	// schema.registry.url (one URL only).
	URL string

	// TLS configures HTTPS connections; nil uses Go's defaults (system
	// roots). Set it for a private CA or client certificates.
	TLS *tls.Config

	// Username and Password, when Username is set, are sent as HTTP basic
	// authentication with every request (Confluent's
	// basic.auth.user.info). Password is never logged nor put in errors.
	// With an http:// URL they would travel in the clear: Validate refuses
	// that unless AllowBasicAuthOverHTTP is set.
	Username, Password string

	// AllowBasicAuthOverHTTP lets Username and Password go to an http://
	// URL: only for a registry nobody can overhear (loopback, or TLS ended
	// by a sidecar on the same host). Default false.
	AllowBasicAuthOverHTTP bool

	// RequestTimeout bounds one HTTP request. Default 10 s.
	RequestTimeout time.Duration

	// RetryTimeout bounds the time a call spends retrying a registry that
	// cannot be reached or answers 5xx or 429, from the call's start; the
	// caller's context can end it sooner. Retries back off exponentially
	// from 100 ms to at most 2 s, with jitter. Default 30 s; a negative value
	// disables retries (one attempt).
	RetryTimeout time.Duration

	// CacheSize bounds each of the client's two caches, schemas by id and
	// registrations by subject and schema (least recently used evicted).
	// Default 1000; an entry holds a schema's text.
	CacheSize int
}

// Defaults of [Config].
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultRetryTimeout   = 30 * time.Second
	DefaultCacheSize      = 1000
)

// Validate reports every problem of c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("schema: Config.URL is required"))
	} else if u, err := url.Parse(c.URL); err != nil {
		errs = append(errs, errors.New("schema: Config.URL does not parse as a URL"))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("schema: Config.URL %q is not an http or https URL", u.Redacted()))
	} else if u.User != nil {
		errs = append(errs, errors.New("schema: Config.URL carries credentials; give them in Config.Username and Config.Password"))
	} else if u.Scheme == "http" && c.Username != "" && !c.AllowBasicAuthOverHTTP {
		errs = append(errs, errors.New("schema: Config.Username is set with an http:// URL, which would send the password in the clear; use https, or set Config.AllowBasicAuthOverHTTP for a registry nobody can overhear"))
	}
	if c.Username == "" && c.Password != "" {
		errs = append(errs, errors.New("schema: Config.Password is set without Config.Username"))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("schema: Config.RequestTimeout %v is negative", c.RequestTimeout))
	}
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("schema: Config.CacheSize %d is negative", c.CacheSize))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryTimeout == 0 {
		c.RetryTimeout = DefaultRetryTimeout
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	return c
}
