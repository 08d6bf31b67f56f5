// Command jwks is the Lambda function behind GET /.well-known/jwks.json.
// It serves the shared otpguard API behind API Gateway (payload 2.0).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/otpguard/otpguard/guard/apigw"
	"github.com/otpguard/otpguard/guard/lambdaapp"
)

func main() {
	cfg, err := lambdaapp.FromEnv(os.Getenv, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Built once per container: warm invocations reuse the Redis and AWS
	// clients and their connections.
	app, err := lambdaapp.Init(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	h, err := app.Handler(nil) // this function sends nothing
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	lambda.Start(apigw.Handler(h))
}
