// Command send is the Lambda function behind POST /v1/otp/send. It alone may send: email with SES, SMS with SNS, each paced to its quota.
// It serves the shared otpguard API behind API Gateway (payload 2.0); all
// of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

func main() { lambdaapp.Main(lambdaapp.Send, lambdaapp.Parts{Senders: delivery.Senders}) }
