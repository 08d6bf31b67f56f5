// Package token signs verification tokens: Ed25519 JWTs (alg EdDSA) that
// an app's backend checks against the public keys served as a JWKS, with
// no shared secret.
package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are the verification token's claims.
type Claims struct {
	jwt.RegisteredClaims
	// Purpose is the code's purpose (signup, login, ...).
	Purpose string `json:"purpose"`
	// Channel is email or sms.
	Channel string `json:"channel,omitempty"`
	// AMR is how the subject proved itself (RFC 8176): ["otp"] for a
	// verified code (proof of the destination), ["pwd"] for a password
	// login (proof of nothing about an address: anyone may sign up an
	// address they do not own where signups are not confirmed).
	AMR []string `json:"amr"`
}

// Method is an authentication method reference (RFC 8176).
type Method string

// The methods otpguard's tokens carry.
const (
	// OTP: a one-time code sent to the subject (the destination) was
	// entered: the token proves the subject's email or phone.
	OTP Method = "otp"
	// Password: a password login: the token proves the account's password.
	Password Method = "pwd"
)

// Signer signs tokens with one Ed25519 key and publishes that key and any
// others still trusted (a key being rotated in or out) as its JWKS.
type Signer struct {
	key    ed25519.PrivateKey
	kid    string
	issuer string
	ttl    time.Duration
	jwks   JWKS
}

// NewSigner returns a Signer; issuer and ttl come from the token config.
// others are public keys the JWKS also serves: the previous key, so tokens
// it signed stay valid through a rotation, and the next one, so backends
// know it before it signs.
func NewSigner(key ed25519.PrivateKey, issuer string, ttl time.Duration, others ...ed25519.PublicKey) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("token: not an Ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	s := &Signer{key: key, kid: thumbprint(pub), issuer: issuer, ttl: ttl}
	for _, k := range append([]ed25519.PublicKey{pub}, others...) {
		if len(k) != ed25519.PublicKeySize {
			return nil, errors.New("token: not an Ed25519 public key")
		}
		kid := thumbprint(k)
		if slices.ContainsFunc(s.jwks.Keys, func(j JWK) bool { return j.Kid == kid }) {
			continue
		}
		s.jwks.Keys = append(s.jwks.Keys, JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k), Kid: kid, Alg: "EdDSA", Use: "sig"})
	}
	return s, nil
}

// Generate returns a new random key: the local server's ephemeral key.
func Generate() ed25519.PrivateKey {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return key
}

// ParseKey reads a signing key as kept in a secret: a PKCS #8 PEM block
// ("-----BEGIN PRIVATE KEY-----", as `openssl genpkey -algorithm ed25519`
// writes), or the 32-byte seed in base64 (standard or URL alphabet).
func ParseKey(s string) (ed25519.PrivateKey, error) {
	s = strings.TrimSpace(s)
	if block, _ := pem.Decode([]byte(s)); block != nil {
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("token: signing key is a PEM %q block, want PRIVATE KEY (PKCS #8)", block.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("token: signing key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("token: signing key is a %T, not Ed25519", k)
		}
		return ek, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if seed, err := enc.DecodeString(s); err == nil && len(seed) == ed25519.SeedSize {
			return ed25519.NewKeyFromSeed(seed), nil
		}
	}
	return nil, errors.New("token: signing key is neither a PKCS #8 PEM Ed25519 key nor a base64 32-byte seed")
}

// Sign returns a token for sub (the normalized destination, or the
// account), proven by method, issued at now, which the caller takes from
// the store's clock.
func (s *Signer) Sign(now time.Time, sub, purpose, channel string, method Method) (string, error) {
	var jti [16]byte
	_, _ = rand.Read(jti[:])
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.issuer,
			Subject:   sub,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(s.ttl)),
			ID:        base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		Purpose: purpose,
		Channel: channel,
		AMR:     []string{string(method)},
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = s.kid
	signed, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return signed, nil
}

// JWK is one public key of a JWKS (RFC 8037 OKP key).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// JWKS is the document served at /.well-known/jwks.json.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWKS returns the public key set: the signing key first.
func (s *Signer) JWKS() JWKS { return JWKS{Keys: slices.Clone(s.jwks.Keys)} }

// PublicKey returns the key of set whose kid is kid.
func (set JWKS) PublicKey(kid string) (ed25519.PublicKey, error) {
	for _, k := range set.Keys {
		if k.Kid != kid || k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("token: key %s: bad x", kid)
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("token: no Ed25519 key %q in the set", kid)
}

// ErrMethod: the token was not earned the way the caller accepts.
var ErrMethod = errors.New("token: not earned by the accepted authentication method")

// Verify parses and checks a token against set: signature (EdDSA only),
// issuer, expiry, and how it was earned: the caller says which method it
// accepts (OTP where the token must prove an email or phone, Password for
// a login), so that a password login's token is never taken as proof of
// an address. It is what an app's backend does with the token.
func Verify(set JWKS, tokenString, issuer string, accept Method) (*Claims, error) {
	c := &Claims{}
	_, err := jwt.ParseWithClaims(tokenString, c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return set.PublicKey(kid)
	}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(issuer), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return nil, err
	}
	if accept == "" || !slices.Contains(c.AMR, string(accept)) {
		return nil, fmt.Errorf("%w: the token's amr is %v, want %q", ErrMethod, c.AMR, accept)
	}
	return c, nil
}

// thumbprint is the RFC 7638 JWK thumbprint of an Ed25519 public key.
func thumbprint(pub ed25519.PublicKey) string {
	m, _ := json.Marshal(struct {
		Crv string `json:"crv"`
		Kty string `json:"kty"`
		X   string `json:"x"`
	}{"Ed25519", "OKP", base64.RawURLEncoding.EncodeToString(pub)})
	sum := sha256.Sum256(m)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
