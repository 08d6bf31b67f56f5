package apigw_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/otpguard/otpguard/internal/apigw"
)

// FuzzRequest: any event becomes a request with its method, body and
// source address, or an error; the handler adapter never panics and
// always answers with a status.
func FuzzRequest(f *testing.F) {
	f.Add("POST", "/v1/otp/send", "a=b", `{"to":"x"}`, false, "198.51.100.1", "application/json")
	f.Add("GET", "/v1/blocks/email/a%40b.com", "", "", false, "10.0.0.1", "")
	f.Add("POST", "/%zz", "%%", "e30=", true, "", "text/plain")
	f.Add("", "", "", "!!", true, "::1", "x")
	f.Fuzz(func(t *testing.T, method, path, query, body string, b64 bool, ip, ctype string) {
		e := events.APIGatewayV2HTTPRequest{RawPath: path, RawQueryString: query, Body: body, IsBase64Encoded: b64,
			Headers: map[string]string{"content-type": ctype}}
		e.RequestContext.HTTP.Method, e.RequestContext.HTTP.SourceIP = method, ip
		r, err := apigw.Request(context.Background(), e)
		if err == nil {
			got, _ := io.ReadAll(r.Body)
			if !b64 && string(got) != body {
				t.Fatalf("body %q became %q", body, got)
			}
			if r.RemoteAddr != ip || r.Header.Get("Content-Type") != ctype {
				t.Fatalf("%+v", r)
			}
		}
		h := apigw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path})
		}))
		resp, err := h(context.Background(), e)
		if err != nil || resp.StatusCode < 200 || resp.StatusCode > 599 {
			t.Fatalf("%+v %v", resp, err)
		}
	})
}
