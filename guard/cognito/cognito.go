// Package cognito is the authenticator on an Amazon Cognito user pool
// (AUTH=cognito), through the Cognito Identity Provider API's JSON
// protocol (internal/awsjson, unsigned as these operations are):
// InitiateAuth with USER_PASSWORD_AUTH for login, SignUp for signup, each
// with SECRET_HASH when the app client has a secret.
//
// Every error a user can cause maps to an answer that tells no account
// apart from another: a wrong password, an unknown user, an unconfirmed
// one, a disabled one (NotAuthorized "User is disabled."), one who must
// reset the password, all are authn.ErrInvalidCredentials; a signup for a
// registered address (UsernameExists) succeeds like a new one. Cognito's
// own throttling (TooManyRequests, LimitExceeded) and failures are
// authn.ErrUnavailable: not the user's doing, never counted as their
// failure. MFA and new-password challenges are answered as challenges.
//
// Configure the pool with PreventUserExistenceErrors ENABLED, and a
// password policy no stricter than otpguard's (the stack's pool has
// minimum length 8 and no character classes): Cognito checks a signup's
// password only for new users, so a stricter policy of its own would tell
// new addresses from registered ones.
package cognito

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/otpguard/otpguard/guard/authn"
)

// Caller calls one operation of the Cognito Identity Provider API (the
// JSON 1.1 protocol; internal/awsjson's Client, with anonymous
// credentials): in is sent as JSON and the answer decoded into out. An
// error the service answered has an ErrorCode method giving its code.
type Caller interface {
	Call(ctx context.Context, operation string, in, out any) error
}

// Authenticator fronts one app client of a user pool.
type Authenticator struct {
	api              Caller
	clientID, secret string
}

// New returns the authenticator for app client clientID (clientSecret ""
// when the client has none).
func New(api Caller, clientID, clientSecret string) *Authenticator {
	return &Authenticator{api: api, clientID: clientID, secret: clientSecret}
}

// secretHash is Base64(HMAC-SHA256(client secret, username + client id)),
// or "" when the client has no secret.
func (a *Authenticator) secretHash(username string) string {
	if a.secret == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(a.secret))
	m.Write([]byte(username + a.clientID))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// initiateAuth is InitiateAuth's input and answer.
type initiateAuth struct {
	AuthFlow       string
	ClientId       string
	AuthParameters map[string]string
}

type initiateAuthAnswer struct {
	ChallengeName, Session string
	AuthenticationResult   *struct {
		AccessToken, IdToken, TokenType string
		RefreshToken                    *string
		ExpiresIn                       int32
	}
}

// Login implements api.Authenticator.
func (a *Authenticator) Login(ctx context.Context, l authn.Login) (authn.LoginResult, error) {
	params := map[string]string{"USERNAME": l.Username, "PASSWORD": l.Password}
	if h := a.secretHash(l.Username); h != "" {
		params["SECRET_HASH"] = h
	}
	var out initiateAuthAnswer
	err := a.api.Call(ctx, "InitiateAuth", initiateAuth{AuthFlow: "USER_PASSWORD_AUTH", ClientId: a.clientID, AuthParameters: params}, &out)
	if err != nil {
		return authn.LoginResult{}, classify(err)
	}
	if out.ChallengeName != "" {
		return authn.LoginResult{Challenge: &authn.Challenge{Name: out.ChallengeName, Session: out.Session}}, nil
	}
	r := out.AuthenticationResult
	if r == nil {
		return authn.LoginResult{}, fmt.Errorf("%w: cognito answered neither tokens nor a challenge", authn.ErrUnavailable)
	}
	res := map[string]any{"accessToken": r.AccessToken, "idToken": r.IdToken, "expiresIn": r.ExpiresIn, "tokenType": r.TokenType}
	if r.RefreshToken != nil {
		res["refreshToken"] = *r.RefreshToken
	}
	out2 := authn.LoginResult{Fields: map[string]any{"authenticationResult": res}}
	out2.VerifiedEmail, out2.VerifiedPhone = verified(r.IdToken)
	return out2, nil
}

// verified reads the ID token Cognito just answered (over TLS, to this
// call: its signature is Cognito's business here) for the addresses the
// user pool marks verified.
func verified(idToken string) (email, phone string) {
	parts := strings.Split(idToken, ".")
	if len(parts) != 3 {
		return "", ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", ""
	}
	var c struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
		Phone         string `json:"phone_number"`
		PhoneVerified any    `json:"phone_number_verified"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return "", ""
	}
	yes := func(v any) bool { return v == true || v == "true" }
	if yes(c.EmailVerified) {
		email = c.Email
	}
	if yes(c.PhoneVerified) {
		phone = c.Phone
	}
	return email, phone
}

// SignUp implements api.Authenticator: Cognito then sends its own
// confirmation code.
func (a *Authenticator) SignUp(ctx context.Context, s authn.SignUp) error {
	type attribute struct{ Name, Value string }
	attrs := []attribute{{"email", s.Email}}
	for _, k := range slices.Sorted(maps.Keys(s.Attributes)) {
		if k != "email" {
			attrs = append(attrs, attribute{k, s.Attributes[k]})
		}
	}
	in := struct {
		ClientId, Username, Password string
		SecretHash                   string `json:",omitempty"`
		UserAttributes               []attribute
	}{a.clientID, s.Email, s.Password, a.secretHash(s.Email), attrs}
	err := a.api.Call(ctx, "SignUp", in, nil)
	code := errorCode(err)
	switch {
	case err == nil, code == "UsernameExistsException", code == "CodeDeliveryFailureException":
		// A registered address answers as a new one. A code Cognito could
		// not deliver leaves a user who asks for another.
		return nil
	case code == "InvalidPasswordException":
		return fmt.Errorf("%w: the password does not meet the user pool's policy", authn.ErrRejected)
	case code == "InvalidParameterException":
		return fmt.Errorf("%w: the user pool refuses an attribute", authn.ErrRejected)
	}
	return classify(err)
}

// errorCode is the code of an error the service answered, or "".
func errorCode(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}

// classify maps a Cognito error to the authenticator outcomes, by error
// code (Cognito's, or an emulator's).
func classify(err error) error {
	code := errorCode(err)
	switch code {
	case "NotAuthorizedException", "UserNotFoundException", "UserNotConfirmedException", "PasswordResetRequiredException",
		// Cognito answers a wrong password with NotAuthorized; emulators
		// (cognito-local) with InvalidPassword, which on InitiateAuth can
		// mean nothing else.
		"InvalidPasswordException":
		return authn.ErrInvalidCredentials
	case "": // no answer (the network): the failure as it is
		return fmt.Errorf("%w: cognito: %w", authn.ErrUnavailable, err)
	}
	// TooManyRequests, LimitExceeded, InternalError, a misconfigured
	// client: the authenticator, not the user. The answer's code only,
	// never its message (a trigger's own message may hold the address).
	return fmt.Errorf("%w: cognito: %s", authn.ErrUnavailable, code)
}
