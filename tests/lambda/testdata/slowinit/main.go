// Command slowinit is a Lambda bootstrap whose init takes SLOW_INIT (a
// Go duration) before it asks for its first invocation, and which answers
// each event with it: TestTheEmulatorsFirstDurationHoldsTheInit builds it.
package main

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	d, err := time.ParseDuration(os.Getenv("SLOW_INIT"))
	if err != nil {
		panic(err)
	}
	time.Sleep(d)
	lambda.Start(func(_ context.Context, ev json.RawMessage) (json.RawMessage, error) { return ev, nil })
}
