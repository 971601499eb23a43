package weir

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
)

// Security secures weir's connections to the brokers: every client weir
// creates (the stream threads' consumers and producers, the admin client,
// the restore and global-table consumers) uses it. The zero value is a
// plaintext, unauthenticated connection.
//
// The schema registry has its own settings in Config.Registry (TLS and
// basic authentication); [TLS.Load] builds its *tls.Config from the same
// files.
type Security struct {
	// TLS, when not nil, encrypts every broker connection (Kafka's SSL and
	// SASL_SSL security protocols).
	TLS *TLS
	// SASL, when its Mechanism is set, authenticates every broker
	// connection (SASL_PLAINTEXT, or SASL_SSL with TLS).
	SASL SASL
}

// TLS configures TLS from PEM files. The files are read when [Config.Validate]
// (and so New) runs: a missing or malformed file is reported then, naming
// the field and the file, not at the first connection.
type TLS struct {
	// CAFile is a PEM bundle of the certificate authorities that sign the
	// servers' certificates. Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate chain and private
	// key in PEM, for servers that require client certificates (mutual
	// TLS). Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the server's certificate is checked
	// against. Empty: the host name of the address dialled.
	ServerName string
	// MinVersion is the lowest TLS version accepted, such as
	// tls.VersionTLS13. Default (0) tls.VersionTLS12; lower versions are
	// refused.
	MinVersion uint16
	// Base, when set, is cloned and completed by the fields above (the
	// fields win where both say something): for settings they do not
	// cover, such as a custom VerifyPeerCertificate. Nothing else is
	// taken from the environment.
	Base *tls.Config
}

// Load reads the files and returns the *tls.Config they describe. Its
// errors name the field and the file. The returned config is new on every
// call; the caller owns it.
func (t *TLS) Load() (*tls.Config, error) {
	c := &tls.Config{}
	if t.Base != nil {
		c = t.Base.Clone()
	}
	c.MinVersion = max(c.MinVersion, t.MinVersion, tls.VersionTLS12)
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CAFile: %s holds no PEM certificate", t.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
	case t.CertFile == "" || t.KeyFile == "":
		return nil, errors.New("CertFile and KeyFile: set both for a client certificate, or neither")
	default:
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("CertFile %s and KeyFile %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = append(c.Certificates, pair)
	}
	return c, nil
}

// SASLMechanism names a SASL mechanism weir authenticates with.
type SASLMechanism string

// The SASL mechanisms weir supports.
const (
	// SASLPlain sends the user and password as they are, so it is refused
	// without Security.TLS unless SASL.AllowPlainWithoutTLS is set. Kafka's
	// PLAIN.
	SASLPlain SASLMechanism = "PLAIN"
	// SASLScramSHA256 and SASLScramSHA512 prove the password without
	// sending it (RFC 5802 and 7677); the broker stores only salted keys.
	// Kafka's SCRAM-SHA-256 and SCRAM-SHA-512.
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// SASL authenticates broker connections.
type SASL struct {
	// Mechanism is empty (no SASL), SASLPlain, SASLScramSHA256 or
	// SASLScramSHA512.
	Mechanism SASLMechanism
	// User and Password are the credentials; both are required with a
	// mechanism. The password is never logged nor put in an error. SCRAM
	// uses it as given (no SASLprep normalization): a password outside
	// ASCII must be given in the form the broker's credential was made
	// from.
	User, Password string
	// AllowPlainWithoutTLS lets SASLPlain send the password over a
	// connection weir does not encrypt: only for a listener that cannot be
	// overheard (loopback, or TLS ended by a sidecar on the same host).
	// Default false: PLAIN without Security.TLS is refused by Validate.
	AllowPlainWithoutTLS bool
}

// validate checks s and loads its TLS files, reporting each problem
// through bad with the field's path under "Security".
func (s *Security) validate(bad func(field, format string, args ...any)) {
	if s.TLS != nil {
		if _, err := s.TLS.Load(); err != nil {
			bad("Security.TLS", "%v", err)
		}
	}
	switch s.SASL.Mechanism {
	case "":
		if s.SASL.User != "" || s.SASL.Password != "" {
			bad("Security.SASL.Mechanism", "empty while User or Password is set (want %s, %s or %s)", SASLPlain, SASLScramSHA256, SASLScramSHA512)
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.SASL.User == "" {
			bad("Security.SASL.User", "required with mechanism %s", s.SASL.Mechanism)
		}
		if s.SASL.Password == "" {
			bad("Security.SASL.Password", "required with mechanism %s", s.SASL.Mechanism)
		}
		if s.SASL.Mechanism == SASLPlain && s.TLS == nil && !s.SASL.AllowPlainWithoutTLS {
			bad("Security.SASL.Mechanism", "%s sends the password as it is, and Security.TLS is not set (set SASL.AllowPlainWithoutTLS only for a listener nobody can overhear)", SASLPlain)
		}
	default:
		bad("Security.SASL.Mechanism", "%q is not supported (want %s, %s or %s)", s.SASL.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
}

// ErrAuthentication is wrapped by the error Run returns when the brokers
// refuse the SASL credentials of Config.Security (a wrong user or
// password, or a mechanism the listener does not enable). Run fails at
// once: retrying the same credentials cannot succeed.
var ErrAuthentication = errors.New("weir: the brokers refused the SASL credentials")

// ErrTLS is wrapped by the error Run returns when a TLS connection to the
// brokers fails: a certificate not signed by Config.Security.TLS's CAs
// (or the system's), a name that does not match, or a broker that does
// not speak TLS on that port.
var ErrTLS = errors.New("weir: TLS connection to the brokers failed")

// diagnoseConnect returns what made connecting to the brokers fail when
// it is the security setup: sarama's client reports only that it ran out
// of brokers, so diagnoseConnect opens one connection to each broker
// itself and classifies the first failure that says more (TLS, SASL).
// Otherwise it returns err.
func diagnoseConnect(brokers []string, sc *sarama.Config, sasl SASL, err error) error {
	for _, addr := range brokers {
		b := sarama.NewBroker(addr)
		if b.Open(sc) != nil {
			continue
		}
		_, cerr := b.Connected()
		_ = b.Close()
		if cerr == nil {
			continue
		}
		var (
			verify   *tls.CertificateVerificationError
			unknown  x509.UnknownAuthorityError
			hostname x509.HostnameError
			invalid  x509.CertificateInvalidError
			header   tls.RecordHeaderError
		)
		switch {
		case errors.As(cerr, &verify), errors.As(cerr, &unknown), errors.As(cerr, &hostname), errors.As(cerr, &invalid), errors.As(cerr, &header):
			return fmt.Errorf("%w: %s: %w", ErrTLS, addr, cerr)
		case errors.Is(cerr, sarama.ErrSASLAuthenticationFailed), errors.Is(cerr, sarama.ErrUnsupportedSASLMechanism), errors.Is(cerr, sarama.ErrIllegalSASLState):
			return fmt.Errorf("%w: %s as user %q at %s: %w", ErrAuthentication, sasl.Mechanism, sasl.User, addr, cerr)
		case sasl.Mechanism != "" && strings.HasPrefix(cerr.Error(), "scram:"):
			return fmt.Errorf("%w: %s as user %q at %s: %w", ErrAuthentication, sasl.Mechanism, sasl.User, addr, cerr)
		}
	}
	return err
}
