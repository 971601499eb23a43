package client

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// scram is the client side of a SCRAM exchange (RFC 5802; SHA-256 and
// SHA-512 as Kafka uses them, RFC 7677), implementing sarama.SCRAMClient:
// sarama sends what Begin and Step produce and hands back the broker's
// answers. It checks the broker's signature at the end, so a broker that
// does not know the password cannot pass for one that does. The password
// is used as given (no SASLprep).
type scram struct {
	hash  func() hash.Hash
	nonce func() string // the client nonce; random unless a test sets it

	user, password  string
	clientNonce     string
	clientFirstBare string
	serverSignature []byte
	step            int
	done            bool
}

// newSCRAM returns a generator of SCRAM clients for mechanism, which is
// "SCRAM-SHA-256" or "SCRAM-SHA-512".
func newSCRAM(mechanism string) (func() sarama.SCRAMClient, error) {
	var h func() hash.Hash
	switch mechanism {
	case sarama.SASLTypeSCRAMSHA256:
		h = sha256.New
	case sarama.SASLTypeSCRAMSHA512:
		h = sha512.New
	default:
		return nil, fmt.Errorf("client: SASL mechanism %q is not SCRAM", mechanism)
	}
	return func() sarama.SCRAMClient { return &scram{hash: h, nonce: randomNonce} }, nil
}

// randomNonce returns 24 random bytes in base64: printable and without
// commas, as the exchange requires.
func randomNonce() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return base64.RawStdEncoding.EncodeToString(b)
}

// Begin starts an exchange for user.
func (s *scram) Begin(user, password, authzID string) error {
	if authzID != "" {
		return errors.New("scram: authorization ids are not supported")
	}
	*s = scram{hash: s.hash, nonce: s.nonce, user: user, password: password}
	return nil
}

// Step answers the broker's message (empty at the start) with the next
// client message.
func (s *scram) Step(challenge string) (string, error) {
	s.step++
	switch s.step {
	case 1:
		s.clientNonce = s.nonce()
		s.clientFirstBare = "n=" + escapeSCRAMName(s.user) + ",r=" + s.clientNonce
		return "n,," + s.clientFirstBare, nil
	case 2:
		return s.clientFinal(challenge)
	case 3:
		return "", s.verifyServerFinal(challenge)
	default:
		return "", errors.New("scram: unexpected message after the exchange ended")
	}
}

// The iteration counts a SCRAM exchange accepts. Kafka's Java client
// refuses fewer than 4096 (a broker, or someone between, offering a cheap
// count to make an offline guess of the password easy), and Kafka makes
// no credential of more than 16384; a larger count would only make the
// client spend its CPU on the broker's word.
const (
	minSCRAMIterations = 4096
	maxSCRAMIterations = 16384
)

// Done reports whether the broker's final message was verified.
func (s *scram) Done() bool { return s.done }

// clientFinal proves the password against the broker's first message
// ("r=<nonce>,s=<salt>,i=<iterations>").
func (s *scram) clientFinal(serverFirst string) (string, error) {
	attrs := scramAttributes(serverFirst)
	if e, ok := attrs["e"]; ok {
		return "", fmt.Errorf("scram: the broker refused: %s", e)
	}
	nonce, salt64, iter := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, s.clientNonce) || len(nonce) == len(s.clientNonce) {
		return "", errors.New("scram: the broker's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return "", errors.New("scram: the broker sent no valid salt")
	}
	iterations, err := strconv.Atoi(iter)
	if err != nil || iterations < minSCRAMIterations || iterations > maxSCRAMIterations {
		return "", fmt.Errorf("scram: the broker sent the iteration count %q; weir accepts %d to %d, as Kafka's own client and credentials do",
			iter, minSCRAMIterations, maxSCRAMIterations)
	}
	salted, err := pbkdf2.Key(s.hash, s.password, salt, iterations, s.hash().Size())
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	withoutProof := "c=biws,r=" + nonce // biws: base64 of the GS2 header "n,,"
	authMessage := s.clientFirstBare + "," + serverFirst + "," + withoutProof
	clientKey := s.mac(salted, "Client Key")
	h := s.hash()
	h.Write(clientKey)
	storedKey := h.Sum(nil)
	proof := s.mac(storedKey, authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	s.serverSignature = s.mac(s.mac(salted, "Server Key"), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// verifyServerFinal checks the broker's signature ("v=<signature>").
func (s *scram) verifyServerFinal(serverFinal string) error {
	attrs := scramAttributes(serverFinal)
	if e, ok := attrs["e"]; ok {
		return fmt.Errorf("scram: the broker refused: %s", e)
	}
	got, err := base64.StdEncoding.DecodeString(attrs["v"])
	if err != nil || subtle.ConstantTimeCompare(got, s.serverSignature) != 1 {
		return errors.New("scram: the broker's signature does not match: it does not know the password")
	}
	s.done = true
	return nil
}

func (s *scram) mac(key []byte, msg string) []byte {
	m := hmac.New(s.hash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// scramAttributes splits "a=1,b=2" into its attributes.
func scramAttributes(msg string) map[string]string {
	attrs := map[string]string{}
	for part := range strings.SplitSeq(msg, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && len(k) == 1 {
			attrs[k] = v
		}
	}
	return attrs
}

// escapeSCRAMName escapes '=' and ',' in a user name (RFC 5802 5.1).
func escapeSCRAMName(name string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(name)
}
