package token

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
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
	tok, err := s.Sign(time.Now(), "ann@example.com", "signup", "email")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(s.JWKS(), tok, "otpguard")
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "ann@example.com" || c.Purpose != "signup" || c.Channel != "email" || c.ID == "" {
		t.Errorf("claims %+v", c)
	}
	other, _ := NewSigner(Generate(), "otpguard", time.Minute)
	if _, err := Verify(other.JWKS(), tok, "otpguard"); err == nil {
		t.Error("verified against another key set")
	}
	if _, err := Verify(s.JWKS(), tok, "someone-else"); err == nil {
		t.Error("verified with another issuer")
	}
	old, _ := s.Sign(time.Now().Add(-time.Hour), "ann@example.com", "signup", "email")
	if _, err := Verify(s.JWKS(), old, "otpguard"); err == nil {
		t.Error("an expired token verified")
	}
	// alg none and HS256 with the public key as secret are refused.
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if _, err := Verify(s.JWKS(), none, "otpguard"); err == nil {
		t.Error("alg none verified")
	}
	x, _ := base64.RawURLEncoding.DecodeString(s.JWKS().Keys[0].X)
	h := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	h.Header["kid"] = s.JWKS().Keys[0].Kid
	hs, _ := h.SignedString(x)
	if _, err := Verify(s.JWKS(), hs, "otpguard"); err == nil {
		t.Error("HS256 keyed with the public key verified")
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
