// Command deliver is the delivery queue's consumer (DeliveryMode queue):
// SQS hands it the messages the send, login and Cognito sender functions
// queued, and it sends them with SES and SNS at the providers' pace,
// reporting each message it could not send yet as a batch item failure.
// All of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

func main() {
	lambdaapp.Main(lambdaapp.Deliver, lambdaapp.Parts{Senders: delivery.Senders, Trigger: delivery.Consumer})
}
