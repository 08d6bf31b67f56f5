// Package eventbus publishes otpguard's security events (guard/events) to
// Amazon EventBridge: PutEvents on the bus EVENT_BUS_NAME names (the
// account's default bus unless the stack names another), source
// "otpguard". The call is JSON 1.1 signed with the SDK's SigV4 signer
// (internal/awsjson), not the generated client, whose schema and endpoint
// tables cost every function about 440 KB of allocations at package init
// (TestPackageInitIsLean); tests/lambda checks that it sends what the
// SDK's client sends.
package eventbus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// Publisher is events.Publisher on EventBridge.
type Publisher struct {
	client *awsjson.Client
	Bus    string
	Stack  string
	Now    func() time.Time
}

// New is a Publisher on cfg's EventBridge and the bus named bus.
func New(cfg aws.Config, bus, stack string) *Publisher {
	return &Publisher{client: awsjson.New(cfg, "events", "AWSEvents"), Bus: bus, Stack: stack, Now: time.Now}
}

// Entry is one PutEvents entry, as the API names its members.
type Entry struct {
	Source       string `json:"Source"`
	DetailType   string `json:"DetailType"`
	Detail       string `json:"Detail"`
	EventBusName string `json:"EventBusName"`
}

// Publish implements events.Publisher.
func (p *Publisher) Publish(ctx context.Context, e events.Event) error {
	detail, err := json.Marshal(events.Detail(e, p.Stack, p.Now()))
	if err != nil {
		return err
	}
	in := struct{ Entries []Entry }{[]Entry{{Source: events.Source, DetailType: e.DetailType, Detail: string(detail), EventBusName: p.Bus}}}
	var out struct {
		FailedEntryCount int
		Entries          []struct{ ErrorCode, ErrorMessage string }
	}
	if err := p.client.Call(ctx, "PutEvents", in, &out); err != nil {
		return err
	}
	if out.FailedEntryCount > 0 && len(out.Entries) > 0 {
		return fmt.Errorf("eventbus: %s refused: %s %s", e.DetailType, out.Entries[0].ErrorCode, out.Entries[0].ErrorMessage)
	}
	return nil
}
