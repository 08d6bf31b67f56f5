package cognito_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	cip "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"
	"github.com/aws/smithy-go"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/cognito"
)

// fake answers every call with err, or out; it records the inputs.
type fake struct {
	err    error
	auth   *cip.InitiateAuthOutput
	inAuth *cip.InitiateAuthInput
	inUp   *cip.SignUpInput
}

func (f *fake) InitiateAuth(_ context.Context, in *cip.InitiateAuthInput, _ ...func(*cip.Options)) (*cip.InitiateAuthOutput, error) {
	f.inAuth = in
	return f.auth, f.err
}

func (f *fake) SignUp(_ context.Context, in *cip.SignUpInput, _ ...func(*cip.Options)) (*cip.SignUpOutput, error) {
	f.inUp = in
	return &cip.SignUpOutput{}, f.err
}

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
		for _, err := range []error{&smithy.GenericAPIError{Code: code}, typed(code)} {
			if err == nil {
				continue
			}
			a := cognito.New(&fake{err: err}, "client", "")
			_, got := a.Login(context.Background(), authn.Login{Username: "u@example.com", Password: "p"})
			if !errors.Is(got, want) {
				t.Errorf("%s (%T): %v, want %v", code, err, got, want)
			}
		}
	}
	if _, err := cognito.New(&fake{err: errors.New("dial tcp: refused")}, "client", "").Login(context.Background(), authn.Login{}); !errors.Is(err, authn.ErrUnavailable) {
		t.Errorf("a network error: %v", err)
	}
}

func typed(code string) error {
	switch code {
	case "NotAuthorizedException":
		return &types.NotAuthorizedException{Message: aws.String("Incorrect username or password.")}
	case "UserNotFoundException":
		return &types.UserNotFoundException{}
	case "UserNotConfirmedException":
		return &types.UserNotConfirmedException{}
	case "PasswordResetRequiredException":
		return &types.PasswordResetRequiredException{}
	case "TooManyRequestsException":
		return &types.TooManyRequestsException{}
	}
	return nil
}

func TestLoginSuccessChallengeAndSecretHash(t *testing.T) {
	f := &fake{auth: &cip.InitiateAuthOutput{AuthenticationResult: &types.AuthenticationResultType{
		AccessToken: aws.String("a"), IdToken: aws.String("i"), RefreshToken: aws.String("r"), ExpiresIn: 3600, TokenType: aws.String("Bearer")}}}
	a := cognito.New(f, "client", "s3cret")
	res, err := a.Login(context.Background(), authn.Login{Username: "u@example.com", Password: "p"})
	if err != nil || res.Fields["authenticationResult"].(map[string]any)["accessToken"] != "a" {
		t.Fatalf("%+v %v", res, err)
	}
	if f.inAuth.AuthFlow != types.AuthFlowTypeUserPasswordAuth || f.inAuth.AuthParameters["USERNAME"] != "u@example.com" {
		t.Errorf("input %+v", f.inAuth)
	}
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte("u@example.comclient"))
	if got, want := f.inAuth.AuthParameters["SECRET_HASH"], base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("SECRET_HASH %q, want %q", got, want)
	}
	f.auth = &cip.InitiateAuthOutput{ChallengeName: types.ChallengeNameTypeSoftwareTokenMfa, Session: aws.String("sess")}
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
			err = &smithy.GenericAPIError{Code: code}
		}
		f := &fake{err: err}
		got := cognito.New(f, "client", "").SignUp(context.Background(), authn.SignUp{Email: "u@example.com", Password: "p", Attributes: map[string]string{"name": "U"}})
		if (want == nil && got != nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("%q: %v, want %v", code, got, want)
		}
		if len(f.inUp.UserAttributes) != 2 {
			t.Errorf("attributes %+v", f.inUp.UserAttributes)
		}
	}
}

// The addresses a step-up code may go to are the ID token's verified ones
// (docs/contract.md §6): an unverified email is no address.
func TestVerifiedAddressesComeFromTheIDToken(t *testing.T) {
	idToken := func(claims string) *string {
		return aws.String("eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig")
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
		f := &fake{auth: &cip.InitiateAuthOutput{AuthenticationResult: &types.AuthenticationResultType{
			AccessToken: aws.String("a"), IdToken: idToken(c.claims), ExpiresIn: 3600, TokenType: aws.String("Bearer")}}}
		res, err := cognito.New(f, "client", "").Login(context.Background(), authn.Login{Username: "u", Password: "p"})
		if err != nil || res.VerifiedEmail != c.email || res.VerifiedPhone != c.phone {
			t.Errorf("%s: %q %q %v, want %q %q", c.claims, res.VerifiedEmail, res.VerifiedPhone, err, c.email, c.phone)
		}
	}
}
