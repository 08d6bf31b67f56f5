// Package eventbus publishes otpguard's security events (guard/events) to
// Amazon EventBridge with the SDK's client: PutEvents on the bus
// EVENT_BUS_NAME names (the account's default bus unless the stack names
// another), source "otpguard".
package eventbus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/otpguard/otpguard/guard/events"
)

// Publisher is events.Publisher on EventBridge.
type Publisher struct {
	Client *eventbridge.Client
	Bus    string
	Stack  string
	Now    func() time.Time
}

// New is a Publisher on cfg's EventBridge and the bus named bus.
func New(cfg aws.Config, bus, stack string) *Publisher {
	return &Publisher{Client: eventbridge.NewFromConfig(cfg), Bus: bus, Stack: stack, Now: time.Now}
}

// Publish implements events.Publisher.
func (p *Publisher) Publish(ctx context.Context, e events.Event) error {
	detail, err := json.Marshal(events.Detail(e, p.Stack, p.Now()))
	if err != nil {
		return err
	}
	out, err := p.Client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{{
		Source: aws.String(events.Source), DetailType: aws.String(e.DetailType), Detail: aws.String(string(detail)),
		EventBusName: aws.String(p.Bus),
	}}})
	if err != nil {
		return err
	}
	if out.FailedEntryCount > 0 && len(out.Entries) > 0 {
		return fmt.Errorf("eventbus: %s refused: %s", e.DetailType, aws.ToString(out.Entries[0].ErrorCode))
	}
	return nil
}
