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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
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
	case strings.HasPrefix(r.URL.Path, "/service/GraniteServiceVersion20100801/operation/"):
		s.cloudWatch(w, strings.TrimPrefix(r.URL.Path, "/service/GraniteServiceVersion20100801/operation/"), body)
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

func (s *Server) sendEmail(w http.ResponseWriter, body []byte) {
	s.call("sesv2:SendEmail")
	var in struct {
		FromEmailAddress     string
		ConfigurationSetName string
		Destination          struct{ ToAddresses []string }
		Content              struct {
			Simple struct {
				Subject struct{ Data string }
				Body    struct{ Text, Html struct{ Data string } }
			}
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		restError(w, 400, "BadRequestException", err.Error())
		return
	}
	for _, to := range in.Destination.ToAddresses {
		if code := s.failure(to); code != "" {
			restError(w, 400, code, "awsfake refuses "+to)
			return
		}
	}
	s.mu.Lock()
	s.emails = append(s.emails, Email{From: in.FromEmailAddress, To: in.Destination.ToAddresses, ConfigurationSet: in.ConfigurationSetName,
		Subject: in.Content.Simple.Subject.Data, Text: in.Content.Simple.Body.Text.Data, HTML: in.Content.Simple.Body.Html.Data})
	n := len(s.emails)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"MessageId":"fake-email-%d"}`, n)
}

func (s *Server) query(w http.ResponseWriter, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("Action") != "Publish" {
		queryError(w, 400, "InvalidAction", "awsfake speaks only SNS Publish")
		return
	}
	s.call("sns:Publish")
	m := SMS{PhoneNumber: form.Get("PhoneNumber"), Message: form.Get("Message"), Attributes: map[string]string{}}
	for i := 1; form.Get(fmt.Sprintf("MessageAttributes.entry.%d.Name", i)) != ""; i++ {
		m.Attributes[form.Get(fmt.Sprintf("MessageAttributes.entry.%d.Name", i))] = form.Get(fmt.Sprintf("MessageAttributes.entry.%d.Value.StringValue", i))
	}
	if m.PhoneNumber == "" {
		queryError(w, 400, "InvalidParameter", "PhoneNumber is required")
		return
	}
	if code := s.failure(m.PhoneNumber); code != "" {
		queryError(w, 400, code, "awsfake refuses "+m.PhoneNumber)
		return
	}
	s.mu.Lock()
	throttled := s.overLimit("sns:Publish")
	s.mu.Unlock()
	if throttled {
		queryError(w, 400, "Throttling", "Rate exceeded")
		return
	}
	s.mu.Lock()
	s.sms = append(s.sms, m)
	n := len(s.sms)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishResult><MessageId>fake-sms-%d</MessageId></PublishResult><ResponseMetadata><RequestId>req-%d</RequestId></ResponseMetadata></PublishResponse>`, n, n)
}

func (s *Server) getSecret(w http.ResponseWriter, body []byte) {
	s.call("secretsmanager:GetSecretValue")
	var in struct{ SecretId, VersionStage, VersionId string }
	_ = json.Unmarshal(body, &in)
	if s.refused(w, "secretsmanager:GetSecretValue", in.SecretId) {
		return
	}
	if in.VersionStage == "" && in.VersionId == "" {
		in.VersionStage = "AWSCURRENT"
	}
	s.mu.Lock()
	vid := in.VersionId
	if vid == "" {
		vid = s.stages[in.SecretId][in.VersionStage]
	}
	v, ok := s.secrets[in.SecretId][vid]
	s.mu.Unlock()
	if !ok {
		jsonError(w, 400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: "+in.VersionStage)
		return
	}
	writeAmzJSON(w, map[string]any{"ARN": "arn:aws:secretsmanager:us-east-1:000000000000:secret:" + in.SecretId, "Name": in.SecretId,
		"SecretString": v, "VersionId": vid})
}

// describeSecret answers the secret's versions and their stages.
func (s *Server) describeSecret(w http.ResponseWriter, body []byte) {
	s.call("secretsmanager:DescribeSecret")
	var in struct{ SecretId string }
	_ = json.Unmarshal(body, &in)
	if s.refused(w, "secretsmanager:DescribeSecret", in.SecretId) {
		return
	}
	s.mu.Lock()
	versions := map[string][]string{}
	for stage, vid := range s.stages[in.SecretId] {
		versions[vid] = append(versions[vid], stage)
	}
	s.mu.Unlock()
	if len(versions) == 0 {
		jsonError(w, 400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	writeAmzJSON(w, map[string]any{"ARN": "arn:aws:secretsmanager:us-east-1:000000000000:secret:" + in.SecretId, "Name": in.SecretId,
		"VersionIdsToStages": versions})
}

func (s *Server) getParameter(w http.ResponseWriter, body []byte) {
	s.call("ssm:GetParameter")
	var in struct{ Name string }
	_ = json.Unmarshal(body, &in)
	name, selector, _ := strings.Cut(in.Name, ":")
	if s.refused(w, "ssm:GetParameter", name) {
		return
	}
	s.mu.Lock()
	v, ok := s.params[name]
	versions := s.paramHistory[name]
	s.mu.Unlock()
	version := max(len(versions), 1)
	if selector != "" {
		n, err := strconv.Atoi(selector)
		if err != nil || n < 1 || n > len(versions) {
			jsonError(w, 400, "ParameterVersionNotFound", in.Name)
			return
		}
		v, version = versions[n-1].Value, n
	}
	if !ok {
		jsonError(w, 400, "ParameterNotFound", in.Name)
		return
	}
	writeAmzJSON(w, map[string]any{"Parameter": map[string]any{"Name": name, "Type": "String", "Value": v, "Version": version}})
}

// ParameterVersion is one version of an SSM parameter.
type ParameterVersion struct {
	Value string
	User  string
	At    time.Time
}

func (s *Server) putParameter(w http.ResponseWriter, body []byte) {
	s.call("ssm:PutParameter")
	var in struct {
		Name, Value, Type string
		Overwrite         bool
	}
	_ = json.Unmarshal(body, &in)
	if s.refused(w, "ssm:PutParameter", in.Name) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.params[in.Name]; ok && !in.Overwrite {
		jsonError(w, 400, "ParameterAlreadyExists", in.Name)
		return
	}
	s.params[in.Name] = in.Value
	s.paramHistory[in.Name] = append(s.paramHistory[in.Name], ParameterVersion{in.Value, "arn:aws:sts::123456789012:assumed-role/ops/alice", time.Now().UTC()})
	writeAmzJSON(w, map[string]any{"Version": len(s.paramHistory[in.Name]), "Tier": "Standard"})
}

func (s *Server) getParameterHistory(w http.ResponseWriter, body []byte) {
	s.call("ssm:GetParameterHistory")
	var in struct{ Name string }
	_ = json.Unmarshal(body, &in)
	if s.refused(w, "ssm:GetParameterHistory", in.Name) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.params[in.Name]; !ok {
		jsonError(w, 400, "ParameterNotFound", in.Name)
		return
	}
	var out []map[string]any
	for i, v := range s.paramHistory[in.Name] {
		out = append(out, map[string]any{"Name": in.Name, "Type": "String", "Value": v.Value, "Version": i + 1,
			"LastModifiedUser": v.User, "LastModifiedDate": float64(v.At.UnixMilli()) / 1000})
	}
	writeAmzJSON(w, map[string]any{"Parameters": out})
}

// cognito answers InitiateAuth (USER_PASSWORD_AUTH) and SignUp.
func (s *Server) cognito(w http.ResponseWriter, op string, body []byte) {
	s.call("cognito-idp:" + op)
	var in struct {
		AuthFlow       string
		AuthParameters map[string]string
		Username       string
		Password       string
		ClientId       string
	}
	if err := json.Unmarshal(body, &in); err != nil || in.ClientId == "" {
		jsonError(w, 400, "InvalidParameterException", "malformed request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op {
	case "InitiateAuth":
		if in.AuthFlow != "USER_PASSWORD_AUTH" {
			jsonError(w, 400, "InvalidParameterException", "unsupported auth flow")
			return
		}
		name := in.AuthParameters["USERNAME"]
		u, ok := s.users[name]
		switch {
		case !ok:
			jsonError(w, 400, "UserNotFoundException", "User does not exist.")
		case u.Password != in.AuthParameters["PASSWORD"]:
			jsonError(w, 400, "NotAuthorizedException", "Incorrect username or password.")
		case !u.Confirmed:
			jsonError(w, 400, "UserNotConfirmedException", "User is not confirmed.")
		default:
			writeAmzJSON(w, map[string]any{"AuthenticationResult": map[string]any{
				"AccessToken": "access-" + name, "IdToken": "id-" + name, "RefreshToken": "refresh-" + name, "ExpiresIn": 3600, "TokenType": "Bearer"}})
		}
	case "SignUp":
		if _, ok := s.users[in.Username]; ok {
			jsonError(w, 400, "UsernameExistsException", "User already exists")
			return
		}
		s.users[in.Username] = User{Password: in.Password}
		writeAmzJSON(w, map[string]any{"UserConfirmed": false, "UserSub": fmt.Sprintf("sub-%d", len(s.users))})
	default:
		jsonError(w, 400, "UnknownOperationException", op)
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
