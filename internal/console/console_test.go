package console

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

func TestDiffMarksEachLine(t *testing.T) {
	got := Diff("a\nb\nc", "a\nx\nc\nd")
	want := []string{"  a", "- b", "+ x", "  c", "+ d"}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff: %q, want %q", got, want)
	}
}

// Diff's work is linear in the documents whatever they are: the lines
// both share at the start and the end are set aside, and a changed
// middle too large for the common-subsequence table is shown whole. On
// a million lines against a million others (the console took
// 777 MB on 1M newlines; this needs a table of 10^12 cells) it allocates
// a few times the documents' size.
func TestDiffIsBounded(t *testing.T) {
	var before, after runtime.MemStats
	a, b := strings.Repeat("a\n", 1_000_000), strings.Repeat("b\n", 1_000_000)
	runtime.ReadMemStats(&before)
	got := Diff(a, b)
	runtime.ReadMemStats(&after)
	if len(got) != 2_000_001 || got[0] != "- a" || got[999_999] != "- a" || got[1_000_000] != "+ b" || got[1_999_999] != "+ b" || got[2_000_000] != "  " {
		t.Fatalf("the diff of 1M lines against 1M others: %d lines, %q … %q", len(got), got[0], got[len(got)-1])
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 200<<20 {
		t.Errorf("the diff allocated %d MB", alloc>>20)
	}
	// one line changed in a long document: exactly that line
	doc := strings.Repeat("x\n", 100_000)
	edited := doc[:100_000] + "y\n" + doc[100_002:]
	var changed []string
	for _, l := range Diff(doc, edited) {
		if l[0] != ' ' {
			changed = append(changed, l)
		}
	}
	if !slices.Equal(changed, []string{"- x", "+ y"}) {
		t.Fatalf("one line changed: %q", changed)
	}
	// a middle over the table's bound: removed, then added
	var x, y []string
	for i := range 1100 {
		x, y = append(x, fmt.Sprint("x", i)), append(y, fmt.Sprint("y", i))
	}
	runtime.ReadMemStats(&before)
	d := Diff("h\n"+strings.Join(x, "\n")+"\nt", "h\n"+strings.Join(y, "\n")+"\nt")
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("a middle over the bound: the diff allocated %d KB (a table?)", alloc>>10)
	}
	if len(d) != 2202 || d[0] != "  h" || d[1] != "- x0" || d[1101] != "+ y0" || d[2201] != "  t" {
		t.Fatalf("a middle over the bound: %d lines %q %q %q", len(d), d[0], d[1], d[1101])
	}
}

// BenchmarkDiff: a document of a million newlines against the default
// one (go test -bench Diff ./internal/console/).
func BenchmarkDiff(b *testing.B) {
	a, def := strings.Repeat("\n", 1_000_000), string(config.DefaultYAML())
	for b.Loop() {
		Diff(def, a)
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
	f := NewConfigFile(path, first, func(c config.Config) error { reloaded = append(reloaded, c.Rules[0].Name); return nil })
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
