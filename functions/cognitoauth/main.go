// Command cognitoauth is a Cognito user pool's pre sign-up, pre
// authentication, post authentication and post confirmation triggers: the
// signup and login rules, lockouts included, for apps that call the pool
// directly (docs/contract.md §10). A denial is an error whose text Cognito
// shows the user. All of its set-up is internal/lambdaapp's.
package main

import (
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/triggers"
)

func main() { lambdaapp.Main(lambdaapp.Cognitoauth, lambdaapp.Parts{Trigger: triggers.Build}) }
