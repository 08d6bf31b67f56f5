// Package otp issues and checks verification codes.
//
// A code is otp.length digits drawn uniformly from crypto/rand. Only its
// keyed hash is stored, under one key per (address, purpose), where the
// address is the one the code is delivered to (Destination.Address: the
// email as typed with its domain normalized, or the E.164 number): a new
// code to that address replaces the old one, so only the latest is valid,
// and a code to another spelling of the mailbox (case, a +tag, Gmail
// dots) is another code, which leaves this one alone (a stranger's send
// to a variant must not replace the owner's code with one the owner's
// spelling cannot use). The limits still count the variants as one
// destination (Destination.Key). The hash is bound to the address too, so
// the code approves only that address. Checking is one
// atomic step in the store: the right code is consumed (single use even
// under parallel checks), a wrong one counts an attempt, and the attempt
// that reaches the maximum burns the code.
package otp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

// Check is the outcome of checking a code.
type Check int

// The outcomes. Only Approved approves; the API answers the others alike,
// so a caller cannot tell a wrong code from an expired or burned one.
const (
	// Approved: the code was right and is now used up.
	Approved Check = iota + 1
	// Wrong: a code is pending and this was not it.
	Wrong
	// Burned: this wrong guess used up the last attempt; the code is gone.
	Burned
	// Missing: no code is pending (never sent, expired, used or burned).
	Missing
)

func (c Check) String() string {
	switch c {
	case Approved:
		return "approved"
	case Wrong:
		return "wrong"
	case Burned:
		return "burned"
	case Missing:
		return "missing"
	}
	return fmt.Sprintf("Check(%d)", int(c))
}

// Store keeps pending codes. The redisstore package implements it.
type Store interface {
	// Put stores digest under key for ttl, with the send's receipt (see
	// guard.Guard.Receipt; may be empty), replacing any earlier code and
	// its attempt count. The earlier code's receipt is kept with the new
	// one (the newest ReceiptMax bytes): approving the code a resend
	// delivered settles the sends before it too. It returns the put's
	// number under key, above every earlier put's (the store's time in
	// µs, or one more than the last number when that is later): the code
	// kept is the one of the highest number.
	Put(ctx context.Context, key, digest string, ttl time.Duration, receipt string) (int64, error)
	// Check compares digest with the code under key, atomically: a match
	// deletes the code; a mismatch counts an attempt and deletes the code
	// at maxAttempts. It returns the store's clock and, when approved,
	// the receipt stored with the code.
	Check(ctx context.Context, key, digest string, maxAttempts int) (Verdict, error)
}

// ReceiptMax bounds the receipts a pending code keeps, in bytes.
const ReceiptMax = 2048

// KeepReceipts is what Put stores as the receipt of a code that replaces
// one whose receipt was old: both, the newest ReceiptMax bytes of them
// (whole entries).
func KeepReceipts(old, receipt string) string {
	r := receipt
	if old != "" {
		r = old
		if receipt != "" {
			r = old + " " + receipt
		}
	}
	if len(r) > ReceiptMax {
		r = r[len(r)-ReceiptMax:]
		if i := strings.IndexByte(r, ' '); i >= 0 {
			r = r[i+1:]
		} else {
			r = ""
		}
	}
	return r
}

// Verdict is a code check's answer.
type Verdict struct {
	Check Check
	// At is the store's clock.
	At time.Time
	// Receipt is, for an approved code, the receipt of the send that
	// issued it: settle it as a success.
	Receipt string
}

// Codes issues and checks codes.
type Codes struct {
	store       Store
	secret      []byte
	length      int
	ttl         time.Duration
	maxAttempts int
	timeout     time.Duration
	macs        sync.Pool // HMAC-SHA256 under secret
}

// New returns Codes configured by cfg.OTP, bounded by cfg.Store.Timeout per
// store call. secret keys the stored hashes (at least 16 bytes).
func New(cfg config.Config, store Store, secret []byte) (*Codes, error) {
	if len(secret) < 16 {
		return nil, errors.New("otp: the secret must be at least 16 bytes")
	}
	c := &Codes{
		store: store, secret: secret, length: cfg.OTP.Length, ttl: cfg.OTP.TTL,
		maxAttempts: cfg.OTP.MaxAttempts, timeout: cfg.Store.Timeout,
	}
	c.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return c, nil
}

// TTL is how long an issued code stays valid.
func (c *Codes) TTL() time.Duration { return c.ttl }

// Length is the number of digits of a code.
func (c *Codes) Length() int { return c.length }

// Issued is a code just stored.
type Issued struct {
	// Code is the clear code, for its message.
	Code string
	// Version is its number among the codes of its (destination,
	// purpose) (Store.Put's): the message carrying it is queued as
	// message.Message.Version, so that of two sends at once the one
	// delivered is the one whose code is kept.
	Version int64
	// Key is the store's key of the code (message.Message.CodeKey).
	Key string
}

// Issue draws a new code for (d, purpose), stores its hash with receipt
// (the send's, for the verify that approves it) and returns it.
func (c *Codes) Issue(ctx context.Context, d guard.Destination, purpose, receipt string) (Issued, error) {
	code, err := Generate(c.length)
	if err != nil {
		return Issued{}, err
	}
	key, digest := c.keyDigest(d, purpose, code)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	version, err := c.store.Put(ctx, key, digest, c.ttl, receipt)
	if err != nil {
		return Issued{}, fmt.Errorf("store code: %w", err)
	}
	return Issued{Code: code, Version: version, Key: key}, nil
}

// Verify checks code for (d, purpose).
func (c *Codes) Verify(ctx context.Context, d guard.Destination, purpose, code string) (Verdict, error) {
	key, digest := c.keyDigest(d, purpose, code)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := c.store.Check(ctx, key, digest, c.maxAttempts)
	if err != nil {
		return Verdict{}, fmt.Errorf("check code: %w", err)
	}
	return v, nil
}

// keyDigest returns the store key of (d, purpose) and the keyed hash of
// code bound to that key and to the address it goes to. The key holds no
// clear identifier; the digest cannot be checked against the 10^length
// codes without the secret.
func (c *Codes) keyDigest(d guard.Destination, purpose, code string) (key, digest string) {
	m := c.macs.Get().(hash.Hash)
	defer c.macs.Put(m)
	var sum [sha256.Size]byte
	m.Reset()
	m.Write([]byte("otp\x00" + d.Address + "\x00" + purpose))
	tag := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:16])
	key = "og:{" + tag + "}:otp"
	m.Reset()
	m.Write([]byte("code\x00" + tag + "\x00" + d.Address + "\x00" + code))
	return key, base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
}

// Generate returns length digits drawn uniformly from crypto/rand.
func Generate(length int) (string, error) {
	if length < 1 || length > 18 {
		return "", fmt.Errorf("otp: code length %d out of range", length)
	}
	n, err := rand.Int(rand.Reader, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(length)), nil))
	if err != nil {
		return "", fmt.Errorf("otp: draw code: %w", err)
	}
	return fmt.Sprintf("%0*d", length, n), nil
}
