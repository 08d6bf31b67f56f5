// Command login is the Lambda function behind POST /v1/login, in front of
// the authenticator (Cognito or the app's own endpoint), and POST
// /v1/login/challenge: it sends the step-up codes of challenged logins.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/authenv"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

func main() {
	lambdaapp.Main(lambdaapp.Login, lambdaapp.Parts{Auth: authenv.Authenticator, Senders: delivery.Senders})
}
