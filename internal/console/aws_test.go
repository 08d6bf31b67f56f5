package console

import (
	"context"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

// TestAStackWithoutItsParameterRunsTheDefaults: a fresh stack has no
// config parameter yet; its functions run the defaults (the rules on asn
// only with a database), and so do the console's Rules page and Config
// page.
func TestAStackWithoutItsParameterRunsTheDefaults(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	a := &AWS{AWSConfig: awsfake.Config(fake.URL), Stack: "shop", Parameter: "/shop/otpguard/config", Getenv: func(string) string { return "" }}
	stats, err := a.Stats(context.Background())
	if err != nil || len(stats) != len(config.Default().Rules) {
		t.Fatalf("the Rules page of a fresh stack: %d rules, %v; want the %d default rules", len(stats), err, len(config.Default().Rules))
	}
	if d, err := a.Config(context.Background()); err != nil || d.Document != string(config.DefaultYAML()) {
		t.Errorf("the Config page of a fresh stack: %v", err)
	}
}

// TestServiceEndpointsFromTheEnvironment: AWS_ENDPOINT_URL_SSM and
// AWS_ENDPOINT_URL_CLOUDWATCH send each service's calls where they say,
// as the SDK's clients do.
func TestServiceEndpointsFromTheEnvironment(t *testing.T) {
	ssm, cw := awsfake.New(), awsfake.New()
	defer ssm.Close()
	defer cw.Close()
	ssm.SetParameter("/shop/otpguard/config", "rules:\n  - {name: r, action: login, key: [account], limit: 5, window: 1h}\n")
	env := map[string]string{"AWS_ENDPOINT_URL_SSM": ssm.URL, "AWS_ENDPOINT_URL_CLOUDWATCH": cw.URL}
	a := &AWS{AWSConfig: awsfake.Config("http://127.0.0.1:1"), Stack: "shop", Parameter: "/shop/otpguard/config", Getenv: func(k string) string { return env[k] }}
	if stats, err := a.Stats(context.Background()); err != nil || len(stats) != 1 {
		t.Fatalf("stats: %+v %v", stats, err)
	}
	if ssm.CallsOf("ssm:GetParameter") == 0 || cw.CallsOf("cloudwatch:GetMetricData") == 0 || ssm.CallsOf("cloudwatch:GetMetricData") != 0 {
		t.Errorf("calls: ssm's endpoint %v, cloudwatch's %v", ssm.Calls(), cw.Calls())
	}
}
