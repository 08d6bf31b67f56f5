package console

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// Stats counts each rule's decisions per minute by outcome, for a day:
// the local server's api.Observer (on AWS the console reads the EMF
// metrics from CloudWatch instead).
type Stats struct {
	mu      sync.Mutex
	minutes map[string]map[int64]*Counts // rule -> unix minute -> counts
	near    map[string]map[string]Near   // rule -> subject fingerprint -> its last state near the limit
}

// Near is a subject whose last decision left it near a rule's limit (a
// fifth or less remaining, or denied): its keyed fingerprint, as the
// decision log shows it (look it up there, or by value on the Subject
// page), never the value.
type Near struct {
	Subject   string    `json:"subject"`
	Remaining int64     `json:"remaining"`
	Denied    bool      `json:"denied"`
	At        time.Time `json:"at"`
}

// nearPerRule bounds the subjects kept per rule (the most recent).
const nearPerRule = 10

// Subject records the subject of decision d (its fingerprint) for each
// rule it left near its limit; a subject back above it is forgotten.
func (s *Stats) Subject(subject string, d guard.Decision, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range d.Rules {
		if r.Skipped || r.Limit <= 0 {
			continue
		}
		m := s.near[r.Rule]
		if m == nil {
			m = map[string]Near{}
			s.near[r.Rule] = m
		}
		if r.Allowed && r.Remaining*5 > r.Limit {
			delete(m, subject)
			continue
		}
		m[subject] = Near{Subject: subject, Remaining: r.Remaining, Denied: !r.Allowed, At: now.UTC()}
		for len(m) > nearPerRule {
			oldest := ""
			for k, v := range m {
				if oldest == "" || v.At.Before(m[oldest].At) {
					oldest = k
				}
			}
			delete(m, oldest)
		}
	}
}

// Counts are a rule's decisions in a period.
type Counts struct {
	Allowed, Denied, Challenged, ShadowDenied int
}

// NewStats is an empty Stats.
func NewStats() *Stats {
	return &Stats{minutes: map[string]map[int64]*Counts{}, near: map[string]map[string]Near{}}
}

// Record counts a decision's rules at now.
func (s *Stats) Record(d guard.Decision, outcome func(guard.Result) string, now time.Time) {
	m := now.Unix() / 60
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range d.Rules {
		byMin := s.minutes[r.Rule]
		if byMin == nil {
			byMin = map[int64]*Counts{}
			s.minutes[r.Rule] = byMin
		}
		c := byMin[m]
		if c == nil {
			c = &Counts{}
			byMin[m] = c
			for k := range byMin {
				if k < m-24*60 {
					delete(byMin, k)
				}
			}
		}
		switch outcome(r) {
		case "allowed", "leased":
			c.Allowed++
		case "denied", "denied_cached":
			c.Denied++
		case "challenged":
			c.Challenged++
		case "shadow_denied":
			c.ShadowDenied++
		}
	}
}

// RuleStats is one rule's counts: the last hour per minute, and totals
// for the hour and the day.
type RuleStats struct {
	Rule    string   `json:"rule"`
	Action  string   `json:"action"`
	Mode    string   `json:"mode"`
	Limit   int      `json:"limit"`
	Window  string   `json:"window"`
	Minutes []Counts `json:"minutes"` // 60, oldest first, the last is the current minute
	Hour    Counts   `json:"hour"`
	Day     Counts   `json:"day"`
	// Near are the subjects near the limit in the last hour, the nearest
	// first (locally; on AWS the decision logs have them).
	Near []Near `json:"near,omitempty"`
}

// Snapshot is every configured rule's stats at now.
func (s *Stats) Snapshot(rules []guard.Rule, now time.Time) []RuleStats {
	m := now.Unix() / 60
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RuleStats, 0, len(rules))
	for _, r := range rules {
		rs := RuleStats{Rule: r.Name, Action: r.Action, Mode: string(r.Mode), Limit: int(r.Limit), Window: r.Window.String(), Minutes: make([]Counts, 60)}
		for _, n := range s.near[r.Name] {
			if now.Sub(n.At) < time.Hour {
				rs.Near = append(rs.Near, n)
			}
		}
		sort.Slice(rs.Near, func(i, j int) bool {
			if rs.Near[i].Remaining != rs.Near[j].Remaining {
				return rs.Near[i].Remaining < rs.Near[j].Remaining
			}
			return rs.Near[i].At.After(rs.Near[j].At)
		})
		for k, c := range s.minutes[r.Name] {
			if k > m-24*60 {
				add(&rs.Day, c)
			}
			if i := 59 - int(m-k); i >= 0 && i < 60 {
				rs.Minutes[i] = *c
				add(&rs.Hour, c)
			}
		}
		out = append(out, rs)
	}
	return out
}

func add(t *Counts, c *Counts) {
	t.Allowed += c.Allowed
	t.Denied += c.Denied
	t.Challenged += c.Challenged
	t.ShadowDenied += c.ShadowDenied
}

// sortedRules is rules by action, then name (the Rules page's order).
func sortedRules(rs []RuleStats) []RuleStats {
	out := slices.Clone(rs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Action < out[j].Action })
	return out
}
