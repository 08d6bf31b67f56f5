package token

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestSignVerify(t *testing.T) {
	s, err := NewSigner(Generate(), "otpguard", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign(time.Now(), "ann@example.com", "signup", "email", OTP)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(s.JWKS(), tok, "otpguard", OTP)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "ann@example.com" || c.Purpose != "signup" || c.Channel != "email" || c.ID == "" {
		t.Errorf("claims %+v", c)
	}
	other, err := NewSigner(Generate(), "otpguard", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(other.JWKS(), tok, "otpguard", OTP); err == nil {
		t.Error("verified against another key set")
	}
	if _, err := Verify(s.JWKS(), tok, "someone-else", OTP); err == nil {
		t.Error("verified with another issuer")
	}
	old, err := s.Sign(time.Now().Add(-time.Hour), "ann@example.com", "signup", "email", OTP)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(s.JWKS(), old, "otpguard", OTP); err == nil {
		t.Error("an expired token verified")
	}
	// alg none and HS256 with the public key as secret are refused (each
	// forged token is checked to be well formed first, so the refusal is
	// Verify's).
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil || strings.Count(none, ".") != 2 {
		t.Fatalf("forge alg none: %q %v", none, err)
	}
	if _, err := Verify(s.JWKS(), none, "otpguard", OTP); err == nil {
		t.Error("alg none verified")
	}
	x, err := base64.RawURLEncoding.DecodeString(s.JWKS().Keys[0].X)
	if err != nil || len(x) != ed25519.PublicKeySize {
		t.Fatalf("jwks x: %v", err)
	}
	h := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	h.Header["kid"] = s.JWKS().Keys[0].Kid
	hs, err := h.SignedString(x)
	if err != nil || strings.Count(hs, ".") != 2 {
		t.Fatalf("forge HS256: %q %v", hs, err)
	}
	if _, err := Verify(s.JWKS(), hs, "otpguard", OTP); err == nil {
		t.Error("HS256 keyed with the public key verified")
	}
}

// Through a rotation the JWKS serves the signing key and the others: a
// token signed with the previous key still verifies, and the next key is
// known before it signs.
func TestJWKSServesPreviousAndPendingKeys(t *testing.T) {
	prev, cur, next := Generate(), Generate(), Generate()
	old, err := NewSigner(prev, "otpguard", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := old.Sign(time.Now(), "ann@example.com", "login", "", Password)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(cur, "otpguard", time.Minute, prev.Public().(ed25519.PublicKey), next.Public().(ed25519.PublicKey), cur.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	set := s.JWKS()
	if len(set.Keys) != 3 || set.Keys[0].Kid != thumbprint(cur.Public().(ed25519.PublicKey)) {
		t.Fatalf("jwks: %+v (want the signing key first, no duplicate)", set.Keys)
	}
	if _, err := Verify(set, tok, "otpguard", Password); err != nil {
		t.Errorf("a token of the previous key: %v", err)
	}
	if _, err := Verify((&Signer{jwks: JWKS{Keys: set.Keys[:1]}}).JWKS(), tok, "otpguard", Password); err == nil {
		t.Error("a token of the previous key verified against the current key alone")
	}
}

func TestParseKey(t *testing.T) {
	key := Generate()
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	seed := key.Seed()
	for name, in := range map[string]string{
		"pem": pemKey, "std": base64.StdEncoding.EncodeToString(seed), "url": base64.RawURLEncoding.EncodeToString(seed),
		"padded with newline": base64.StdEncoding.EncodeToString(seed) + "\n",
	} {
		got, err := ParseKey(in)
		if err != nil || !got.Equal(key) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bad := range []string{"", "short", base64.StdEncoding.EncodeToString(make([]byte, 31)), strings.Replace(pemKey, "PRIVATE", "PUBLIC", 2)} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	if _, err := NewSigner(ed25519.PrivateKey("short"), "x", time.Minute); err == nil {
		t.Error("NewSigner accepted a short key")
	}
}

func TestKidIsTheRFC7638Thumbprint(t *testing.T) {
	// RFC 8037 appendix A.3: the thumbprint of its example key.
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got := thumbprint(ed25519.PublicKey(x)); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Errorf("thumbprint %s", got)
	}
}

// TestAPasswordTokenIsNoProofOfAnAddress: a password login's token and a
// verified code's token differ in amr, and each verifies only where the
// caller accepts its method: a backend that wants proof of an email never
// takes a login token for it.
func TestAPasswordTokenIsNoProofOfAnAddress(t *testing.T) {
	s, err := NewSigner(Generate(), "otpguard", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	login, _ := s.Sign(time.Now(), "victim@corp.example", "login", "", Password)
	code, _ := s.Sign(time.Now(), "victim@corp.example", "login", "email", OTP)
	if c, err := Verify(s.JWKS(), login, "otpguard", Password); err != nil || len(c.AMR) != 1 || c.AMR[0] != "pwd" {
		t.Errorf("a login token as a login: %+v %v", c, err)
	}
	if _, err := Verify(s.JWKS(), login, "otpguard", OTP); !errors.Is(err, ErrMethod) {
		t.Errorf("a login token taken as proof of the address: %v", err)
	}
	if c, err := Verify(s.JWKS(), code, "otpguard", OTP); err != nil || c.AMR[0] != "otp" {
		t.Errorf("a code's token: %+v %v", c, err)
	}
	if _, err := Verify(s.JWKS(), code, "otpguard", Password); !errors.Is(err, ErrMethod) {
		t.Errorf("a code's token taken as a password login: %v", err)
	}
	if _, err := Verify(s.JWKS(), code, "otpguard", ""); !errors.Is(err, ErrMethod) {
		t.Errorf("a verifier that names no method: %v", err)
	}
}
