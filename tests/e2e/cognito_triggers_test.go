package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	cip "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"

	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/internal/triggers"
)

const (
	triggerKeyARN   = "arn:aws:kms:us-east-1:123456789012:key/0b1e6c3e-5a1f-4c0e-9d7a-8a1d2f3e4b5c"
	triggerKeyAlias = "arn:aws:kms:us-east-1:123456789012:alias/otpguard-cognito"
)

// lambdaEndpoint is the Lambda Invoke API (the part the SDKs call) in
// front of trigger handlers by function name; a handler's error is a
// function error, as Lambda answers it.
func lambdaEndpoint(t *testing.T, fns map[string]func(context.Context, json.RawMessage) (json.RawMessage, error)) string {
	path := regexp.MustCompile(`^/2015-03-31/functions/([^/]+)/invocations$`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := path.FindStringSubmatch(r.URL.Path)
		if m == nil || fns[m[1]] == nil {
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"Type":"User","message":"Function not found"}`)
			return
		}
		event, _ := io.ReadAll(r.Body)
		out, err := fns[m[1]](r.Context(), event)
		if err != nil {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
			b, _ := json.Marshal(map[string]string{"errorMessage": err.Error(), "errorType": "errorString"})
			_, _ = w.Write(b)
			return
		}
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCognitoLocalCallsTheTriggers: sign-up and sign-in through the real
// SDK against cognito-local, which invokes otpguard's triggers (the ones
// it supports: PreSignUp, CustomEmailSender with the code encrypted by
// the Encryption SDK through KMS, PostConfirmation, PostAuthentication).
// The code reaches the user through otpguard's sender and confirms the
// account; resends past the limit send nothing and Cognito reports no
// error; the sign-up past its limit is refused with otpguard's text;
// PostAuthentication answers sign-ins.
func TestCognitoLocalCallsTheTriggers(t *testing.T) {
	b := backends()[0]
	aws_ := awsfake.New()
	defer aws_.Close()
	aws_.SetSecret("otpguard/hash", strings.Repeat("h", 48))
	aws_.SetParameter("/otpguard/config", `otp: {ttl: 5m}
store: {timeout: 10s}
rules:
  - {name: email-per-destination, action: otp.send, key: [destination], limit: 3, window: 1h}
  - {name: unverified-per-destination, action: otp.send, key: [destination], limit: 20, window: 24h, count: failures}
  - {name: signups, action: signup, key: [global], limit: 2, window: 1h}
  - {name: login-per-account, action: login, key: [account], limit: 3, window: 1h, count: failures}
`)
	aws_.AddKMSKey(triggerKeyARN)
	aws_.AddKMSKey(triggerKeyAlias)
	env := map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret",
		"AWS_ENDPOINT_URL": aws_.URL, "REDIS_URL": b.redisURL, "GUARD_CONFIG_PARAM": "/otpguard/config",
		"GUARD_HASH_SECRET_ID": "otpguard/hash", "SES_FROM": "no-reply@otpguard.example", "COGNITO_KMS_KEY_ARN": triggerKeyARN,
	}
	getenv := func(k string) string { return env[k] }
	logs := &testutil.Buffer{}
	fns := map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){}
	for name, fn := range map[string]lambdaapp.Function{"otpguard-cognitosend": lambdaapp.Cognitosend, "otpguard-cognitoauth": lambdaapp.Cognitoauth} {
		fns[name] = lambdaapp.TriggerHandler(lambdaapp.Start(context.Background(), fn,
			lambdaapp.Parts{Senders: delivery.Senders, Trigger: triggers.Build}, getenv, &testutil.Buffer{}, logs))
	}
	lambdaURL := lambdaEndpoint(t, fns)
	creds := map[string]string{"accessKeyId": "local", "secretAccessKey": "local"}
	_, c := cognitoLocalWith(t, map[string]any{
		"TriggerFunctions": map[string]string{
			"CustomEmailSender": "otpguard-cognitosend", "PreSignUp": "otpguard-cognitoauth",
			"PostConfirmation": "otpguard-cognitoauth", "PostAuthentication": "otpguard-cognitoauth",
		},
		"LambdaClient": map[string]any{"endpoint": lambdaURL, "region": "us-east-1", "credentials": creds},
		"KMSConfig": map[string]any{"endpoint": aws_.URL, "region": "us-east-1", "credentials": creds,
			"KMSKeyId": triggerKeyARN, "KMSKeyAlias": triggerKeyAlias},
	})
	ctx := context.Background()
	pool, err := c.CreateUserPool(ctx, &cip.CreateUserPoolInput{PoolName: aws.String("otpguard-triggers"),
		UsernameAttributes: []types.UsernameAttributeType{types.UsernameAttributeTypeEmail}, AutoVerifiedAttributes: []types.VerifiedAttributeType{types.VerifiedAttributeTypeEmail}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.CreateUserPoolClient(ctx, &cip.CreateUserPoolClientInput{UserPoolId: pool.UserPool.Id, ClientName: aws.String("app"),
		ExplicitAuthFlows: []types.ExplicitAuthFlowsType{types.ExplicitAuthFlowsTypeAllowUserPasswordAuth}})
	if err != nil {
		t.Fatal(err)
	}
	clientID := client.UserPoolClient.ClientId
	signUp := func(email string) error {
		_, err := c.SignUp(ctx, &cip.SignUpInput{ClientId: clientID, Username: aws.String(email), Password: aws.String("correct horse battery staple"),
			UserAttributes: []types.AttributeType{{Name: aws.String("email"), Value: aws.String(email)}}})
		return err
	}
	if err := signUp("ann@example.com"); err != nil {
		t.Fatalf("sign-up: %v\n%s", err, logs.String())
	}
	mails := aws_.Emails()
	if len(mails) != 1 || mails[0].To[0] != "ann@example.com" {
		t.Fatalf("the sign-up code was not sent through otpguard: %+v\n%s", mails, logs.String())
	}
	code := regexp.MustCompile(`\b\d{6}\b`).FindString(mails[0].Text)
	receipts := func() int {
		n := 0
		for _, k := range b.client().Keys(ctx, "og:*").Val() {
			if strings.HasSuffix(k, "}:cr") {
				n++
			}
		}
		return n
	}
	kept := receipts()
	if kept == 0 {
		t.Fatal("the sign-up message's receipt was not kept")
	}
	if _, err := c.ConfirmSignUp(ctx, &cip.ConfirmSignUpInput{ClientId: clientID, Username: aws.String("ann@example.com"), ConfirmationCode: aws.String(code)}); err != nil {
		t.Fatalf("confirm with the code otpguard delivered: %v", err)
	}
	if receipts() != kept-1 {
		t.Error("PostConfirmation did not settle the sign-up message's receipt")
	}
	// password resets: two more messages within email-per-destination,
	// then nothing sent and no error
	for i := range 3 {
		if _, err := c.ForgotPassword(ctx, &cip.ForgotPasswordInput{ClientId: clientID, Username: aws.String("ann@example.com")}); err != nil {
			t.Fatalf("forgot password %d: %v", i, err)
		}
	}
	if n := len(aws_.Emails()); n != 3 {
		t.Fatalf("%d emails after a sign-up and 3 resets, want 3 (email-per-destination)", n)
	}
	if !strings.Contains(logs.String(), `"deniedBy":"email-per-destination"`) {
		t.Errorf("the held reset message is not in the decision records:\n%s", logs.String())
	}
	// the global sign-up budget: ann was the first, bob the second,
	// carol is refused with otpguard's words
	if err := signUp("bob@example.com"); err != nil {
		t.Fatalf("second sign-up: %v", err)
	}
	err = signUp("carol@example.com")
	var lambdaErr *types.UserLambdaValidationException
	if !errors.As(err, &lambdaErr) || !strings.Contains(err.Error(), "Too many attempts. Try again in") {
		t.Fatalf("the third sign-up: %v", err)
	}
	// sign-ins: PostAuthentication answers each (cognito-local has no
	// PreAuthentication; the pair is tested under the Runtime API)
	for i := range 6 {
		if _, err := c.InitiateAuth(ctx, &cip.InitiateAuthInput{ClientId: clientID, AuthFlow: types.AuthFlowTypeUserPasswordAuth,
			AuthParameters: map[string]string{"USERNAME": "ann@example.com", "PASSWORD": "correct horse battery staple"}}); err != nil {
			t.Fatalf("sign-in %d: %v", i, err)
		}
	}
	if strings.Contains(logs.String(), "ann@example.com") || strings.Contains(logs.String(), code) {
		t.Error("an address or a code is in the functions' logs")
	}
}
