// Command jwks is the Lambda function behind GET /.well-known/jwks.json: the token keys, current and previous.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import "github.com/otpguard/otpguard/internal/lambdaapp"

func main() { lambdaapp.Main(lambdaapp.Jwks, lambdaapp.Parts{}) }
