package deploy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
)

// The delivery queue (DeliveryMode queue, docs/delivery.md): what the template
// builds for it, checked against what the deliver function and the
// functions that queue read.

// TestTheDeliveryParametersAreTheDocumentedChoice: DeliveryMode is queue
// (the default) or direct, nothing else; DeliveryQueueMaxDepth is a
// number of at least 1 whose default is no deeper than the default SMS
// rate can deliver within the default code TTL (a message deeper than
// that would expire before its turn); both are in the console's Delivery
// group.
func TestTheDeliveryParametersAreTheDocumentedChoice(t *testing.T) {
	s := newStack(t)
	params := s.tmpl["Parameters"].(map[string]any)
	mode := params["DeliveryMode"].(map[string]any)
	if v := anyStrings(mode["AllowedValues"]); !slices.Equal(v, []string{"queue", "direct"}) || scalar(mode["Default"]) != "queue" {
		t.Errorf("DeliveryMode: AllowedValues %v, Default %v; want queue and direct, queue", v, mode["Default"])
	}
	depth := params["DeliveryQueueMaxDepth"].(map[string]any)
	def, _ := strconv.Atoi(scalar(depth["Default"]))
	sms, _ := strconv.Atoi(s.params["SmsPerSecond"])
	ttl := config.Default().OTP.TTL
	if depth["Type"] != "Number" || scalar(depth["MinValue"]) != "1" || def < 1 || time.Duration(def/sms)*time.Second > ttl {
		t.Errorf("DeliveryQueueMaxDepth: %v; its default %d at the default %d SMS a second waits %ds, the default code TTL is %s",
			depth, def, sms, def/max(sms, 1), ttl)
	}
	for _, set := range [][]string{{"DeliveryMode", "fifo"}, {"DeliveryMode", ""}, {"DeliveryQueueMaxDepth", "0"}} {
		if _, refused := newStackOrRefusals(t, set...); len(refused) == 0 {
			t.Errorf("CloudFormation takes %s=%q", set[0], set[1])
		}
	}
	groups, _ := json.Marshal(s.tmpl["Metadata"].(map[string]any)["AWS::CloudFormation::Interface"].(map[string]any)["ParameterGroups"])
	for _, p := range []string{"DeliveryMode", "DeliveryQueueMaxDepth"} {
		if !strings.Contains(string(groups), `"`+p+`"`) {
			t.Errorf("%s is in no ParameterGroup: %s", p, groups)
		}
	}
}

// TestTheDeliveryQueueIsWiredAsDocumented: with DeliveryMode queue (the
// default) the queue sends its failures to the dead-letter queue after as
// many receives as the deliver function counts, outlives a batch's
// timeout six times, keeps a message as long as any code may live and
// not much longer, is encrypted and TLS only; the deliver function is
// triggered by it alone with ReportBatchItemFailures and a bounded
// concurrency, and the functions that queue are told its URL.
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
	if n, _ := strconv.Atoi(env["DELIVERY_MAX_RECEIVES"]); n < 5 {
		// a batch the function could not take (throttled, a timeout)
		// counts a receive too: a message must outlast a few of those
		t.Errorf("DELIVERY_MAX_RECEIVES %q, want at least 5", env["DELIVERY_MAX_RECEIVES"])
	}
	fn := s.resource("DeliverFunction")["Properties"].(map[string]any)
	timeout, _ := strconv.Atoi(scalar(fn["Timeout"]))
	if vis, _ := strconv.Atoi(scalar(q["VisibilityTimeout"])); timeout == 0 || vis < 6*timeout {
		t.Errorf("visibility timeout %d s for a function of %d s: want at least 6 times", vis, timeout)
	}
	wait, err1 := time.ParseDuration(env["DELIVERY_MAX_WAIT"])
	provider, err2 := time.ParseDuration(env["PROVIDER_TIMEOUT"])
	if err1 != nil || err2 != nil || wait+provider >= time.Duration(timeout)*time.Second {
		t.Errorf("a message may wait %q for its turn plus the provider's %q: not within the function's %d s", env["DELIVERY_MAX_WAIT"], env["PROVIDER_TIMEOUT"], timeout)
	}
	// the longest otp.ttl the config takes: a code SQS would drop
	// before it expired could never be delivered late instead of not at all
	longest := 0 * time.Second
	for d := time.Minute; d <= time.Hour; d += time.Minute {
		if _, err := config.Parse(fmt.Appendf(nil, "otp: {ttl: %s}\n", d)); err == nil {
			longest = d
		}
	}
	retention, _ := strconv.Atoi(scalar(q["MessageRetentionPeriod"]))
	if longest == 0 || time.Duration(retention)*time.Second < longest || time.Duration(retention)*time.Second > longest+10*time.Minute {
		t.Errorf("the queue keeps a message %d s; codes live up to %s", retention, longest)
	}
	if r := scalar(dlq["MessageRetentionPeriod"]); r != "1209600" {
		t.Errorf("the dead-letter queue keeps a message %s s, want 14 days (1209600)", r)
	}
	for name, p := range map[string]map[string]any{"queue": q, "dead-letter queue": dlq} {
		if p["SqsManagedSseEnabled"] != true {
			t.Errorf("the %s is not encrypted at rest", name)
		}
	}
	policy := s.resource("DeliveryQueuesPolicy")["Properties"].(map[string]any)
	if got := anyStrings(policy["Queues"]); !slices.Equal(got, []string{scalar(s.ref("DeliveryQueue")), scalar(s.ref("DeliveryDeadLetterQueue"))}) {
		t.Errorf("the TLS-only policy is on %v, want both queues", got)
	}
	tlsOnly := false
	for _, st := range policy["PolicyDocument"].(map[string]any)["Statement"].([]any) {
		st := st.(map[string]any)
		c, _ := json.Marshal(st["Condition"])
		if st["Effect"] == "Deny" && st["Principal"] == "*" && slices.Equal(anyStrings(st["Action"]), []string{"sqs:*"}) &&
			slices.Equal(anyStrings(st["Resource"]), []string{queueARN, dlqARN}) && string(c) == `{"Bool":{"aws:SecureTransport":"false"}}` {
			tlsOnly = true
		}
	}
	if !tlsOnly {
		t.Errorf("the queues take plain HTTP: %v", policy)
	}

	esm := s.resource("DeliverFunctionQueue")["Properties"].(map[string]any)
	if scalar(esm["EventSourceArn"]) != queueARN || scalar(esm["FunctionName"]) != scalar(s.ref("DeliverFunction")) ||
		!slices.Equal(anyStrings(esm["FunctionResponseTypes"]), []string{"ReportBatchItemFailures"}) {
		t.Errorf("event source mapping %v: want the delivery queue to the deliver function, ReportBatchItemFailures", esm)
	}
	batch, _ := strconv.Atoi(scalar(esm["BatchSize"]))
	sc, _ := esm["ScalingConfig"].(map[string]any)
	conc, _ := strconv.Atoi(scalar(sc["MaximumConcurrency"]))
	// AWS takes 2 to 1000; the pacer holds the rate across containers,
	// so more invocations only hold more messages waiting their turn: at
	// the default email rate each message in flight gets it within
	// DELIVERY_MAX_WAIT
	email, _ := strconv.Atoi(s.params["EmailPerSecond"])
	if conc != 2 || batch < 1 || batch > 10 || time.Duration(batch*conc/email)*time.Second > wait {
		t.Errorf("BatchSize %d, MaximumConcurrency %d: %d messages in flight at %d email a second, want MaximumConcurrency 2 and their turns within %s",
			batch, conc, batch*conc, email, wait)
	}
	// its mapping bounds it: a reservation below MaximumConcurrency would
	// only throttle the batches
	capped := newStack(t, "ReservedConcurrency", "1", "SendReservedConcurrency", "1")
	if rc, ok := capped.resource("DeliverFunction")["Properties"].(map[string]any)["ReservedConcurrentExecutions"]; ok {
		t.Errorf("the deliver function reserves %v", rc)
	}
	for name, r := range s.tmpl["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] == "AWS::Lambda::EventSourceMapping" && name != "DeliverFunctionQueue" {
			t.Errorf("%s: an event source mapping besides DeliverFunctionQueue (a SAM event's brings a managed policy on every queue)", name)
		}
	}
	if env["DELIVERY_QUEUE_URL"] != scalar(s.ref("DeliveryQueue")) {
		t.Errorf("the deliver function's DELIVERY_QUEUE_URL is %q", env["DELIVERY_QUEUE_URL"])
	}
	for _, f := range []string{"SendFunction", "LoginFunction", "CognitoSendFunction"} {
		e := s.env(f)
		if e["DELIVERY_MODE"] != "queue" || e["DELIVERY_QUEUE_URL"] != scalar(s.ref("DeliveryQueue")) || e["DELIVERY_QUEUE_MAX_DEPTH"] != s.params["DeliveryQueueMaxDepth"] {
			t.Errorf("%s: DELIVERY_MODE %q, DELIVERY_QUEUE_URL %q, DELIVERY_QUEUE_MAX_DEPTH %q", f, e["DELIVERY_MODE"], e["DELIVERY_QUEUE_URL"], e["DELIVERY_QUEUE_MAX_DEPTH"])
		}
		// the deliver function sends as the direct ones do
		for _, v := range []string{"SES_FROM", "SES_CONFIGURATION_SET", "EMAIL_PER_SECOND", "SMS_SENDER_ID", "SMS_ORIGINATION_NUMBER", "SMS_MAX_PRICE", "SMS_PER_SECOND", "GUARD_HASH_SECRET_ID"} {
			if env[v] != e[v] {
				t.Errorf("%s: the deliver function has %q, %s %q", v, env[v], f, e[v])
			}
		}
	}
	endpoint := newStack(t, "VpcEndpoints", "sqs")
	if e := endpoint.resource("SqsEndpoint"); e == nil || scalar(e["Properties"].(map[string]any)["ServiceName"]) != "com.amazonaws."+region+".sqs" {
		t.Errorf("VpcEndpoints=sqs: endpoint %v", e)
	}
	if newStack(t).resource("SqsEndpoint") != nil {
		t.Error("an SQS endpoint is created by default")
	}
}

// sqsActions are the SQS actions a role allows, and on what.
func (s *stack) sqsActions(role string) (actions []string, resources []string) {
	for _, st := range s.statements(role) {
		for _, a := range st.Actions {
			if (strings.HasPrefix(a, "sqs:") || a == "*") && st.Effect == "Allow" {
				actions = append(actions, a)
				resources = append(resources, st.Resources...)
			}
		}
	}
	slices.Sort(actions)
	slices.Sort(resources)
	return actions, slices.Compact(resources)
}

// TestTheDeliveryRolesReachOnlyTheirQueue: the deliver function's role
// may receive, delete, read and postpone (and nothing else) on the
// delivery queue alone, with no managed policy (SAM's SQS event would
// attach AWSLambdaSQSQueueExecutionRole, every queue of the account);
// the functions that queue may send and read its depth there alone; no
// other role names SQS.
func TestTheDeliveryRolesReachOnlyTheirQueue(t *testing.T) {
	s := newStack(t)
	queueARN := s.getAtt("DeliveryQueue.Arn")
	if managed, _ := json.Marshal(s.resource("DeliverFunctionRole")["Properties"].(map[string]any)["ManagedPolicyArns"]); strings.Contains(strings.ToLower(string(managed)), "sqs") {
		t.Errorf("the deliver function's role has a managed SQS policy (every queue): %s", managed)
	}
	want := map[string][]string{
		"DeliverFunctionRole":     {"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"},
		"SendFunctionRole":        {"sqs:GetQueueAttributes", "sqs:SendMessage"},
		"LoginFunctionRole":       {"sqs:GetQueueAttributes", "sqs:SendMessage"},
		"CognitoSendFunctionRole": {"sqs:GetQueueAttributes", "sqs:SendMessage"},
	}
	for name, r := range s.tmpl["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] != "AWS::IAM::Role" && r.(map[string]any)["Type"] != "AWS::IAM::ManagedPolicy" {
			continue
		}
		actions, resources := s.sqsActions(name)
		if w := want[name]; !slices.Equal(actions, w) || (w != nil && !slices.Equal(resources, []string{queueARN})) {
			t.Errorf("%s: sqs %v on %v, want %v on the delivery queue only", name, actions, resources, w)
		}
	}
	for _, st := range s.statements("DeliverFunctionRole") {
		if st.Effect == "Allow" && slices.ContainsFunc(st.Actions, func(a string) bool { return strings.HasPrefix(a, "sqs:") }) &&
			(len(st.Condition) > 0 || slices.ContainsFunc(st.Actions, func(a string) bool { return !strings.HasPrefix(a, "sqs:") })) {
			t.Errorf("the deliver function's SQS statement mixes in other actions or a condition: %+v", st)
		}
	}
}

// TestTheDeliveryQueueIsWatched: an alarm on the age of the queue's
// oldest message (a code a minute late), one on any dead letter, both to
// AlarmTopicArn; the dashboard shows the queue's depth, its oldest
// message and the dead letters, and stays JSON in either mode.
func TestTheDeliveryQueueIsWatched(t *testing.T) {
	topic := "arn:aws:sns:" + region + ":" + account + ":oncall"
	s := newStack(t, "AlarmTopicArn", topic)
	for _, a := range []struct{ name, metric, queue, op, threshold string }{
		{"DeliveryQueueAgeAlarm", "AWS/SQS/ApproximateAgeOfOldestMessage", "DeliveryQueue", "GreaterThanThreshold", "60"},
		{"DeliveryDeadLetterAlarm", "AWS/SQS/ApproximateNumberOfMessagesVisible", "DeliveryDeadLetterQueue", "GreaterThanThreshold", "0"},
	} {
		r := s.resource(a.name)
		if r == nil {
			t.Errorf("no %s", a.name)
			continue
		}
		p := r["Properties"].(map[string]any)
		var queue string
		for _, d := range p["Dimensions"].([]any) {
			if m := d.(map[string]any); m["Name"] == "QueueName" {
				queue = scalar(m["Value"])
			}
		}
		metric := scalar(p["Namespace"]) + "/" + scalar(p["MetricName"])
		if metric != a.metric || queue != s.getAtt(a.queue+".QueueName") || scalar(p["ComparisonOperator"]) != a.op || scalar(p["Threshold"]) != a.threshold ||
			scalar(p["AlarmActions"]) != topic || scalar(p["TreatMissingData"]) != "notBreaching" {
			t.Errorf("%s watches %s of %s, %s %s, notifies %v (missing data %v); want %s of %s, %s %s, %s",
				a.name, metric, queue, p["ComparisonOperator"], p["Threshold"], p["AlarmActions"], p["TreatMissingData"], a.metric, a.queue, a.op, a.threshold, topic)
		}
	}

	for _, mode := range []string{"queue", "direct"} {
		s := newStack(t, "DeliveryMode", mode)
		body := s.eval(s.resource("Dashboard")["Properties"].(map[string]any)["DashboardBody"])
		var d struct {
			Widgets []struct {
				Properties struct{ Metrics [][]any }
			}
		}
		if err := json.Unmarshal([]byte(scalar(body)), &d); err != nil {
			t.Errorf("DeliveryMode %s: the dashboard body is not JSON: %v", mode, err)
			continue
		}
		shown, queues := map[string]bool{}, map[string]bool{}
		for _, w := range d.Widgets {
			for _, m := range w.Properties.Metrics {
				if len(m) >= 4 && m[0] == "AWS/SQS" && m[2] == "QueueName" {
					shown[fmt.Sprint(m[1], " ", m[3])] = true
					queues[fmt.Sprint(m[3])] = true
				}
			}
		}
		if mode == "direct" {
			// no queue to name: CloudFormation would refuse a !GetAtt of
			// a resource the stack does not create
			for q := range queues {
				if q != "(none: DeliveryMode direct)" {
					t.Errorf("DeliveryMode direct: the dashboard names queue %s", q)
				}
			}
			continue
		}
		queue, dlq := s.getAtt("DeliveryQueue.QueueName"), s.getAtt("DeliveryDeadLetterQueue.QueueName")
		for _, want := range []string{"ApproximateNumberOfMessagesVisible " + queue, "ApproximateAgeOfOldestMessage " + queue, "ApproximateNumberOfMessagesVisible " + dlq} {
			if !shown[want] {
				t.Errorf("DeliveryMode queue: the dashboard does not show %s (it shows %v)", want, shown)
			}
		}
	}
}

// TestDirectDeliveryHasNoQueue: with DeliveryMode direct the stack has no
// queue, no deliver function and nothing of theirs, even with sqs in
// VpcEndpoints; no role names SQS, and the functions are told so.
func TestDirectDeliveryHasNoQueue(t *testing.T) {
	direct := newStack(t, "DeliveryMode", "direct", "VpcEndpoints", "sqs,ssm")
	for _, r := range []string{"DeliveryQueue", "DeliveryDeadLetterQueue", "DeliveryQueuesPolicy", "DeliverFunction", "DeliverFunctionRole",
		"DeliverFunctionQueue", "DeliverLogs", "DeliveryQueueAgeAlarm", "DeliveryDeadLetterAlarm", "SqsEndpoint"} {
		if _, ok := direct.tmpl["Resources"].(map[string]any)[r]; !ok {
			t.Errorf("%s is not in the template", r)
		} else if direct.resource(r) != nil {
			t.Errorf("DeliveryMode direct creates %s", r)
		}
	}
	if direct.resource("SsmEndpoint") == nil {
		t.Error("VpcEndpoints=sqs,ssm in direct mode drops the ssm endpoint too")
	}
	for name, r := range direct.tmpl["Resources"].(map[string]any) {
		if typ := r.(map[string]any)["Type"]; typ == "AWS::IAM::Role" || typ == "AWS::IAM::ManagedPolicy" {
			if actions, _ := direct.sqsActions(name); len(actions) > 0 {
				t.Errorf("DeliveryMode direct: %s may %v", name, actions)
			}
		}
	}
	for _, f := range []string{"SendFunction", "LoginFunction", "CognitoSendFunction"} {
		if e := direct.env(f); e["DELIVERY_MODE"] != "direct" || e["DELIVERY_QUEUE_URL"] != "" {
			t.Errorf("DeliveryMode direct: %s has DELIVERY_MODE %q, DELIVERY_QUEUE_URL %q", f, e["DELIVERY_MODE"], e["DELIVERY_QUEUE_URL"])
		}
	}
}
