package console

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
)

func TestDiffMarksEachLine(t *testing.T) {
	got := Diff("a\nb\nc", "a\nx\nc\nd")
	want := []string{"  a", "- b", "+ x", "  c", "+ d"}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff: %q, want %q", got, want)
	}
}

func TestStatsCountPerMinuteAndDay(t *testing.T) {
	s := NewStats()
	now := time.Date(2026, 11, 23, 12, 0, 30, 0, time.UTC)
	out := func(r guard.Result) string {
		if r.Allowed {
			return "allowed"
		}
		return "denied"
	}
	d := guard.Decision{Rules: []guard.Result{{Rule: "r", Allowed: true}, {Rule: "q", Allowed: false}}}
	s.Record(d, out, now.Add(-2*time.Hour)) // in the day, not the hour
	s.Record(d, out, now.Add(-time.Minute))
	s.Record(d, out, now)
	s.Record(d, out, now.Add(-25*time.Hour)) // forgotten
	snap := s.Snapshot([]guard.Rule{{Name: "r"}, {Name: "q"}}, now)
	r, q := snap[0], snap[1]
	if r.Hour.Allowed != 2 || r.Day.Allowed != 3 || r.Minutes[59].Allowed != 1 || r.Minutes[58].Allowed != 1 || q.Hour.Denied != 2 {
		t.Fatalf("stats: %+v %+v", r, q)
	}
}

// A document is applied only when it validates; each applied one is kept
// and can be read back; the start-up document is the first version.
func TestConfigFileAppliesOnlyValidDocumentsAndKeepsThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.yaml")
	first := "rules:\n  - {name: a, action: login, key: [account], limit: 3, window: 1h}\n"
	if err := os.WriteFile(path, []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	var reloaded []string
	f := NewConfigFile(path, first, func(c guard.Config) error { reloaded = append(reloaded, c.Rules[0].Name); return nil })
	if err := f.Apply("rules:\n  - {name: b, action: login, key: [nothing], limit: 3, window: 1h}\n"); err == nil ||
		!strings.Contains(strings.Join(Problems(err), "|"), "rules[0] (b).key[0]") {
		t.Fatalf("an invalid document: %v", err)
	}
	second := strings.Replace(first, "name: a", "name: c", 1)
	if err := f.Apply(second); err != nil {
		t.Fatal(err)
	}
	onDisk, _ := os.ReadFile(path)
	h, _ := f.History()
	v1, _ := f.Version(1)
	if string(onDisk) != second || f.Doc() != second || len(h) != 2 || v1 != first || !slices.Equal(reloaded, []string{"c"}) {
		t.Fatalf("after apply: file %q, history %v, v1 %q, reloads %v", onDisk, h, v1, reloaded)
	}
	// an edit of the file itself is reloaded by the watcher's Changed
	if changed, err := f.Changed(first); err != nil || !changed || f.Doc() != first {
		t.Fatalf("Changed: %v %v", changed, err)
	}
}

func TestStatsKeepTheSubjectsNearTheLimit(t *testing.T) {
	s := NewStats()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	near := guard.Decision{Allowed: true, Rules: []guard.Result{{Rule: "r", Allowed: true, Limit: 10, Remaining: 2}}}
	far := guard.Decision{Allowed: true, Rules: []guard.Result{{Rule: "r", Allowed: true, Limit: 10, Remaining: 8}}}
	denied := guard.Decision{Rules: []guard.Result{{Rule: "r", Allowed: false, Limit: 10}}}
	s.Subject("aaa", near, now)
	s.Subject("bbb", far, now)
	s.Subject("ccc", denied, now)
	s.Subject("old", near, now.Add(-2*time.Hour))
	for i := range 20 {
		s.Subject(fmt.Sprintf("x%02d", i), near, now.Add(-time.Duration(i)*time.Second))
	}
	got := s.Snapshot([]guard.Rule{{Name: "r"}}, now)[0].Near
	if len(got) != nearPerRule || got[0].Subject != "ccc" || !got[0].Denied {
		t.Fatalf("near: %+v", got)
	}
	for _, n := range got {
		if n.Subject == "bbb" || n.Subject == "old" {
			t.Errorf("%s is not near the limit in the last hour", n.Subject)
		}
	}
	s.Subject("ccc", far, now) // back above the limit: forgotten
	for _, n := range s.Snapshot([]guard.Rule{{Name: "r"}}, now)[0].Near {
		if n.Subject == "ccc" {
			t.Error("a subject back above the limit is still near it")
		}
	}
}
