package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/emf"
)

// TestTheDashboardNamesTheMetricsTheCodeWrites: the dashboard's body is
// JSON once substituted, every otpguard metric a widget names is one the
// code writes (guard/emf), and every one the code writes has a widget;
// the Lambda and API widgets are scoped to the stack.
func TestTheDashboardNamesTheMetricsTheCodeWrites(t *testing.T) {
	s := newStack(t)
	res := s.tmpl["Resources"].(map[string]any)["Dashboard"].(map[string]any)
	// a string, or a string and its variables (the delivery queue's names)
	var sub string
	switch b := res["Properties"].(map[string]any)["DashboardBody"].(map[string]any)["Fn::Sub"].(type) {
	case string:
		sub = b
	case []any:
		sub, _ = b[0].(string)
	}
	if sub == "" {
		t.Fatalf("DashboardBody is not a Fn::Sub string: %v", res)
	}
	body := regexp.MustCompile(`\$\{[A-Za-z:.]+\}`).ReplaceAllString(sub, "x")
	var d struct {
		Widgets []struct {
			Type       string
			Properties struct {
				Title   string
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("the dashboard body is not JSON: %v", err)
	}
	named := map[string]bool{}
	search := regexp.MustCompile(`\{otpguard[^}]*\}[^']*MetricName="(\w+)"`)
	for _, w := range d.Widgets {
		if w.Type != "metric" {
			continue
		}
		if len(w.Properties.Metrics) == 0 {
			t.Errorf("widget %q has no metric", w.Properties.Title)
		}
		for _, m := range w.Properties.Metrics {
			for _, part := range m {
				obj, _ := part.(map[string]any)
				e, _ := obj["expression"].(string)
				for _, x := range search.FindAllStringSubmatch(e, -1) {
					named[x[1]] = true
					if !slices.Contains(emf.Metrics, x[1]) {
						t.Errorf("widget %q names otpguard metric %s, which the code never writes", w.Properties.Title, x[1])
					}
				}
				if strings.Contains(e, "{otpguard") && !strings.Contains(e, `Stack="x"`) {
					t.Errorf("widget %q: %s is not scoped to the stack", w.Properties.Title, e)
				}
				if strings.Contains(e, "AWS/Lambda") && !strings.HasSuffix(strings.Split(e, "'")[1], " x") {
					t.Errorf("widget %q: %s is not scoped to the stack's functions", w.Properties.Title, e)
				}
			}
		}
	}
	for _, m := range emf.Metrics {
		if !named[m] {
			t.Errorf("the code writes %s; no widget shows it", m)
		}
	}
	for _, m := range []string{"4xx", "5xx"} {
		if !regexp.MustCompile(`"AWS/ApiGateway",\s*"` + m + `",\s*"ApiId",\s*"\$\{Api\}"`).MatchString(sub) {
			t.Errorf("no API %s widget on the stack's API", m)
		}
	}
}
