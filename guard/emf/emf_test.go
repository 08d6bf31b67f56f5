package emf_test

import (
	"context"
	"os"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/emf"
)

func Example() {
	o := emf.New(os.Stdout, func() time.Time { return time.UnixMilli(1795249217000) }, "prod-otpguard")
	o.Observe(context.Background(), "otp.send", "rate_limited", guard.Decision{Rules: []guard.Result{
		{Rule: "otp-send-per-destination", Mode: "enforce", Allowed: false},
		{Rule: "otp-send-per-ip", Mode: "shadow", Allowed: false},
		{Rule: "sms-global", Mode: "enforce", Allowed: true, Skipped: true},
	}})
	o.Count(context.Background(), "ConfigRejected")
	o.Sent(context.Background(), "sms", "LV")
	o.Latency(context.Background(), "otp.send", 12500*time.Microsecond)
	// Output:
	// {"Action":"otp.send","Outcome":"rate_limited","Requests":1,"Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Action","Outcome"]],"Metrics":[{"Name":"Requests","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Decisions":1,"Outcome":"denied","Rule":"otp-send-per-destination","Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Action","Rule","Outcome"]],"Metrics":[{"Name":"Decisions","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Decisions":1,"Outcome":"shadow_denied","Rule":"otp-send-per-ip","Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Action","Rule","Outcome"]],"Metrics":[{"Name":"Decisions","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Decisions":1,"Outcome":"skipped","Rule":"sms-global","Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Action","Rule","Outcome"]],"Metrics":[{"Name":"Decisions","Unit":"Count"}]}]}}
	// {"ConfigRejected":1,"Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack"]],"Metrics":[{"Name":"ConfigRejected","Unit":"Count"}]}]}}
	// {"Channel":"sms","Country":"LV","Sent":1,"Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Channel","Country"]],"Metrics":[{"Name":"Sent","Unit":"Count"}]}]}}
	// {"Action":"otp.send","Latency":12.5,"Stack":"prod-otpguard","_aws":{"Timestamp":1795249217000,"CloudWatchMetrics":[{"Namespace":"otpguard","Dimensions":[["Stack","Action"]],"Metrics":[{"Name":"Latency","Unit":"Milliseconds"}]}]}}
}
