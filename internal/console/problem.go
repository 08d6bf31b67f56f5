package console

import (
	"encoding/json"
	"net/http"
)

// problem is an error answer in the API's form (RFC 9457 problem
// details with a machine-readable code): every error the console and
// the server's console routes answer.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Errors maps each bad member of a request body to what is wrong
	// with it (invalid_request).
	Errors map[string]string `json:"errors,omitempty"`
	// Problems are an invalid config document's problems, one a line,
	// each naming its field (invalid_config).
	Problems []string `json:"problems,omitempty"`
}

// The codes, with their statuses and titles.
var problemTypes = map[string]struct {
	status int
	title  string
}{
	"invalid_request":        {http.StatusBadRequest, "Invalid request"},
	"invalid_config":         {http.StatusBadRequest, "Invalid config"},
	"unauthorized":           {http.StatusUnauthorized, "Unauthorized"},
	"forbidden":              {http.StatusForbidden, "Forbidden"},
	"cross_origin":           {http.StatusForbidden, "Cross-origin request"},
	"foreign_host":           {http.StatusForbidden, "Foreign host"},
	"not_found":              {http.StatusNotFound, "Not found"},
	"method_not_allowed":     {http.StatusMethodNotAllowed, "Method not allowed"},
	"payload_too_large":      {http.StatusRequestEntityTooLarge, "Payload too large"},
	"unsupported_media_type": {http.StatusUnsupportedMediaType, "Unsupported media type"},
	"upstream_unavailable":   {http.StatusBadGateway, "Upstream unavailable"},
	"internal_error":         {http.StatusInternalServerError, "Internal error"},
}

func newProblem(code, detail string) *problem {
	t, ok := problemTypes[code]
	if !ok {
		code, t = "internal_error", problemTypes["internal_error"]
	}
	return &problem{Type: "urn:otpguard:problem:" + code, Title: t.title, Status: t.status, Detail: detail, Code: code}
}

func (p *problem) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeProblem answers the problem of code with detail.
func writeProblem(w http.ResponseWriter, code, detail string) { newProblem(code, detail).write(w) }

// configProblem is the answer for a document that is not a valid config:
// 413 naming the bound for one over a bound, else 400 with its problems.
func configProblem(err error) *problem {
	if le := limitError(err); le != nil {
		return newProblem("payload_too_large", le.Error())
	}
	p := newProblem("invalid_config", "the document is not a valid config; see problems")
	p.Problems = Problems(err)
	return p
}
