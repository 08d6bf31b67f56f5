package token_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/token"
)

// TestPublicKeyTakesOnlyAnEd25519KeyOfItsKid: a verifier reads from the
// JWKS only an OKP/Ed25519 key of the token's kid whose x is 32 bytes of
// base64url; anything else is an error, never a key.
func TestPublicKeyTakesOnlyAnEd25519KeyOfItsKid(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	x := base64.RawURLEncoding.EncodeToString(pub)
	good := token.JWK{Kty: "OKP", Crv: "Ed25519", X: x, Kid: "k1"}
	set := token.JWKS{Keys: []token.JWK{
		{Kty: "EC", Crv: "Ed25519", X: x, Kid: "k1"},  // another type first: skipped
		{Kty: "OKP", Crv: "X25519", X: x, Kid: "k1"},  // another curve: skipped
		{Kty: "OKP", Crv: "Ed25519", X: x, Kid: "k0"}, // another kid: skipped
		good,
	}}
	k, err := set.PublicKey("k1")
	if err != nil || !k.Equal(pub) {
		t.Fatalf("the key of kid k1: %x, %v", k, err)
	}
	if _, err := set.PublicKey("k2"); err == nil {
		t.Error("a kid the set lacks gave a key")
	}
	for name, bad := range map[string]string{
		"31 bytes":      base64.RawURLEncoding.EncodeToString(pub[:31]),
		"33 bytes":      base64.RawURLEncoding.EncodeToString(append(pub, 0)),
		"not base64url": strings.Repeat("*", 43),
		"empty":         "",
	} {
		k := good
		k.X = bad
		if got, err := (token.JWKS{Keys: []token.JWK{k}}).PublicKey("k1"); err == nil {
			t.Errorf("x of %s: a key %x, no error", name, got)
		}
	}
}
