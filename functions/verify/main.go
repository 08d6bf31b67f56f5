// Command verify is the Lambda function behind POST /v1/otp/verify.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import "github.com/otpguard/otpguard/internal/lambdaapp"

func main() { lambdaapp.Main(lambdaapp.Verify, lambdaapp.Parts{}) }
