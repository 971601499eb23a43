package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/weirstream/weir/schema"
)

// registryFlags are the schema registry flags of the commands that read
// schemas. The registry's credentials come from the environment or a file,
// as the SASL password does, never from a flag or the URL, where `ps` and
// shell histories would show them.
type registryFlags struct {
	url, user, passwordFile, caFile string
	allowHTTPAuth                   bool
}

// add defines the flags on fs; usage says what the registry is for.
func (r *registryFlags) add(fs *flag.FlagSet, usage string) {
	fs.StringVar(&r.url, "registry", os.Getenv("WEIR_SCHEMA_REGISTRY_URL"), usage)
	fs.StringVar(&r.user, "registry-user", os.Getenv("WEIR_SCHEMA_REGISTRY_USER"),
		"schema registry user for HTTP basic authentication (default $WEIR_SCHEMA_REGISTRY_USER); the password is read from $WEIR_SCHEMA_REGISTRY_PASSWORD or -registry-password-file")
	fs.StringVar(&r.passwordFile, "registry-password-file", "", "file holding the schema registry password (one line)")
	fs.StringVar(&r.caFile, "registry-ca", "", "PEM file of the CAs that sign the registry's certificate (default: the system's)")
	fs.BoolVar(&r.allowHTTPAuth, "registry-allow-http-auth", false, "send the registry credentials to an http:// URL (only where nobody can overhear)")
}

// config returns the registry's schema.Config, validated.
func (r *registryFlags) config() (schema.Config, error) {
	c := schema.Config{URL: r.url, Username: r.user, Password: os.Getenv("WEIR_SCHEMA_REGISTRY_PASSWORD"), AllowBasicAuthOverHTTP: r.allowHTTPAuth}
	if r.passwordFile != "" {
		b, err := os.ReadFile(r.passwordFile)
		if err != nil {
			return c, fmt.Errorf("-registry-password-file: %w", err)
		}
		c.Password = strings.TrimRight(string(b), "\r\n")
	}
	if c.Password != "" && c.Username == "" {
		return c, fmt.Errorf("a registry password is given without -registry-user")
	}
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return c, fmt.Errorf("-registry-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return c, fmt.Errorf("-registry-ca: %s holds no PEM certificate", r.caFile)
		}
		c.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return c, c.Validate()
}

// client returns a registry client, or nil when no -registry is given.
func (r *registryFlags) client() (*schema.Client, error) {
	if r.url == "" {
		return nil, nil
	}
	c, err := r.config()
	if err != nil {
		return nil, &usageError{fmt.Sprintf("-registry: %v", err)}
	}
	reg, err := schema.New(c)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("-registry: %v", err)}
	}
	return reg, nil
}
