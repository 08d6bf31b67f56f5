// Package events defines otpguard's security events (docs/contract.md §11):
// what an operator routes to email, chat or a SIEM. On AWS they go to
// Amazon EventBridge (source "otpguard", the detail-types below); locally
// to the log. No event carries a clear identifier: subjects are the keyed
// fingerprints the decision log uses, destinations are masked.
//
// Detail-types and their detail (every detail also has "stack" and
// "at", RFC 3339):
//
//	Lockout Started        a rule with a lockout locked a subject:
//	                       {"action","rule","dimensions":["account"],"subject","lockedForSeconds"}
//	Lockout DoS Suspected  an account was locked by failures from many
//	                       networks (a distinct-networks rule on the
//	                       account counted at least 3 in its window):
//	                       {"action","rule","subject","networks","networkRule","lockedForSeconds"}
//	Budget Tripped         a global cap or a budget that follows verified
//	                       traffic (elastic) denied:
//	                       {"action","rule","kind":"global"|"elastic","dimensions","subject","retryAfterSeconds"}
//	Config Applied         a config document took effect: {"config","rules"}
//	Config Rejected        a config document was refused: {"config","reason"}
//	Admin Unblock          an operator unblocked a subject:
//	                       {"dimension","subject","rules":[...],"caller"}
//
// At most one event is published per (rule, subject) per lockout or
// window, and per config document: the deduplication is in Redis, so it
// holds across every process.
package events

import (
	"context"
	"log/slog"
	"time"
)

// Source is the EventBridge source of every event.
const Source = "otpguard"

// The detail-types.
const (
	LockoutStarted  = "Lockout Started"
	LockoutDoS      = "Lockout DoS Suspected"
	BudgetTripped   = "Budget Tripped"
	ConfigApplied   = "Config Applied"
	ConfigRejected  = "Config Rejected"
	AdminUnblock    = "Admin Unblock"
	DoSNetworksMin  = 3 // networks that make a lockout a suspected lockout-DoS
	publishDeadline = time.Second
)

// Types lists the detail-types.
var Types = []string{LockoutStarted, LockoutDoS, BudgetTripped, ConfigApplied, ConfigRejected, AdminUnblock}

// Event is one security event.
type Event struct {
	DetailType string
	// Detail is the event's JSON object (without stack and at, which the
	// publisher adds).
	Detail map[string]any
}

// Publisher sends events. Publish never blocks a request for long (its
// own deadline is a second) and reports failures to its caller's log.
type Publisher interface {
	Publish(ctx context.Context, e Event) error
}

// Deadline bounds one publish.
func Deadline() time.Duration { return publishDeadline }

// Log is the Publisher of a process without EventBridge (make run): each
// event is a log record "security event".
type Log struct {
	Logger *slog.Logger
	Stack  string
}

// Publish implements Publisher.
func (l Log) Publish(ctx context.Context, e Event) error {
	l.Logger.WarnContext(ctx, "security event", "detailType", e.DetailType, "detail", Detail(e, l.Stack, time.Now()))
	return nil
}

// Detail is an event's detail with the stack and the time added.
func Detail(e Event, stack string, at time.Time) map[string]any {
	d := make(map[string]any, len(e.Detail)+2)
	for k, v := range e.Detail {
		d[k] = v
	}
	d["stack"], d["at"] = stack, at.UTC().Format(time.RFC3339)
	return d
}
