// Package triggers is otpguard as a Cognito user pool's Lambda triggers
// (docs/contract.md §10): it decodes the events Cognito sends, decrypts the
// custom senders' codes (guard/esdk, with the stack's KMS key), and hands
// them to the API's trigger methods (guard/api/cognito.go), which apply
// the same rules, senders, logs and metrics as the HTTP routes.
//
// Two functions link it: the custom senders (CustomSMSSender and
// CustomEmailSender, V1_0: KMS and SES/SNS) and the auth triggers
// (PreSignUp, PreAuthentication, PostAuthentication, PostConfirmation:
// Redis only).
package triggers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/esdk"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// IPField is the clientMetadata (or validationData) entry under which a
// trusted backend passes the client's address.
const IPField = "otpguard:ip"

// Handler answers the triggers.
type Handler struct {
	// Server is the API in force (it changes with the config).
	Server func() *api.Server
	// KMS decrypts the custom senders' data keys; nil in the auth
	// triggers' function.
	KMS esdk.KMS
	// KeyARN is the KMS key the user pool encrypts codes with.
	KeyARN string
	// TrustedClients are the app client ids whose callers may pass the
	// client address (IPField): a backend's confidential client. From any
	// other client the field is ignored, or a caller could spend another
	// address's budget.
	TrustedClients []string
	Log            *slog.Logger
	// Timeout bounds an invocation's own work (each Redis and AWS call
	// has its own, shorter bound): Cognito waits 5 seconds.
	Timeout time.Duration
	// Redis keeps the sign-ins between PreAuthentication and
	// PostAuthentication (signins.go) and the custom senders' retry marks
	// (retries.go): the function's own client, as the stack's cache user.
	Redis redis.UniversalClient
}

// redisTimeout bounds each of the handler's own Redis calls.
const redisTimeout = time.Second

// event is the part of every trigger's event the handler reads.
type event struct {
	TriggerSource string `json:"triggerSource"`
	UserPoolID    string `json:"userPoolId"`
	UserName      string `json:"userName"`
	CallerContext struct {
		ClientID string `json:"clientId"`
	} `json:"callerContext"`
	Request struct {
		Type           string            `json:"type"`
		Code           *string           `json:"code"`
		UserAttributes map[string]string `json:"userAttributes"`
		ClientMetadata map[string]string `json:"clientMetadata"`
		ValidationData map[string]string `json:"validationData"`
	} `json:"request"`
}

// Handle answers one invocation: the event back (Cognito reads its
// response member, which the triggers leave as it came), or an error.
// A denial of PreSignUp or PreAuthentication is an *api.Denied, whose
// text Cognito shows the user.
func (h *Handler) Handle(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("triggers: the event does not decode: %w", err)
	}
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	s := h.Server()
	sub := api.TriggerSubject{Account: ev.UserName, IP: h.clientIP(ev)}
	attrs := ev.Request.UserAttributes
	kind, source, _ := strings.Cut(ev.TriggerSource, "_")
	var err error
	switch kind {
	case "CustomSMSSender", "CustomEmailSender":
		err = h.send(ctx, s, ev, kind, source, sub)
	case "PreSignUp":
		err = s.CognitoSignUp(ctx, sub, attrs["email"], attrs["phone_number"])
	case "PreAuthentication":
		var receipt string
		if receipt, err = s.CognitoPreAuthentication(ctx, sub); err == nil && h.Redis != nil {
			// kept for PostAuthentication, which Cognito gives no client
			// metadata: without it the attempt stays a failure (safe side)
			if kerr := h.signIns(s).keep(ctx, ev.UserPoolID, ev.UserName, receipt); kerr != nil {
				h.Log.WarnContext(ctx, "keep a sign-in attempt for PostAuthentication", "err", kerr)
			}
		}
	case "PostAuthentication":
		h.postAuthentication(ctx, s, ev)
	case "PostConfirmation":
		email, phone := attrs["email"], attrs["phone_number"]
		err = s.CognitoConfirmed(ctx, source == "ConfirmForgotPassword", email, phone)
		if err != nil {
			// the user is confirmed whatever we answer: the budgets keep
			// the send as unverified, which errs on the safe side
			h.Log.WarnContext(ctx, "settle a confirmed sign-up's message", "err", err)
			err = nil
		}
	default:
		return nil, fmt.Errorf("triggers: trigger source %q is not one otpguard answers", ev.TriggerSource)
	}
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// postAuthentication gives back the sign-in attempts kept for ev's user
// at PreAuthentication; a failure is logged, never returned.
func (h *Handler) postAuthentication(ctx context.Context, s *api.Server, ev event) {
	var receipts []string
	var terr error
	if h.Redis != nil {
		receipts, terr = h.signIns(s).take(ctx, ev.UserPoolID, ev.UserName)
	}
	if terr == nil {
		terr = s.CognitoPostAuthentication(ctx, receipts...)
	}
	if terr != nil {
		// the password was right: an error here would fail the
		// sign-in; the attempt stays counted as a failure instead
		h.Log.WarnContext(ctx, "give back a sign-in attempt", "err", terr)
	}
}

// send decrypts and delivers a custom sender's message. A denial is logged
// and answered normally (Cognito shows no error for these triggers).
func (h *Handler) send(ctx context.Context, s *api.Server, ev event, kind, source string, sub api.TriggerSubject) (err error) {
	if _, ok := api.CognitoPurpose(source); !ok {
		return fmt.Errorf("triggers: %s source %q is not one Cognito sends", kind, source)
	}
	m := api.CognitoMessage{TriggerSubject: sub, Source: source, Username: ev.UserName, Locale: ev.Request.UserAttributes["locale"]}
	if kind == "CustomSMSSender" {
		m.Channel, m.To = message.SMS, ev.Request.UserAttributes["phone_number"]
	} else {
		m.Channel, m.To = message.Email, ev.Request.UserAttributes["email"]
	}
	if m.To == "" {
		return fmt.Errorf("triggers: %s without the user's %s", ev.TriggerSource, map[message.Channel]string{message.SMS: "phone_number", message.Email: "email"}[m.Channel])
	}
	if ev.Request.Code != nil && *ev.Request.Code != "" && h.Redis != nil {
		// Cognito's retry of this event carries the same encrypted code;
		// another event, a new encryption (the Encryption SDK draws a new
		// data key and IV for each), even of the same code
		r := retries{rdb: h.Redis, key: s.Guard.Derive("cognito retries")}
		mark := r.markKey(ev.UserPoolID, ev.UserName, ev.TriggerSource, *ev.Request.Code)
		first, merr := r.first(ctx, mark)
		if merr != nil {
			h.Log.WarnContext(ctx, "mark a custom sender's event", "err", merr)
		}
		if !first {
			h.Log.InfoContext(ctx, "a retried custom sender event: already handled", "trigger", ev.TriggerSource)
			return nil
		}
		defer func() {
			if err != nil && merr == nil {
				if ferr := r.forget(ctx, mark); ferr != nil {
					h.Log.WarnContext(ctx, "forget a failed custom sender event's mark", "err", ferr)
				}
			}
		}()
	}
	if ev.Request.Code != nil && *ev.Request.Code != "" {
		code, err := h.decrypt(ctx, *ev.Request.Code)
		if err != nil {
			return err
		}
		m.Code = code
		if source == "AdminCreateUser" {
			// Cognito HTML-escapes temporary passwords
			m.Code = html.UnescapeString(m.Code)
		}
	} else if source != "AccountTakeOverNotification" {
		return fmt.Errorf("triggers: %s without a code", ev.TriggerSource)
	}
	err = s.CognitoSend(ctx, m)
	var denied *api.Denied
	if errors.As(err, &denied) {
		return nil // logged and counted as a denial by the API
	}
	return err
}

// signIns is the store of the sign-ins between PreAuthentication and
// PostAuthentication.
func (h *Handler) signIns(s *api.Server) *signIns {
	return &signIns{rdb: h.Redis, key: s.Guard.Derive("cognito sign-ins"), now: time.Now}
}

// decrypt opens a code: an error never carries the ciphertext.
func (h *Handler) decrypt(ctx context.Context, b64 string) (string, error) {
	if h.KMS == nil || h.KeyARN == "" {
		return "", errors.New("triggers: a custom sender event reached a function without the KMS key (COGNITO_KMS_KEY_ARN)")
	}
	msg, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", errors.New("triggers: the code is not base64")
	}
	plain, err := esdk.Decrypt(ctx, msg, h.KMS, h.KeyARN)
	if err != nil {
		return "", fmt.Errorf("triggers: decrypt the code: %w", err)
	}
	return string(plain), nil
}

// clientIP is the address a trusted client passed, if any.
func (h *Handler) clientIP(ev event) netip.Addr {
	if !slices.Contains(h.TrustedClients, ev.CallerContext.ClientID) || ev.CallerContext.ClientID == "" {
		return netip.Addr{}
	}
	v := ev.Request.ClientMetadata[IPField]
	if v == "" {
		v = ev.Request.ValidationData[IPField]
	}
	a, err := identity.ParseIP(v)
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// KMSClient is esdk.KMS: kms:Decrypt as a JSON 1.1 call signed with the
// SDK's SigV4 signer (internal/awsjson; the generated KMS client would
// add its tables to the function's cold start, which Cognito's 5 seconds
// include), each call bounded by Timeout.
type KMSClient struct {
	Client  *awsjson.Client
	Timeout time.Duration
}

// NewKMS is a KMSClient on cfg's KMS endpoint.
func NewKMS(cfg aws.Config, timeout time.Duration) KMSClient {
	return KMSClient{Client: awsjson.New(cfg, "kms", "TrentService"), Timeout: timeout}
}

// Decrypt implements esdk.KMS.
func (k KMSClient) Decrypt(ctx context.Context, keyID string, blob []byte, ec map[string]string) ([]byte, error) {
	if k.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, k.Timeout)
		defer cancel()
	}
	in := struct {
		CiphertextBlob    []byte
		KeyId             string
		EncryptionContext map[string]string `json:",omitempty"`
	}{blob, keyID, ec}
	var out struct{ Plaintext []byte }
	if err := k.Client.Call(ctx, "Decrypt", in, &out); err != nil {
		return nil, err
	}
	return out.Plaintext, nil
}

// Build is the triggers' handler for a function (the Trigger part of a
// Lambda function's parts: a lambdaapp.TriggerFunc):
// COGNITO_KMS_KEY_ARN (the custom senders' key; "" in the auth triggers'
// function) and COGNITO_TRUSTED_CLIENTS (app client ids, comma-separated,
// whose callers may pass otpguard:ip).
func Build(getenv func(string) string, cfg aws.Config, rdb redis.UniversalClient, server func() *api.Server, log *slog.Logger) (func(ctx context.Context, event json.RawMessage) (json.RawMessage, error), error) {
	h := &Handler{Server: server, Log: log, KeyARN: getenv("COGNITO_KMS_KEY_ARN"), Timeout: 4500 * time.Millisecond, Redis: rdb}
	for c := range strings.SplitSeq(getenv("COGNITO_TRUSTED_CLIENTS"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			h.TrustedClients = append(h.TrustedClients, c)
		}
	}
	if h.KeyARN != "" {
		if !strings.HasPrefix(h.KeyARN, "arn:") {
			return nil, fmt.Errorf("COGNITO_KMS_KEY_ARN: want a KMS key ARN, got %q", h.KeyARN)
		}
		h.KMS = NewKMS(cfg, 2*time.Second)
	}
	return h.Handle, nil
}
