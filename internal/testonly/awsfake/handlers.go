package awsfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

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
