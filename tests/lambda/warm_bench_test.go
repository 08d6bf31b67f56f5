package lambda

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkWarm runs the send, verify and login bootstraps warm under the
// Runtime API (b.N invocations each, at least 200: make bench runs
// -benchtime=200x) and reports what Lambda bills of a warm invocation:
// the time from the event handed to the function to its answer, p50 and
// p99, rounded up to the millisecond as Lambda bills. Every invocation is
// its event of events/ from a new client address and for a new address or
// user, so the rules allow it and it does its whole work: a send stored
// and mailed (SES, a local endpoint), a verify of a wrong code, a login
// the authenticator (Cognito, a local endpoint) refuses. Sends are not
// paced here (EMAIL_PER_SECOND far above the rate): under the stack's
// default of 1 a second (SES's sandbox), back-to-back sends each wait up
// to a second for their turn, and that wait is billed too. The machine's
// cores are not Lambda's: compare the functions with one another, and
// with your own stack's Duration metric.
func BenchmarkWarm(b *testing.B) {
	st := newBenchStack(b, "otp: {ttl: 5m}\nnetwork: {trustedProxies: [0.0.0.0/0]}\n")
	bin := b.TempDir()
	for _, fn := range []string{"send", "verify", "login"} {
		b.Run(fn, func(b *testing.B) {
			raw, err := os.ReadFile(filepath.Join(root, "events", fn+".json"))
			if err != nil {
				b.Fatal(err)
			}
			exe := buildBootstrap(b, bin, fn)
			api := newRuntimeAPI()
			defer api.Close()
			cmd := exec.Command(exe)
			cmd.Stderr = io.Discard
			cmd.Env = st.env(api, "EMAIL_PER_SECOND=100000")
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			var took []time.Duration
			statuses := map[int]int{}
			b.ResetTimer()
			for i := range b.N {
				ev := warmEvent(b, raw, fn, i)
				began := time.Now()
				res := api.invokeRaw(b, fmt.Sprintf("warm-%d", i), ev)
				took = append(took, time.Since(began))
				var resp struct{ StatusCode int }
				if res.isErr || json.Unmarshal(res.body, &resp) != nil {
					b.Fatalf("invocation %d: %s", i, res.body)
				}
				statuses[resp.StatusCode]++
			}
			b.StopTimer()
			slices.Sort(took)
			billed := func(d time.Duration) float64 { return float64((d + time.Millisecond - 1) / time.Millisecond) }
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(billed(took[len(took)/2]), "p50-billed-ms")
			b.ReportMetric(billed(took[len(took)*99/100]), "p99-billed-ms")
			b.Logf("%s: answers %v", fn, statuses)
		})
	}
}

// warmEvent is the sample event raw of fn from client address i, for
// address (or user) i.
func warmEvent(b *testing.B, raw []byte, fn string, i int) []byte {
	b.Helper()
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		b.Fatal(err)
	}
	ip := fmt.Sprintf("10.%d.%d.%d", 1+i>>16&255, i>>8&255, i&255)
	who := fmt.Sprintf("warm%d@example.com", i)
	switch fn {
	case "send":
		ev["body"] = fmt.Sprintf(`{"channel":"email","to":%q,"purpose":"login"}`, who)
	case "verify":
		ev["body"] = fmt.Sprintf(`{"to":%q,"purpose":"login","code":"123456"}`, who)
	case "login":
		ev["body"] = fmt.Sprintf(`{"username":%q,"password":"correct horse battery staple"}`, who)
	}
	ev["headers"].(map[string]any)["x-forwarded-for"] = ip
	ev["requestContext"].(map[string]any)["http"].(map[string]any)["sourceIp"] = ip
	out, _ := json.Marshal(ev)
	return out
}
