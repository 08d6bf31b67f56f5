package cognito_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/cognito"
)

// fake answers every call with err, or with auth (InitiateAuth's JSON
// answer); it records each call's operation and its input as the wire
// has it (JSON, decoded).
type fake struct {
	err  error
	auth string
	op   string
	in   map[string]any
}

func (f *fake) Call(_ context.Context, op string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	f.op, f.in = op, nil
	if err := json.Unmarshal(b, &f.in); err != nil {
		return err
	}
	if f.err != nil {
		return f.err
	}
	if out != nil && f.auth != "" {
		return json.Unmarshal([]byte(f.auth), out)
	}
	return nil
}

// apiError is an error the service answered (as awsjson.Error has it).
type apiError string

func (e apiError) Error() string     { return "cognito: " + string(e) }
func (e apiError) ErrorCode() string { return string(e) }

func TestLoginErrorsMapEnumerationSafe(t *testing.T) {
	for code, want := range map[string]error{
		"NotAuthorizedException":         authn.ErrInvalidCredentials,
		"UserNotFoundException":          authn.ErrInvalidCredentials,
		"UserNotConfirmedException":      authn.ErrInvalidCredentials,
		"PasswordResetRequiredException": authn.ErrInvalidCredentials,
		"InvalidPasswordException":       authn.ErrInvalidCredentials,
		"TooManyRequestsException":       authn.ErrUnavailable,
		"InternalErrorException":         authn.ErrUnavailable,
		"ResourceNotFoundException":      authn.ErrUnavailable,
	} {
		for _, err := range []error{apiError(code), fmt.Errorf("InitiateAuth: %w", apiError(code))} {
			a := cognito.New(&fake{err: err}, "client", "")
			_, got := a.Login(context.Background(), authn.Login{Username: "u@example.com", Password: "p"})
			if !errors.Is(got, want) {
				t.Errorf("%s (%v): %v, want %v", code, err, got, want)
			}
		}
	}
	if _, err := cognito.New(&fake{err: errors.New("dial tcp: refused")}, "client", "").Login(context.Background(), authn.Login{}); !errors.Is(err, authn.ErrUnavailable) {
		t.Errorf("a network error: %v", err)
	}
}

func TestLoginSuccessChallengeAndSecretHash(t *testing.T) {
	f := &fake{auth: `{"AuthenticationResult":{"AccessToken":"a","IdToken":"i","RefreshToken":"r","ExpiresIn":3600,"TokenType":"Bearer"},"ChallengeParameters":{}}`}
	a := cognito.New(f, "client", "s3cret")
	res, err := a.Login(context.Background(), authn.Login{Username: "u@example.com", Password: "p"})
	r, _ := res.Fields["authenticationResult"].(map[string]any)
	if err != nil || r["accessToken"] != "a" || r["idToken"] != "i" || r["refreshToken"] != "r" || r["expiresIn"] != int32(3600) || r["tokenType"] != "Bearer" {
		t.Fatalf("%+v %v", res, err)
	}
	params, _ := f.in["AuthParameters"].(map[string]any)
	if f.op != "InitiateAuth" || f.in["AuthFlow"] != "USER_PASSWORD_AUTH" || f.in["ClientId"] != "client" || params["USERNAME"] != "u@example.com" || params["PASSWORD"] != "p" {
		t.Errorf("%s %+v", f.op, f.in)
	}
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte("u@example.comclient"))
	if got, want := params["SECRET_HASH"], base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("SECRET_HASH %q, want %q", got, want)
	}
	if err := a.SignUp(context.Background(), authn.SignUp{Email: "u@example.com", Password: "p"}); err != nil || f.in["SecretHash"] != base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
		t.Errorf("a signup's SecretHash: %v %+v", err, f.in)
	}
	f.auth = `{"ChallengeName":"SOFTWARE_TOKEN_MFA","Session":"sess","ChallengeParameters":{}}`
	res, err = a.Login(context.Background(), authn.Login{Username: "u@example.com", Password: "p"})
	if err != nil || res.Challenge == nil || res.Challenge.Name != "SOFTWARE_TOKEN_MFA" || res.Challenge.Session != "sess" {
		t.Errorf("challenge: %+v %v", res, err)
	}
}

func TestSignUpAnswers(t *testing.T) {
	for code, want := range map[string]error{
		"":                             nil,
		"UsernameExistsException":      nil, // the same 202: no enumeration
		"CodeDeliveryFailureException": nil,
		"InvalidPasswordException":     authn.ErrRejected,
		"InvalidParameterException":    authn.ErrRejected,
		"TooManyRequestsException":     authn.ErrUnavailable,
	} {
		var err error
		if code != "" {
			err = apiError(code)
		}
		f := &fake{err: err}
		got := cognito.New(f, "client", "").SignUp(context.Background(), authn.SignUp{Email: "u@example.com", Password: "p", Attributes: map[string]string{"name": "U"}})
		if (want == nil && got != nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("%q: %v, want %v", code, got, want)
		}
		attrs, _ := json.Marshal(f.in["UserAttributes"])
		if f.op != "SignUp" || f.in["ClientId"] != "client" || f.in["Username"] != "u@example.com" || f.in["Password"] != "p" ||
			string(attrs) != `[{"Name":"email","Value":"u@example.com"},{"Name":"name","Value":"U"}]` {
			t.Errorf("%s %+v", f.op, f.in)
		}
		if _, ok := f.in["SecretHash"]; ok {
			t.Errorf("a client without a secret sends a SecretHash: %+v", f.in)
		}
	}
}

// The addresses a step-up code may go to are the ID token's verified ones
// (docs/contract.md §6): an unverified email is no address.
func TestVerifiedAddressesComeFromTheIDToken(t *testing.T) {
	idToken := func(claims string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
	}
	for _, c := range []struct {
		claims       string
		email, phone string
	}{
		{`{"email":"a@example.com","email_verified":true,"phone_number":"+14155550100","phone_number_verified":"true"}`, "a@example.com", "+14155550100"},
		{`{"email":"a@example.com","email_verified":false,"phone_number":"+14155550100"}`, "", ""},
		{`{"email":"a@example.com","email_verified":"true"}`, "a@example.com", ""},
		{`not json`, "", ""},
	} {
		f := &fake{auth: `{"AuthenticationResult":{"AccessToken":"a","IdToken":"` + idToken(c.claims) + `","ExpiresIn":3600,"TokenType":"Bearer"}}`}
		res, err := cognito.New(f, "client", "").Login(context.Background(), authn.Login{Username: "u", Password: "p"})
		if err != nil || res.VerifiedEmail != c.email || res.VerifiedPhone != c.phone {
			t.Errorf("%s: %q %q %v, want %q %q", c.claims, res.VerifiedEmail, res.VerifiedPhone, err, c.email, c.phone)
		}
	}
}

// messageError is a service error whose message holds what a user pool's
// trigger put there.
type messageError struct{ code, msg string }

func (e messageError) Error() string     { return e.code + ": " + e.msg }
func (e messageError) ErrorCode() string { return e.code }

// TestErrorsCarryTheCodeNotTheMessage: an answer's message (a trigger's
// own text may hold the address) never reaches the error the API logs.
func TestErrorsCarryTheCodeNotTheMessage(t *testing.T) {
	err := messageError{"UserLambdaValidationException", "PreSignUp failed with error ann@example.com is blocked."}
	a := cognito.New(&fake{err: err}, "client", "")
	_, got := a.Login(context.Background(), authn.Login{Username: "ann@example.com", Password: "p"})
	up := a.SignUp(context.Background(), authn.SignUp{Email: "ann@example.com", Password: "p"})
	for name, e := range map[string]error{"login": got, "signup": up} {
		if !errors.Is(e, authn.ErrUnavailable) || strings.Contains(e.Error(), "ann@example.com") || !strings.Contains(e.Error(), "UserLambdaValidationException") {
			t.Errorf("%s: %v, want unavailable with the code and without the address", name, e)
		}
	}
}
