package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// docs/contract.md §7 over HTTP, on the built server: an ASN rule on a
// database built here, sends settled by the verify that approves their
// code, and trusted-device tokens.

// asnDatabase writes a GeoLite2-ASN-shaped database: AS64500 holds two
// /24s in different /16s, AS64501 a third; nothing else is known.
func asnDatabase(t *testing.T) string {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-ASN", RecordSize: 24, IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	for cidr, asn := range map[string]uint32{"198.51.100.0/24": 64500, "203.0.113.0/24": 64500, "192.0.2.0/24": 64501} {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		rec := mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(asn), "autonomous_system_organization": mmdbtype.String("test")}
		if err := tree.Insert(n, rec); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "asn.mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAnASNRuleWithABuiltDatabase(t *testing.T) {
	db := asnDatabase(t)
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			cfg := "network: {trustedProxies: [127.0.0.0/8], asnDatabase: " + db + "}\n" +
				"rules:\n  - {name: per-asn, action: login, key: [asn], limit: 3, window: 1h}\n"
			s := start(t, b.redisURL, cfg)
			// one AS, two /16s: one counter
			for i, ip := range []string{"198.51.100.1", "203.0.113.7", "198.51.100.200"} {
				if r := s.login(t, fmt.Sprintf("u%d", i), "some password", ip); r.status != 401 {
					t.Fatalf("login %d from %s: %d %s", i, ip, r.status, r.raw)
				}
			}
			if r := s.login(t, "u9", "some password", "203.0.113.99"); r.status != 429 || r.str("rule") != "per-asn" {
				t.Fatalf("a fourth login from AS64500: %d %s", r.status, r.raw)
			}
			if r := s.login(t, "u9", "some password", "192.0.2.1"); r.status != 401 {
				t.Fatalf("another AS: %d %s", r.status, r.raw)
			}
			// addresses the database does not know count by their /16
			for i, ip := range []string{"10.9.1.1", "10.9.200.2", "10.9.3.3"} {
				if r := s.login(t, "u", "some password", ip); r.status != 401 {
					t.Fatalf("unknown address %d: %d %s", i, r.status, r.raw)
				}
			}
			if r := s.login(t, "u", "some password", "10.9.4.4"); r.status != 429 {
				t.Fatalf("a fourth unknown address of 10.9/16: %d %s", r.status, r.raw)
			}
			if r := s.login(t, "u", "some password", "10.8.4.4"); r.status != 401 {
				t.Fatalf("an unknown address of another /16: %d %s", r.status, r.raw)
			}
		})
	}
	// Without a database, a rule keyed on asn does not start.
	s := refused(t, "rules:\n  - {name: per-asn, action: login, key: [asn], limit: 3, window: 1h}\n")
	if !strings.Contains(s, "the asn dimension needs an ASN database: set network.asnDatabase") {
		t.Fatalf("a rule on asn without a database: %s", s)
	}
}

// refused runs the server with a config document it must refuse, and
// returns what it said.
func refused(t *testing.T, config string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "GUARD_ADDR=127.0.0.1:0", "GUARD_CONFIG="+path)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the server started with %q", config)
	}
	return string(out)
}

// A send counts as unverified until the verify that approves its code
// (from another address, in another request) settles it.
func TestAnApprovedCodeSettlesItsSend(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := start(t, b.redisURL, behindProxy+`rules:
  - {name: unverified-per-ip, action: otp.send, key: [ip], count: failures, limit: 2, window: 1h}
`)
			const ip = "198.51.100.40"
			for i := range 6 {
				to := fmt.Sprintf("verified%d@example.com", i)
				if r := s.send(t, "email", to, "login", "X-Forwarded-For", ip); r.status != 202 {
					t.Fatalf("send %d: %d %s", i, r.status, r.raw)
				}
				code := s.lastCode(t, to)
				r := s.post(t, "/v1/otp/verify", map[string]string{"to": to, "purpose": "login", "code": code}, "X-Forwarded-For", "192.0.2.200")
				if r.status != 200 {
					t.Fatalf("verify %d: %d %s", i, r.status, r.raw)
				}
			}
			for i := range 2 {
				if r := s.send(t, "email", fmt.Sprintf("never%d@example.com", i), "login", "X-Forwarded-For", ip); r.status != 202 {
					t.Fatalf("unverified send %d: %d %s", i, r.status, r.raw)
				}
			}
			if r := s.send(t, "email", "never9@example.com", "login", "X-Forwarded-For", ip); r.status != 429 || r.str("rule") != "unverified-per-ip" {
				t.Fatalf("a third unverified send: %d %s", r.status, r.raw)
			}
		})
	}
}

const deviceConfig = behindProxy + `rules:
  - {name: untrusted-per-account, action: login, key: [account], count: failures, limit: 3, window: 1h,
     when: {device: untrusted}, lockout: {initial: 1h, factor: 1, max: 1h}}
  - {name: per-account, action: login, key: [account], count: failures, limit: 50, window: 1h}
`

// A successful login and an approved code for login or reset issue a
// device token, as deviceToken and the og_device cookie; a stranger who
// locks the account's untrusted clients out does not lock the owner's
// device; the token works from the cookie, the header and the body, is
// worth nothing for another account, forged, or after DELETE
// /v1/devices/{account}.
func TestTrustedDevicesOverHTTP(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := start(t, b.redisURL, deviceConfig, "ADMIN_TOKEN=s3cret-admin-token-for-tests")
			const owner = "owner@example.com"
			s.register(t, owner, goodPassword, "198.51.100.1")
			r := s.login(t, owner, goodPassword, "198.51.100.1")
			tok := r.str("deviceToken")
			if r.status != 200 || tok == "" {
				t.Fatalf("login: %d %s", r.status, r.raw)
			}
			cookie := r.header.Get("Set-Cookie")
			for _, attr := range []string{"og_device=" + tok, "Path=/v1", "HttpOnly", "Secure", "SameSite=Lax", "Max-Age=15552000"} {
				if !strings.Contains(cookie, attr) {
					t.Errorf("the cookie %q lacks %s", cookie, attr)
				}
			}
			// A stranger's wrong passwords lock the untrusted out.
			for range 3 {
				s.login(t, owner, "a wrong password entirely", "203.0.113.66")
			}
			if r := s.login(t, owner, goodPassword, "203.0.113.66"); r.status != 429 || r.str("rule") != "untrusted-per-account" {
				t.Fatalf("an untrusted client after the stranger: %d %s", r.status, r.raw)
			}
			// The owner's device, by cookie, header or body, logs in.
			for how, extra := range map[string][]string{
				"cookie": {"Cookie", "og_device=" + tok},
				"header": {"X-Device-Token", tok},
			} {
				r := s.post(t, "/v1/login", map[string]string{"username": owner, "password": goodPassword}, append([]string{"X-Forwarded-For", "198.51.100.1"}, extra...)...)
				if r.status != 200 {
					t.Fatalf("the owner's device by %s: %d %s", how, r.status, r.raw)
				}
			}
			r = s.post(t, "/v1/login", map[string]string{"username": owner, "password": goodPassword, "deviceToken": tok}, "X-Forwarded-For", "198.51.100.1")
			if r.status != 200 {
				t.Fatalf("the owner's device by body: %d %s", r.status, r.raw)
			}
			// Another account's token, a forged one: untrusted.
			s.register(t, "other@example.com", goodPassword, "198.51.100.2")
			other := s.login(t, "other@example.com", goodPassword, "198.51.100.2").str("deviceToken")
			forged := tok[:len(tok)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(tok, "AA")]
			for name, bad := range map[string]string{"another account's": other, "forged": forged, "garbage": "not-a-token"} {
				r := s.post(t, "/v1/login", map[string]string{"username": owner, "password": goodPassword}, "X-Forwarded-For", "198.51.100.1", "X-Device-Token", bad)
				if r.status != 429 {
					t.Errorf("%s token: %d %s, want the untrusted lockout", name, r.status, r.raw)
				}
			}
			// Revoked: untrusted, until a new login (here an approved
			// login code) issues a new token.
			auth := []string{"Authorization", "Bearer s3cret-admin-token-for-tests"}
			if r := s.do(t, http.MethodDelete, "/v1/devices/"+owner, "", auth...); r.status != 204 {
				t.Fatalf("revoke: %d %s", r.status, r.raw)
			}
			if r := s.post(t, "/v1/login", map[string]string{"username": owner, "password": goodPassword}, "X-Forwarded-For", "198.51.100.1", "X-Device-Token", tok); r.status != 429 {
				t.Fatalf("a revoked token: %d %s", r.status, r.raw)
			}
			if r := s.send(t, "email", owner, "login", "X-Forwarded-For", "198.51.100.1"); r.status != 202 {
				t.Fatalf("send: %d %s", r.status, r.raw)
			}
			v := s.post(t, "/v1/otp/verify", map[string]string{"to": owner, "purpose": "login", "code": s.lastCode(t, owner)}, "X-Forwarded-For", "198.51.100.1")
			fresh := v.str("deviceToken")
			if v.status != 200 || fresh == "" || !strings.Contains(v.header.Get("Set-Cookie"), "og_device=") {
				t.Fatalf("an approved login code: %d %s", v.status, v.raw)
			}
			if r := s.post(t, "/v1/login", map[string]string{"username": owner, "password": goodPassword}, "X-Forwarded-For", "198.51.100.1", "X-Device-Token", fresh); r.status != 200 {
				t.Fatalf("the token of the approved code: %d %s", r.status, r.raw)
			}
			// An approved signup code proves a mailbox, not a login: no token.
			if r := s.signup(t, "new@example.com", goodPassword, "198.51.100.3"); r.status != 202 {
				t.Fatal(r.raw)
			}
			if v := s.verify(t, "new@example.com", "signup", s.lastCode(t, "new@example.com")); v.status != 200 || v.str("deviceToken") != "" {
				t.Fatalf("a signup code: %d %s", v.status, v.raw)
			}
			// The backend's routes: subject.device in a decision.
			dec := s.post(t, "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": owner, "device": fresh}}, auth...)
			if dec.status != 200 || dec.str("device") != "trusted" {
				t.Fatalf("a decision with the device: %d %s", dec.status, dec.raw)
			}
			if strings.Contains(s.logs.String(), tok) || strings.Contains(s.logs.String(), fresh) {
				t.Error("a device token is in the logs")
			}
		})
	}
}
