// Package awsfake is a local endpoint that speaks the wire protocols of
// the AWS services otpguard calls, for tests that drive the real
// aws-sdk-go-v2 clients: SES v2 SendEmail (REST-JSON), SNS Publish (query
// protocol, XML replies), Secrets Manager GetSecretValue and SSM
// GetParameter and DescribeSecret (JSON 1.1), KMS GenerateDataKey, Encrypt
// and Decrypt and EventBridge PutEvents (JSON 1.1), Cognito InitiateAuth and SignUp (JSON 1.1,
// unsigned, as the real service takes them). It records what was sent. Point a client at it
// with AWS_ENDPOINT_URL or aws.Config.BaseEndpoint.
package awsfake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Email is one SendEmail call.
type Email struct {
	From, Subject, Text, HTML, ConfigurationSet string
	To                                          []string
}

// SMS is one Publish to a phone number.
type SMS struct {
	PhoneNumber, Message string
	Attributes           map[string]string
}

// Server is the fake endpoint.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	emails  []Email
	sms     []SMS
	calls   []string
	secrets map[string]map[string]string // id -> version id -> value
	stages  map[string]map[string]string // id -> stage -> version id
	params  map[string]string
	// limits answers ThrottlingException to an operation beyond its rate
	// (calls per second), as the services do past their quotas.
	limits map[string]*rate
	// denied answers AccessDeniedException to an operation on a resource
	// (op + "\x00" + name): what IAM answers a policy that does not match.
	denied map[string]bool
	users  map[string]User
	// fail maps a destination (email or phone) to the error code the
	// service answers for it, such as MessageRejected or InvalidParameter.
	fail map[string]string
	// kmsKeys are the symmetric KMS keys by ARN (AddKMSKey).
	kmsKeys map[string][]byte
	events  []BusEvent
	// paramHistory is each parameter's versions (SetParameter, PutParameter).
	paramHistory map[string][]ParameterVersion
	metrics      []metricPoint
}

// BusEvent is one EventBridge PutEvents entry.
type BusEvent struct {
	Source, DetailType, Detail, EventBusName string
}

// Events returns the EventBridge entries put so far.
func (s *Server) Events() []BusEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]BusEvent(nil), s.events...)
}

func (s *Server) putEvents(w http.ResponseWriter, body []byte) {
	s.call("events:PutEvents")
	var in struct{ Entries []BusEvent }
	if err := json.Unmarshal(body, &in); err != nil || len(in.Entries) == 0 || len(in.Entries) > 10 {
		jsonError(w, 400, "ValidationException", "1 to 10 entries")
		return
	}
	if s.refused(w, "events:PutEvents", in.Entries[0].EventBusName) {
		return
	}
	out := []map[string]string{}
	s.mu.Lock()
	for _, e := range in.Entries {
		if !json.Valid([]byte(e.Detail)) || e.Source == "" || e.DetailType == "" {
			out = append(out, map[string]string{"ErrorCode": "MalformedDetail", "ErrorMessage": "Detail is malformed."})
			continue
		}
		s.events = append(s.events, e)
		out = append(out, map[string]string{"EventId": fmt.Sprintf("ev-%d", len(s.events))})
	}
	s.mu.Unlock()
	failed := 0
	for _, o := range out {
		if o["ErrorCode"] != "" {
			failed++
		}
	}
	writeAmzJSON(w, map[string]any{"FailedEntryCount": failed, "Entries": out})
}

// User is a Cognito user of the fake user pool.
type User struct {
	Password  string
	Confirmed bool
}

// New starts a fake endpoint; Close it when done.
func New() *Server {
	s := &Server{secrets: map[string]map[string]string{}, stages: map[string]map[string]string{}, params: map[string]string{},
		fail: map[string]string{}, users: map[string]User{}, limits: map[string]*rate{}, denied: map[string]bool{},
		paramHistory: map[string][]ParameterVersion{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// SetSecret sets what GetSecretValue answers for id (AWSCURRENT).
func (s *Server) SetSecret(id, value string) { s.SetSecretStage(id, "AWSCURRENT", value) }

// SetSecretStage labels stage (AWSCURRENT, AWSPREVIOUS, AWSPENDING) the
// version of secret id holding value (a version per distinct value, its id
// derived from it); "" removes the label.
func (s *Server) SetSecretStage(id, stage, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stages[id] == nil {
		s.stages[id], s.secrets[id] = map[string]string{}, map[string]string{}
	}
	if value == "" {
		delete(s.stages[id], stage)
		return
	}
	sum := sha256.Sum256([]byte(value))
	vid := hex.EncodeToString(sum[:8])
	s.secrets[id][vid] = value
	s.stages[id][stage] = vid
}

// Limit makes op (as Calls names it, "ssm:GetParameter") answer
// ThrottlingException beyond perSecond calls a second.
func (s *Server) Limit(op string, perSecond int) {
	s.mu.Lock()
	s.limits[op] = &rate{per: perSecond}
	s.mu.Unlock()
}

// Deny makes op on the resource name answer AccessDeniedException (deny
// false lifts it).
func (s *Server) Deny(op, name string, deny bool) {
	s.mu.Lock()
	s.denied[op+"\x00"+name] = deny
	s.mu.Unlock()
}

// CallsOf counts the calls of op so far.
func (s *Server) CallsOf(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c == op {
			n++
		}
	}
	return n
}

// rate counts an operation's calls in the current second.
type rate struct {
	per    int
	second int64
	n      int
}

// refused answers the call to op on name with a throttle or an access
// denial, when it gets one, and reports whether it did.
func (s *Server) refused(w http.ResponseWriter, op, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied[op+"\x00"+name] {
		jsonError(w, 400, "AccessDeniedException", "User: arn:aws:sts::000000000000:assumed-role/fn is not authorized to perform: "+op+" on resource: "+name)
		return true
	}
	if s.overLimit(op) {
		jsonError(w, 400, "ThrottlingException", "Rate exceeded")
		return true
	}
	return false
}

// overLimit counts a call of op against its Limit; s.mu is held.
func (s *Server) overLimit(op string) bool {
	r := s.limits[op]
	if r == nil {
		return false
	}
	now := time.Now().Unix()
	if now != r.second {
		r.second, r.n = now, 0
	}
	r.n++
	return r.n > r.per
}

// SetUser adds or replaces a user of the fake Cognito user pool.
func (s *Server) SetUser(name string, u User) { s.mu.Lock(); s.users[name] = u; s.mu.Unlock() }

// Users returns the fake user pool.
func (s *Server) Users() map[string]User {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]User, len(s.users))
	for k, v := range s.users {
		out[k] = v
	}
	return out
}

// SetParameter sets what GetParameter answers for name.
func (s *Server) SetParameter(name, value string) {
	s.mu.Lock()
	s.params[name] = value
	s.paramHistory[name] = append(s.paramHistory[name], ParameterVersion{value, "arn:aws:iam::123456789012:user/deployer", time.Now().UTC()})
	s.mu.Unlock()
}

// Fail makes sends to destination fail with the service error code.
func (s *Server) Fail(destination, code string) {
	s.mu.Lock()
	s.fail[destination] = code
	s.mu.Unlock()
}

// Emails returns the emails sent so far.
func (s *Server) Emails() []Email {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Email(nil), s.emails...)
}

// SMS returns the SMS sent so far.
func (s *Server) SMS() []SMS { s.mu.Lock(); defer s.mu.Unlock(); return append([]SMS(nil), s.sms...) }

// Calls returns the operations called so far ("sesv2:SendEmail", ...).
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *Server) call(op string) { s.mu.Lock(); s.calls = append(s.calls, op); s.mu.Unlock() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AWSCognitoIdentityProviderService."); ok {
		s.cognito(w, op, body)
		return
	}
	if !strings.Contains(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
		jsonError(w, 403, "MissingAuthenticationToken", "request is not signed")
		return
	}
	switch target := r.Header.Get("X-Amz-Target"); {
	case r.URL.Path == "/v2/email/outbound-emails":
		s.sendEmail(w, body)
	case target == "secretsmanager.GetSecretValue":
		s.getSecret(w, body)
	case target == "secretsmanager.DescribeSecret":
		s.describeSecret(w, body)
	case target == "AmazonSSM.GetParameter":
		s.getParameter(w, body)
	case target == "AmazonSSM.PutParameter":
		s.putParameter(w, body)
	case target == "AmazonSSM.GetParameterHistory":
		s.getParameterHistory(w, body)
	case strings.HasPrefix(target, "GraniteServiceVersion20100801."):
		if r.Header.Get("Content-Type") != "application/x-amz-json-1.0" {
			jsonError(w, 400, "UnknownOperation", "awsfake: cloudwatch speaks JSON 1.0 here")
			return
		}
		s.cloudWatch(w, strings.TrimPrefix(target, "GraniteServiceVersion20100801."), body)
	case target == "AWSEvents.PutEvents":
		s.putEvents(w, body)
	case strings.HasPrefix(target, "TrentService."):
		s.kms(w, strings.TrimPrefix(target, "TrentService."), body)
	case strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded"):
		s.query(w, body)
	default:
		jsonError(w, 400, "UnknownOperation", fmt.Sprintf("awsfake: %s %s target %q", r.Method, r.URL.Path, target))
	}
}

func (s *Server) failure(dest string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail[dest]
}

func writeAmzJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}

func restError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func queryError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	type e struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	out, _ := xml.Marshal(struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Error     e        `xml:"Error"`
		RequestID string   `xml:"RequestId"`
	}{Error: e{"Sender", code, msg}, RequestID: "req-error"})
	_, _ = w.Write(out)
}

// Config is the SDK configuration of a test's client that reaches an
// endpoint at url: us-east-1 and static test credentials (its calls are
// signed).
func Config(url string) aws.Config {
	return aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}
}
