// Command backend is the Lambda function behind the internal routes for the app's backend (POST /v1/decisions, POST /v1/outcomes, GET and DELETE /v1/blocks/{dimension}/{value}), behind the IAM authorizer.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import "github.com/otpguard/otpguard/internal/lambdaapp"

func main() { lambdaapp.Main(lambdaapp.Backend, lambdaapp.Parts{}) }
