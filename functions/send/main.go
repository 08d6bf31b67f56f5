// Command send is the Lambda function behind POST /v1/otp/send. It alone
// may send: email with SES, SMS with SNS, each paced to its quota.
// It serves the shared otpguard API behind API Gateway (payload 2.0).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/apigw"
	"github.com/otpguard/otpguard/guard/lambdaapp"
	"github.com/otpguard/otpguard/guard/ses"
	"github.com/otpguard/otpguard/guard/sns"
)

func main() {
	if err := initialize(); err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
}

func initialize() error {
	env, err := lambdaapp.FromEnv(os.Getenv, lambdaapp.Email|lambdaapp.SMS)
	if err != nil {
		return err
	}
	// Built once per container: warm invocations reuse the Redis and AWS
	// clients and their connections.
	app, err := lambdaapp.Init(context.Background(), env)
	if err != nil {
		return err
	}
	email, err := ses.New(sesv2.NewFromConfig(app.AWS), env.SESFrom, env.SESConfigSet)
	if err != nil {
		return err
	}
	sms := sns.New(awssns.NewFromConfig(app.AWS), sns.Options{SenderID: env.SMSSenderID, OriginationNumber: env.SMSOrigination, MaxPrice: env.SMSMaxPrice})
	senders := api.ByChannel{}
	if senders[guard.Email], err = app.Paced(email, "ses", env.EmailPerSecond); err != nil {
		return err
	}
	if senders[guard.SMS], err = app.Paced(sms, "sms", env.SMSPerSecond); err != nil {
		return err
	}
	h, err := app.Handler(senders)
	if err != nil {
		return err
	}
	lambda.Start(apigw.Handler(h))
	return nil
}
