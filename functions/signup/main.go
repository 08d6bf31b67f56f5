// Command signup is the Lambda function behind POST /v1/signup, in front of the authenticator.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/authenv"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

func main() { lambdaapp.Main(lambdaapp.Signup, lambdaapp.Parts{Auth: authenv.Authenticator}) }
