package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	cip "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// cognitoLocal starts cognito-local (installed by make cognito-local) on
// a free port, with its data in a temporary folder; it returns its
// endpoint and an SDK client on it.
func cognitoLocal(t *testing.T) (string, *cip.Client) {
	return cognitoLocalWith(t, nil)
}

// cognitoLocalWith is cognitoLocal with a config document
// (.cognito/config.json: TriggerFunctions, LambdaClient, KMSConfig).
func cognitoLocalWith(t *testing.T, config map[string]any) (string, *cip.Client) {
	t.Helper()
	bin, err := filepath.Abs("cognito/node_modules/.bin/cognito-local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		// Install it as make cognito-local does (npm, pinned by the lock
		// file); without npm the test fails, it never skips.
		install := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		install.Dir = "cognito"
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("cognito-local is not installed and npm ci failed (apt-get install npm): %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	if config != nil {
		b, _ := json.Marshal(config)
		if err := os.MkdirAll(filepath.Join(dir, ".cognito"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".cognito", "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testutil.Buffer{}
	p, ports, err := testutil.StartOnFreePorts(1, 30*time.Second, func(ports []int) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", ports[0]), "HOST=127.0.0.1")
		cmd.Stdout, cmd.Stderr = logs, logs
		return cmd
	})
	if err != nil {
		t.Fatalf("cognito-local did not start: %v\n%s", err, logs.String())
	}
	t.Cleanup(p.Stop)
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cognito-local did not start:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := cip.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})
	return url, c
}

// TestLoginAndSignupFrontingCognito: AUTH=cognito with the real SDK
// client against cognito-local: signup, the answers Cognito gives for an
// existing user, an unconfirmed user, a wrong password, an unknown user,
// and a successful login relaying Cognito's tokens.
func TestLoginAndSignupFrontingCognito(t *testing.T) {
	url, c := cognitoLocal(t)
	ctx := context.Background()
	pool, err := c.CreateUserPool(ctx, &cip.CreateUserPoolInput{PoolName: aws.String("otpguard-e2e"),
		UsernameAttributes: []types.UsernameAttributeType{types.UsernameAttributeTypeEmail}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.CreateUserPoolClient(ctx, &cip.CreateUserPoolClientInput{UserPoolId: pool.UserPool.Id, ClientName: aws.String("otpguard"),
		ExplicitAuthFlows: []types.ExplicitAuthFlowsType{types.ExplicitAuthFlowsTypeAllowUserPasswordAuth}})
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, backends()[0].redisURL, behindProxy, "AUTH=cognito",
		"COGNITO_USER_POOL_ID="+aws.ToString(pool.UserPool.Id), "COGNITO_CLIENT_ID="+aws.ToString(client.UserPoolClient.ClientId),
		"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL_COGNITO_IDENTITY_PROVIDER="+url)

	first := s.signup(t, "carol@example.com", goodPassword, "198.51.100.1")
	if first.status != 202 {
		t.Fatalf("signup: %d %s", first.status, first.raw)
	}
	users, err := c.ListUsers(ctx, &cip.ListUsersInput{UserPoolId: pool.UserPool.Id})
	if err != nil || len(users.Users) != 1 {
		t.Fatalf("the pool holds %v (%v), want carol", users, err)
	}
	// UsernameExists: the same answer.
	if again := s.signup(t, "carol@example.com", goodPassword, "198.51.100.2"); again.status != first.status || again.raw != first.raw {
		t.Errorf("an existing user's signup is told apart: %d %s", again.status, again.raw)
	}
	// Unconfirmed, wrong password, unknown: one 401 body.
	unconfirmed := s.login(t, "carol@example.com", goodPassword, "203.0.113.1")
	wrong := s.login(t, "carol@example.com", "wrong password entirely", "203.0.113.2")
	unknown := s.login(t, "nobody@example.com", "wrong password entirely", "203.0.113.3")
	for name, r := range map[string]reply{"unconfirmed": unconfirmed, "unknown": unknown} {
		if r.status != 401 || r.raw != wrong.raw {
			t.Errorf("%s user: %d %s; a wrong password: %d %s", name, r.status, r.raw, wrong.status, wrong.raw)
		}
	}
	if wrong.status != 401 {
		t.Fatalf("wrong password: %d %s\n%s", wrong.status, wrong.raw, s.logs.String())
	}
	for _, u := range users.Users {
		if _, err := c.AdminConfirmSignUp(ctx, &cip.AdminConfirmSignUpInput{UserPoolId: pool.UserPool.Id, Username: u.Username}); err != nil {
			t.Fatal(err)
		}
	}
	ok := s.login(t, "carol@example.com", goodPassword, "203.0.113.4")
	res, _ := ok.body["authenticationResult"].(map[string]any)
	if ok.status != 200 || res["accessToken"] == nil || res["idToken"] == nil {
		t.Fatalf("login: %d %s", ok.status, ok.raw)
	}
	// A weak password never reaches Cognito.
	if r := s.signup(t, "dave@example.com", "password1", "198.51.100.3"); r.status != 400 {
		t.Errorf("a common password: %d %s", r.status, r.raw)
	}
}
