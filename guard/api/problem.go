package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem is an error answer (RFC 9457 problem details) with the
// machine-readable Code the clients branch on. It is the only error type
// the handlers produce; [Problem.write] is the one place it becomes HTTP.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Errors maps each bad field (or "body") to what is wrong with it;
	// invalid_request only.
	Errors map[string]string `json:"errors,omitempty"`
	// RetryAfter (whole seconds, ≥ 1): rate_limited, and delivery_unavailable
	// when the delivery queue is full. Rule: rate_limited only.
	RetryAfter int    `json:"retryAfter,omitempty"`
	Rule       string `json:"rule,omitempty"`
}

// The codes, with their statuses and titles.
var problemTypes = map[string]struct {
	status int
	title  string
}{
	"invalid_request":        {http.StatusBadRequest, "Invalid request"},
	"unsupported_media_type": {http.StatusUnsupportedMediaType, "Unsupported media type"},
	"upstream_unavailable":   {http.StatusServiceUnavailable, "Authenticator unavailable"},
	"payload_too_large":      {http.StatusRequestEntityTooLarge, "Payload too large"},
	"headers_too_large":      {http.StatusRequestHeaderFieldsTooLarge, "Request header fields too large"},
	"request_timeout":        {http.StatusRequestTimeout, "Request timeout"},
	"rate_limited":           {http.StatusTooManyRequests, "Too many requests"},
	"invalid_code":           {http.StatusUnprocessableEntity, "Invalid code"},
	"invalid_credentials":    {http.StatusUnauthorized, "Invalid credentials"},
	"store_unavailable":      {http.StatusServiceUnavailable, "Store unavailable"},
	"delivery_unavailable":   {http.StatusServiceUnavailable, "Delivery unavailable"},
	"not_found":              {http.StatusNotFound, "Not found"},
	"method_not_allowed":     {http.StatusMethodNotAllowed, "Method not allowed"},
	"unauthorized":           {http.StatusUnauthorized, "Unauthorized"},
	"internal_error":         {http.StatusInternalServerError, "Internal error"},
	"not_ready":              {http.StatusServiceUnavailable, "Not ready"},
	"challenge_required":     {http.StatusForbidden, "Challenge required"},
	"captcha_unavailable":    {http.StatusServiceUnavailable, "CAPTCHA provider unavailable"},
	// the client hung up: nobody reads this answer, the log does
	"cancelled": {499, "Client closed request"},
}

// WriteProblem writes the problem answer of code (one of the codes above)
// with detail: for what serves in the API's stead (a function whose init
// failed answers not_ready).
func WriteProblem(w http.ResponseWriter, code, detail string) { problem(code, detail).write(w) }

func problem(code, detail string) *Problem {
	t, ok := problemTypes[code]
	if !ok {
		t = problemTypes["internal_error"]
		code = "internal_error"
	}
	return &Problem{Type: "urn:otpguard:problem:" + code, Title: t.title, Status: t.status, Detail: detail, Code: code}
}

// invalidRequest is a 400 naming the bad fields.
func invalidRequest(errs map[string]string) *Problem {
	p := problem("invalid_request", "the request has invalid fields; see errors")
	p.Errors = errs
	return p
}

func badBody(detail string) *Problem {
	p := problem("invalid_request", detail)
	p.Errors = map[string]string{"body": detail}
	return p
}

// rateLimited is a 429: retry rounds up to whole seconds, at least 1.
func rateLimited(rule string, retry time.Duration) *Problem {
	p := problem("rate_limited", "too many requests; retry later")
	p.RetryAfter = max(1, int((retry+time.Second-1)/time.Second))
	p.Rule = rule
	return p
}

// forbidden is a 403 (the unauthorized code with the status that says the
// caller is known and refused).
func forbidden(detail string) *Problem {
	p := problem("unauthorized", detail)
	p.Status = http.StatusForbidden
	return p
}

func storeUnavailable() *Problem {
	return problem("store_unavailable", "the rate-limit store does not answer; nothing was sent or approved")
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

func (p *Problem) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	switch {
	case p.RetryAfter > 0:
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	case p.Status == http.StatusServiceUnavailable:
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeProblemBody writes a problem answer whose body has members beyond
// Problem's (challenge_required).
func writeProblemBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeBody(w http.ResponseWriter, v any) {
	_ = json.NewEncoder(w).Encode(v)
}
