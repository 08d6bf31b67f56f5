// Package authn is the contract between otpguard's HTTP API and an
// authenticator (the local users, Cognito, the app's own endpoint): the
// login and signup the API hands over once the guard admitted them, what
// a login answers, and the outcomes the API answers distinctly. An
// authenticator imports this, not the engine.
package authn

import (
	"errors"
	"net/netip"
)

// Login is one login attempt the API hands to an authenticator once the
// guard has admitted it.
type Login struct {
	// Account is the normalized username (identity.ParseAccount); Username
	// is as the user typed it, for authenticators that match it
	// themselves.
	Account, Username string
	Password          string
	// Body is the request body as received, for an authenticator that
	// forwards it (the app's own endpoint).
	Body []byte
	// ClientIP and UserAgent describe the caller, for forwarding.
	ClientIP  netip.Addr
	UserAgent string
}

// LoginResult is what a successful login answers with.
type LoginResult struct {
	// Token asks the API to sign its own login token for the account
	// (the local users).
	Token bool
	// Fields are members added to the 200 answer, such as Cognito's
	// authenticationResult.
	Fields map[string]any
	// Challenge is a step the user must still take (MFA, a new password):
	// the answer is {"status":"challenge","challengeName","session"}.
	Challenge *Challenge
	// Passthrough is an answer to relay as it is (the app's own endpoint).
	Passthrough *Passthrough
	// VerifiedEmail and VerifiedPhone are the account's addresses its
	// owner has proven, where a step-up code can go (docs/contract.md §6):
	// the local account's confirmed email; Cognito's email or
	// phone_number when its _verified attribute is true; the app's
	// X-Otpguard-Verified-Email or -Phone answer headers.
	VerifiedEmail, VerifiedPhone string `json:",omitempty"`
}

// Challenge is an authenticator's challenge, answered through it.
type Challenge struct {
	Name, Session string
}

// Passthrough is an upstream answer relayed to the caller.
type Passthrough struct {
	Status      int
	ContentType string
	Body        []byte
	// Cookies are its Set-Cookie values (the app's session).
	Cookies []string
}

// SignUp is one signup the API hands to an authenticator once the guard
// has admitted it and the password passed the policy.
type SignUp struct {
	// Email is the address as delivered to (the destination's Address).
	Email    string
	Password string
	// Attributes are extra user attributes (name, locale, ...), passed to
	// authenticators that take them.
	Attributes map[string]string
	Body       []byte
	ClientIP   netip.Addr
	UserAgent  string
}

// Authenticator outcomes the API answers distinctly.
var (
	// ErrInvalidCredentials: a wrong password, or an unknown, unconfirmed
	// or disabled user. Authenticators never tell these apart.
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrRejected: the authenticator refuses a signup for what it says
	// (its own password policy, an attribute it does not take), the same
	// whether or not the address is registered.
	ErrRejected = errors.New("the authenticator rejects the request")
	// ErrUnavailable: the authenticator failed, timed out or
	// throttled; the attempt did not happen.
	ErrUnavailable = errors.New("the authenticator is unavailable")
)
