// Command cognitosend is a Cognito user pool's custom SMS sender and
// custom email sender (V1_0): it decrypts the code with the stack's KMS
// key, applies the otp.send rules and delivers through SES and SNS as the
// send function does (docs/contract.md §10). A denial sends nothing and
// returns normally. All of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/triggers"
)

func main() {
	lambdaapp.Main(lambdaapp.Cognitosend, lambdaapp.Parts{Senders: delivery.Senders, Trigger: triggers.Build})
}
