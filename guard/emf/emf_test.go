package emf_test

import (
	"context"
	"os"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/emf"
)

func Example() {
	o := emf.New(os.Stdout, func() time.Time { return time.UnixMilli(1795249217000) })
	o.Observe(context.Background(), "otp.send", "rate_limited", guard.Decision{Rules: []guard.Result{
		{Rule: "otp-send-per-destination", Mode: "enforce", Allowed: false},
		{Rule: "otp-send-per-ip", Mode: "shadow", Allowed: false},
	}})
	// Output:
	// {"Action":"otp.send","Outcome":"rate_limited","Requests":1,"_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Action","Outcome"]],"Metrics":[{"Name":"Requests","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Decisions":1,"Outcome":"denied","Rule":"otp-send-per-destination","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Action","Rule","Outcome"]],"Metrics":[{"Name":"Decisions","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Decisions":1,"Outcome":"shadow_denied","Rule":"otp-send-per-ip","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Action","Rule","Outcome"]],"Metrics":[{"Name":"Decisions","Unit":"Count"}]}]}}
}
