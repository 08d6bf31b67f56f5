// Package cognito is the authenticator on an Amazon Cognito user pool
// (AUTH=cognito), through the aws-sdk-go-v2 Cognito Identity Provider
// client: InitiateAuth with USER_PASSWORD_AUTH for login, SignUp for
// signup, each with SECRET_HASH when the app client has a secret.
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

	"github.com/aws/aws-sdk-go-v2/aws"
	cip "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"
	"github.com/aws/smithy-go"
	"github.com/otpguard/otpguard/guard/authn"
)

// API is the part of the Cognito client the authenticator uses.
type API interface {
	InitiateAuth(ctx context.Context, in *cip.InitiateAuthInput, opts ...func(*cip.Options)) (*cip.InitiateAuthOutput, error)
	SignUp(ctx context.Context, in *cip.SignUpInput, opts ...func(*cip.Options)) (*cip.SignUpOutput, error)
}

// Authenticator fronts one app client of a user pool.
type Authenticator struct {
	api              API
	clientID, secret string
}

// New returns the authenticator for app client clientID (clientSecret ""
// when the client has none).
func New(api API, clientID, clientSecret string) *Authenticator {
	return &Authenticator{api: api, clientID: clientID, secret: clientSecret}
}

// secretHash is Base64(HMAC-SHA256(client secret, username + client id)).
func (a *Authenticator) secretHash(username string) *string {
	if a.secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(a.secret))
	m.Write([]byte(username + a.clientID))
	return aws.String(base64.StdEncoding.EncodeToString(m.Sum(nil)))
}

// Login implements api.Authenticator.
func (a *Authenticator) Login(ctx context.Context, l authn.Login) (authn.LoginResult, error) {
	params := map[string]string{"USERNAME": l.Username, "PASSWORD": l.Password}
	if h := a.secretHash(l.Username); h != nil {
		params["SECRET_HASH"] = *h
	}
	out, err := a.api.InitiateAuth(ctx, &cip.InitiateAuthInput{
		AuthFlow: types.AuthFlowTypeUserPasswordAuth, ClientId: aws.String(a.clientID), AuthParameters: params,
	})
	if err != nil {
		return authn.LoginResult{}, classify(err)
	}
	if out.ChallengeName != "" {
		return authn.LoginResult{Challenge: &authn.Challenge{Name: string(out.ChallengeName), Session: aws.ToString(out.Session)}}, nil
	}
	r := out.AuthenticationResult
	if r == nil {
		return authn.LoginResult{}, fmt.Errorf("%w: cognito answered neither tokens nor a challenge", authn.ErrUnavailable)
	}
	res := map[string]any{"accessToken": aws.ToString(r.AccessToken), "idToken": aws.ToString(r.IdToken),
		"expiresIn": r.ExpiresIn, "tokenType": aws.ToString(r.TokenType)}
	if r.RefreshToken != nil {
		res["refreshToken"] = *r.RefreshToken
	}
	out2 := authn.LoginResult{Fields: map[string]any{"authenticationResult": res}}
	out2.VerifiedEmail, out2.VerifiedPhone = verified(aws.ToString(r.IdToken))
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
	attrs := []types.AttributeType{{Name: aws.String("email"), Value: aws.String(s.Email)}}
	for _, k := range slices.Sorted(maps.Keys(s.Attributes)) {
		if k != "email" {
			attrs = append(attrs, types.AttributeType{Name: aws.String(k), Value: aws.String(s.Attributes[k])})
		}
	}
	_, err := a.api.SignUp(ctx, &cip.SignUpInput{
		ClientId: aws.String(a.clientID), Username: aws.String(s.Email), Password: aws.String(s.Password),
		SecretHash: a.secretHash(s.Email), UserAttributes: attrs,
	})
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
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

// classify maps a Cognito error to the authenticator outcomes, by error
// code (the typed errors of the SDK, or an emulator's generic ones).
func classify(err error) error {
	code := "network"
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	switch code {
	case "NotAuthorizedException", "UserNotFoundException", "UserNotConfirmedException", "PasswordResetRequiredException",
		// Cognito answers a wrong password with NotAuthorized; emulators
		// (cognito-local) with InvalidPassword, which on InitiateAuth can
		// mean nothing else.
		"InvalidPasswordException":
		return authn.ErrInvalidCredentials
	}
	// TooManyRequests, LimitExceeded, InternalError, a misconfigured
	// client, the network: the authenticator, not the user.
	return fmt.Errorf("%w: cognito: %s: %w", authn.ErrUnavailable, code, err)
}
