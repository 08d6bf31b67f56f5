package authenv

import (
	"strings"
	"testing"
)

func TestTheUpstreamMustBeOnTheOpenPort(t *testing.T) {
	for _, c := range []struct {
		url, port string
		ok        bool
	}{
		{"https://auth.example.com", "443", true},
		{"https://auth.example.com:8443", "443", false},
		{"http://10.0.1.5:8080/api", "8080", true},
		{"http://10.0.1.5/api", "8080", false},
		{"http://10.0.1.5/api", "80", true},
		{"http://10.0.1.5:9000", "", true}, // locally: no network to match
	} {
		env := map[string]string{"AUTH": "http", "AUTH_UPSTREAM_URL": c.url, "AUTH_UPSTREAM_PORT": c.port}
		_, _, err := Authenticator(func(k string) string { return env[k] }, false, nil)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "AuthUpstreamPort")) {
			t.Errorf("%s with port %q: %v", c.url, c.port, err)
		}
	}
}
