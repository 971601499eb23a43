package weir

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate and its key as PEM files in
// dir and returns their paths.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weir-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	c, err := (&TLS{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "broker-1"}).Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "broker-1" || c.MinVersion != tls.VersionTLS12 {
		t.Fatalf("loaded config: roots %v, %d certificates, server name %q, min version %x", c.RootCAs != nil, len(c.Certificates), c.ServerName, c.MinVersion)
	}
	c, err = (&TLS{MinVersion: tls.VersionTLS13, Base: &tls.Config{MinVersion: tls.VersionTLS10, NextProtos: []string{"x"}}}).Load()
	if err != nil || c.MinVersion != tls.VersionTLS13 || len(c.NextProtos) != 1 {
		t.Fatalf("base and min version: %+v, %v", c, err)
	}
	if c, _ := (&TLS{Base: &tls.Config{MinVersion: tls.VersionTLS10}}).Load(); c.MinVersion != tls.VersionTLS12 {
		t.Fatalf("a base below TLS 1.2 gave min version %x", c.MinVersion)
	}

	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  TLS
		want []string
	}{
		{"missing CA file", TLS{CAFile: filepath.Join(dir, "nope.pem")}, []string{"CAFile", "nope.pem"}},
		{"CA file without certificates", TLS{CAFile: garbage}, []string{"CAFile", "garbage.pem", "no PEM certificate"}},
		{"certificate without key", TLS{CertFile: cert}, []string{"CertFile and KeyFile"}},
		{"key that is no key", TLS{CertFile: cert, KeyFile: garbage}, []string{"CertFile", "garbage.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.tls.Load()
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v; want it to name %q", err, w)
				}
			}
		})
	}
}

func TestSecurityValidation(t *testing.T) {
	t.Parallel()
	base := Config{ApplicationID: "app", Brokers: []string{"b:9092"}}
	for _, tc := range []struct {
		name string
		sec  Security
		want string // "" = valid
	}{
		{"none", Security{}, ""},
		{"scram-sha-512", Security{SASL: SASL{Mechanism: SASLScramSHA512, User: "u", Password: "s3cr3t-pw"}}, ""},
		{"plain without password", Security{SASL: SASL{Mechanism: SASLPlain, User: "u"}}, "Config.Security.SASL.Password"},
		{"plain without TLS", Security{SASL: SASL{Mechanism: SASLPlain, User: "u", Password: "s3cr3t-pw"}}, "Config.Security.SASL.Mechanism"},
		{"plain without TLS, allowed", Security{SASL: SASL{Mechanism: SASLPlain, User: "u", Password: "s3cr3t-pw", AllowPlainWithoutTLS: true}}, ""},
		{"scram without user", Security{SASL: SASL{Mechanism: SASLScramSHA256, Password: "s3cr3t-pw"}}, "Config.Security.SASL.User"},
		{"credentials without mechanism", Security{SASL: SASL{User: "u", Password: "s3cr3t-pw"}}, "Config.Security.SASL.Mechanism"},
		{"unknown mechanism", Security{SASL: SASL{Mechanism: "OAUTHBEARER", User: "u", Password: "s3cr3t-pw"}}, "Config.Security.SASL.Mechanism"},
		{"unreadable CA", Security{TLS: &TLS{CAFile: "/nonexistent/ca.pem"}}, "Config.Security.TLS: CAFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Security = tc.sec
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid security refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v; want it to name %s", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "s3cr3t-pw"):
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}
