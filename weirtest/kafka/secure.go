package kafka

import (
	"os"
	"strings"
	"testing"
)

// SecureListener is a SASL_SSL listener of the test cluster and its test
// users, as weir's `make kafka-up` describes it in the environment
// (WEIR_SASL_SSL_BOOTSTRAP_SERVERS, WEIR_SASL_SSL_CA_FILE,
// WEIR_SASL_SSL_SCRAM_USER and _PASSWORD, WEIR_SASL_SSL_PLAIN_USER and
// _PASSWORD). The SCRAM user exists for SCRAM-SHA-256 and SCRAM-SHA-512.
type SecureListener struct {
	Brokers                  []string
	CAFile                   string // PEM certificate the listener's certificate chains to
	SCRAMUser, SCRAMPassword string
	PlainUser, PlainPassword string
}

// SASLSSL returns the environment's SASL_SSL listener. Without one the
// test is skipped with how to get one, or fails when CI=true.
func SASLSSL(t testing.TB) SecureListener {
	t.Helper()
	l := SecureListener{
		CAFile:    os.Getenv("WEIR_SASL_SSL_CA_FILE"),
		SCRAMUser: os.Getenv("WEIR_SASL_SSL_SCRAM_USER"), SCRAMPassword: os.Getenv("WEIR_SASL_SSL_SCRAM_PASSWORD"),
		PlainUser: os.Getenv("WEIR_SASL_SSL_PLAIN_USER"), PlainPassword: os.Getenv("WEIR_SASL_SSL_PLAIN_PASSWORD"),
		Brokers: splitBrokers(os.Getenv("WEIR_SASL_SSL_BOOTSTRAP_SERVERS")),
	}
	if len(l.Brokers) == 0 || l.CAFile == "" || l.SCRAMUser == "" {
		const msg = "no SASL_SSL listener in the environment (WEIR_SASL_SSL_*): weir's make kafka-up starts one and writes it to ~/.cache/weir/env/env.sh"
		if inCI() {
			t.Fatalf("weirtest/kafka: %s, and tests never skip when %s=true", msg, envCI)
		}
		t.Skipf("weirtest/kafka: %s", msg)
	}
	return l
}

// BrokerList returns the listener's bootstrap servers, comma-separated.
func (l SecureListener) BrokerList() string { return strings.Join(l.Brokers, ",") }
