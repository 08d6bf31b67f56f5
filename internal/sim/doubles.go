package sim

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/store"
)

type sent struct {
	channel message.Channel
	to      string
}

// Send implements message.Sender: the simulated provider.
func (e *engine) Send(_ context.Context, m message.Message) error {
	e.codes[m.To] = m.Code
	e.sent = append(e.sent, sent{m.Channel, m.To})
	return nil
}

// Login implements api.Authenticator: the accounts in memory.
func (e *engine) Login(_ context.Context, l authn.Login) (authn.LoginResult, error) {
	if p, ok := e.accounts[l.Account]; ok && p == l.Password {
		return authn.LoginResult{Token: true, VerifiedEmail: l.Username}, nil
	}
	return authn.LoginResult{}, authn.ErrInvalidCredentials
}

// SignUp implements api.Authenticator.
func (e *engine) SignUp(_ context.Context, s authn.SignUp) error {
	a, err := identity.ParseAccount(s.Email)
	if err != nil {
		return err
	}
	if _, ok := e.accounts[a]; !ok {
		e.accounts[a] = s.Password
	}
	return nil
}

// pendingCode is a code in the in-memory code store.
type pendingCode struct {
	digest, receipt string
	tries           int
	expires         time.Time
}

// codePuts is the number of a key's last put, until expires (code_put's
// KEYS[2]).
type codePuts struct {
	n       int64
	expires time.Time
}

// memCodes is the otp.Store in memory, on the virtual clock.
type memCodes struct{ e *engine }

func (m memCodes) Put(_ context.Context, key, digest string, ttl time.Duration, receipt string) (int64, error) {
	if old := m.e.pending[key]; old != nil && m.e.now.Before(old.expires) {
		receipt = otp.KeepReceipts(old.receipt, receipt)
	}
	m.e.pending[key] = &pendingCode{digest: digest, receipt: receipt, expires: m.e.now.Add(ttl)}
	p := m.e.puts[key]
	if p == nil || !m.e.now.Before(p.expires) {
		p = &codePuts{}
		m.e.puts[key] = p
	}
	p.n = max(p.n+1, m.e.now.UnixMicro()) // code_put's number
	p.expires = m.e.now.Add(2*ttl + time.Minute)
	return p.n, nil
}

func (m memCodes) Check(_ context.Context, key, digest string, maxAttempts int) (otp.Verdict, error) {
	now := m.e.now
	c := m.e.pending[key]
	if c == nil || !now.Before(c.expires) {
		delete(m.e.pending, key)
		return otp.Verdict{Check: otp.Missing, At: now}, nil
	}
	if c.digest == digest {
		delete(m.e.pending, key)
		return otp.Verdict{Check: otp.Approved, At: now, Receipt: c.receipt}, nil
	}
	c.tries++
	if c.tries >= maxAttempts {
		delete(m.e.pending, key)
		return otp.Verdict{Check: otp.Burned, At: now}, nil
	}
	return otp.Verdict{Check: otp.Wrong, At: now}, nil
}

// memBlobs is the api.Blobs in memory, on the virtual clock.
type memBlobs struct{ e *engine }

type blob struct {
	v       []byte
	expires time.Time
}

func (m memBlobs) Put(_ context.Context, key string, value []byte, ttl time.Duration) error {
	m.e.blobs[key] = blob{value, m.e.now.Add(ttl)}
	return nil
}

func (m memBlobs) Get(_ context.Context, key string) ([]byte, bool, error) {
	b, ok := m.e.blobs[key]
	if !ok || !m.e.now.Before(b.expires) {
		return nil, false, nil
	}
	return b.v, true, nil
}

func (m memBlobs) Delete(_ context.Context, key string) (bool, error) {
	_, ok := m.e.blobs[key]
	delete(m.e.blobs, key)
	return ok, nil
}

func (m memBlobs) Once(_ context.Context, key string, ttl time.Duration) (bool, error) {
	if b, ok := m.e.blobs[key]; ok && m.e.now.Before(b.expires) {
		return false, nil
	}
	m.e.blobs[key] = blob{nil, m.e.now.Add(ttl)}
	return true, nil
}

// solvingMarket is the CAPTCHA provider as the attackers meet it: every
// CAPTCHA is solved, by a solving service they pay (captchaPrice), and
// its token is good once. (Where no rule challenges, nobody pays.)
type solvingMarket struct{ e *engine }

func (m solvingMarket) Verify(_ context.Context, token string, _ netip.Addr) error {
	if !strings.HasPrefix(token, "solved-") || m.e.solved[token] {
		return api.ErrCaptchaRejected
	}
	m.e.solved[token] = true
	return nil
}

func (solvingMarket) SiteKey() string  { return "simulated" }
func (solvingMarket) Provider() string { return "turnstile" }

// noBackstop: the simulated store never fails.
type noBackstop struct{}

func (noBackstop) Do(context.Context, []store.Op) ([]store.OpResult, error) {
	return nil, store.ErrStoreUnavailable
}
func (noBackstop) Begin([]store.Op)                    {}
func (noBackstop) End([]store.Op)                      {}
func (noBackstop) Mirror([]store.Op, []store.OpResult) {}
func (noBackstop) Forget(string, string)               {}
