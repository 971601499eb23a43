package client

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// The SCRAM-SHA-256 exchange of RFC 7677, section 3: user "user",
// password "pencil", and the RFC's nonces.
func TestSCRAMSHA256MatchesRFC7677(t *testing.T) {
	t.Parallel()
	s := &scram{hash: sha256.New, nonce: func() string { return "rOprNGfwEbeRWgbNEkqO" }}
	if err := s.Begin("user", "pencil", ""); err != nil {
		t.Fatal(err)
	}
	first, err := s.Step("")
	if err != nil || first != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first = %q, %v", first, err)
	}
	final, err := s.Step("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	if err != nil || final != want {
		t.Fatalf("client-final = %q, %v; want %q", final, err, want)
	}
	if s.Done() {
		t.Fatal("done before the server's signature was checked")
	}
	if _, err := s.Step("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err != nil || !s.Done() {
		t.Fatalf("server-final refused: %v (done %v)", err, s.Done())
	}
}

func TestSCRAMRefusesWhatItCannotTrust(t *testing.T) {
	t.Parallel()
	serverFirst := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
	for _, tc := range []struct {
		name, serverFirst, serverFinal, want string
	}{
		{"foreign nonce", "r=someoneElse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "", "nonce"},
		{"no salt", "r=rOprNGfwEbeRWgbNEkqOx,i=4096", "", "salt"},
		{"bad iterations", "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0", "", "iteration"},
		{"one iteration", "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1", "", "iteration"},
		{"too few iterations", "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "", "iteration"},
		{"too many iterations", "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000000000", "", "iteration"},
		{"broker error", "e=unknown-user", "", "refused"},
		{"wrong server signature", serverFirst, "v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "signature"},
		{"broker refuses the proof", serverFirst, "e=invalid-proof", "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scram{hash: sha256.New, nonce: func() string { return "rOprNGfwEbeRWgbNEkqO" }}
			_ = s.Begin("user", "pencil", "")
			_, _ = s.Step("")
			_, err := s.Step(tc.serverFirst)
			if err == nil && tc.serverFinal != "" {
				_, err = s.Step(tc.serverFinal)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || s.Done() {
				t.Fatalf("err = %v, done %v; want an error about %q", err, s.Done(), tc.want)
			}
			if strings.Contains(err.Error(), "pencil") {
				t.Fatalf("error holds the password: %v", err)
			}
		})
	}
}

func TestSCRAMEscapesNames(t *testing.T) {
	t.Parallel()
	s := &scram{hash: sha256.New, nonce: func() string { return "n" }}
	_ = s.Begin("a=b,c", "p", "")
	if first, _ := s.Step(""); first != "n,,n=a=3Db=2Cc,r=n" {
		t.Fatalf("client-first = %q", first)
	}
}
