package deploy

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTheDeliveryQueueIsWiredAsDocumented: with DeliveryMode queue (the
// default) the queue sends its failures to the dead-letter queue after as
// many receives as the deliver function counts, outlives a batch's
// timeout six times, is encrypted and TLS only; the deliver function is
// triggered by it alone with ReportBatchItemFailures and a bounded
// concurrency; each role holds only its own SQS actions on that queue;
// the two alarms and the dashboard watch it. With direct, none of it runs
// and no role names SQS.
func TestTheDeliveryQueueIsWiredAsDocumented(t *testing.T) {
	s := newStack(t)
	q := s.resource("DeliveryQueue")["Properties"].(map[string]any)
	dlq := s.resource("DeliveryDeadLetterQueue")["Properties"].(map[string]any)
	queueARN, dlqARN := s.getAtt("DeliveryQueue.Arn"), s.getAtt("DeliveryDeadLetterQueue.Arn")
	redrive := q["RedrivePolicy"].(map[string]any)
	env := s.env("DeliverFunction")
	if scalar(redrive["deadLetterTargetArn"]) != dlqARN || scalar(redrive["maxReceiveCount"]) != env["DELIVERY_MAX_RECEIVES"] {
		t.Errorf("redrive %v; the deliver function gives a message up on receive %s", redrive, env["DELIVERY_MAX_RECEIVES"])
	}
	fn := s.resource("DeliverFunction")["Properties"].(map[string]any)
	timeout, _ := strconv.Atoi(scalar(fn["Timeout"]))
	if vis, _ := strconv.Atoi(scalar(q["VisibilityTimeout"])); timeout == 0 || vis < 6*timeout {
		t.Errorf("visibility timeout %d s for a function of %d s: want at least 6 times", vis, timeout)
	}
	if wait := env["DELIVERY_MAX_WAIT"]; wait == "" || !strings.HasSuffix(wait, "s") {
		t.Errorf("DELIVERY_MAX_WAIT %q", wait)
	} else if w, _ := strconv.Atoi(strings.TrimSuffix(wait, "s")); w+5 >= timeout {
		t.Errorf("a message may wait %d s for its turn plus the provider's 5 s: over the function's %d s", w, timeout)
	}
	for name, p := range map[string]map[string]any{"queue": q, "dead-letter queue": dlq} {
		if p["SqsManagedSseEnabled"] != true {
			t.Errorf("the %s is not encrypted at rest", name)
		}
	}
	policy, _ := json.Marshal(s.resource("DeliveryQueuesPolicy"))
	if !strings.Contains(string(policy), `"aws:SecureTransport":"false"`) || !strings.Contains(string(policy), `"Effect":"Deny"`) {
		t.Errorf("the queues take plain HTTP: %s", policy)
	}

	esm := s.resource("DeliverFunctionQueue")["Properties"].(map[string]any)
	if scalar(esm["EventSourceArn"]) != queueARN || !slices.Contains(anyStrings(esm["FunctionResponseTypes"]), "ReportBatchItemFailures") {
		t.Errorf("event source mapping %v", esm)
	}
	if c, _ := strconv.Atoi(scalar(esm["ScalingConfig"].(map[string]any)["MaximumConcurrency"])); c < 2 {
		t.Errorf("MaximumConcurrency %d", c)
	}

	sqsOf := func(role string) (actions []string, resources []string) {
		for _, st := range s.statements(role) {
			for _, a := range st.Actions {
				if strings.HasPrefix(a, "sqs:") && st.Effect == "Allow" {
					actions = append(actions, a)
					resources = append(resources, st.Resources...)
				}
			}
		}
		slices.Sort(actions)
		return actions, slices.Compact(resources)
	}
	if managed, _ := json.Marshal(s.resource("DeliverFunctionRole")["Properties"].(map[string]any)["ManagedPolicyArns"]); strings.Contains(string(managed), "SQS") {
		t.Errorf("the deliver function's role has a managed SQS policy (every queue): %s", managed)
	}
	for role, want := range map[string][]string{
		"DeliverFunctionRole":     {"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"},
		"SendFunctionRole":        {"sqs:GetQueueAttributes", "sqs:SendMessage"},
		"LoginFunctionRole":       {"sqs:GetQueueAttributes", "sqs:SendMessage"},
		"CognitoSendFunctionRole": {"sqs:GetQueueAttributes", "sqs:SendMessage"},
		"VerifyFunctionRole":      nil,
	} {
		actions, resources := sqsOf(role)
		if !slices.Equal(actions, want) || (want != nil && !slices.Equal(resources, []string{queueARN})) {
			t.Errorf("%s: sqs %v on %v, want %v on the delivery queue only", role, actions, resources, want)
		}
	}
	for _, f := range []string{"SendFunction", "LoginFunction", "CognitoSendFunction"} {
		if e := s.env(f); e["DELIVERY_MODE"] != "queue" || e["DELIVERY_QUEUE_URL"] == "" || e["DELIVERY_QUEUE_MAX_DEPTH"] == "" {
			t.Errorf("%s: DELIVERY_MODE %q, DELIVERY_QUEUE_URL %q, DELIVERY_QUEUE_MAX_DEPTH %q", f, e["DELIVERY_MODE"], e["DELIVERY_QUEUE_URL"], e["DELIVERY_QUEUE_MAX_DEPTH"])
		}
	}

	alarm := func(name string) (metric, queue string) {
		p := s.resource(name)["Properties"].(map[string]any)
		for _, d := range p["Dimensions"].([]any) {
			if m := d.(map[string]any); m["Name"] == "QueueName" {
				queue = scalar(m["Value"])
			}
		}
		return scalar(p["Namespace"]) + "/" + scalar(p["MetricName"]), queue
	}
	if m, q := alarm("DeliveryQueueAgeAlarm"); m != "AWS/SQS/ApproximateAgeOfOldestMessage" || q != s.getAtt("DeliveryQueue.QueueName") {
		t.Errorf("the age alarm watches %s of %s", m, q)
	}
	if m, q := alarm("DeliveryDeadLetterAlarm"); m != "AWS/SQS/ApproximateNumberOfMessagesVisible" || q != s.getAtt("DeliveryDeadLetterQueue.QueueName") {
		t.Errorf("the dead-letter alarm watches %s of %s", m, q)
	}
	body := scalar(s.tmpl["Resources"].(map[string]any)["Dashboard"].(map[string]any)["Properties"].(map[string]any)["DashboardBody"].(map[string]any)["Fn::Sub"])
	body = strings.Join(strings.Fields(body), "")
	for _, want := range []string{
		`"ApproximateNumberOfMessagesVisible","QueueName","${DeliveryQueue.QueueName}"`,
		`"ApproximateAgeOfOldestMessage","QueueName","${DeliveryQueue.QueueName}"`,
		`"ApproximateNumberOfMessagesVisible","QueueName","${DeliveryDeadLetterQueue.QueueName}"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the dashboard does not show %s", want)
		}
	}

	direct := newStack(t, "DeliveryMode", "direct")
	for _, r := range []string{"DeliverFunction", "DeliverFunctionQueue", "DeliveryQueueAgeAlarm", "DeliveryDeadLetterAlarm"} {
		if direct.resource(r) != nil {
			t.Errorf("DeliveryMode direct creates %s", r)
		}
	}
	for _, role := range []string{"SendFunctionRole", "LoginFunctionRole", "CognitoSendFunctionRole"} {
		for _, st := range direct.statements(role) {
			for _, a := range st.Actions {
				if strings.HasPrefix(a, "sqs:") {
					t.Errorf("DeliveryMode direct: %s may %s", role, a)
				}
			}
		}
	}
	if e := direct.env("SendFunction"); e["DELIVERY_MODE"] != "direct" || e["DELIVERY_QUEUE_URL"] != "" {
		t.Errorf("DeliveryMode direct: the send function has DELIVERY_MODE %q, DELIVERY_QUEUE_URL %q", e["DELIVERY_MODE"], e["DELIVERY_QUEUE_URL"])
	}
}
