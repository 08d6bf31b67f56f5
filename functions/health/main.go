// Command health is the Lambda function behind GET /healthz.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import "github.com/otpguard/otpguard/internal/lambdaapp"

func main() { lambdaapp.Main(lambdaapp.Health, lambdaapp.Parts{}) }
