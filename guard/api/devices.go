package api

import (
	"context"
	"net/http"
	"time"

	"github.com/otpguard/otpguard/guard/identity"
)

// Trusted devices (docs/contract.md §7): a successful login and an approved
// code for the login and reset purposes answer with a device token, as
// member deviceToken and as the cookie og_device; a later login presents
// it (the cookie, an X-Device-Token header or a deviceToken member), and
// the rules filtered on the device tell a known device from a stranger.

// DeviceCookie is the cookie that carries the device token.
const DeviceCookie = "og_device"

// deviceHeader carries a device token for clients that keep no cookies
// (and, on a passthrough login, back to them: its body is the app's).
const deviceHeader = "X-Device-Token"

// maxDeviceToken bounds what is read as a device token.
const maxDeviceToken = 128

// presentedDevice is the device token a request carries: the body's
// deviceToken member, else the X-Device-Token header, else the og_device
// cookie; "" when none (or an oversized one).
func presentedDevice(r *http.Request, body string) string {
	tok := body
	if tok == "" {
		tok = r.Header.Get(deviceHeader)
	}
	if tok == "" {
		if c, err := r.Cookie(DeviceCookie); err == nil {
			tok = c.Value
		}
	}
	if len(tok) > maxDeviceToken {
		return ""
	}
	return tok
}

// deviceToken issues a device token for account at the store's time at,
// keeping the id of the device the request presented a token of (a
// renewal), and sets the cookie. It returns "" when none could be made.
func (s *Server) deviceToken(ctx context.Context, w http.ResponseWriter, account, presented string, at time.Time) string {
	tok, err := s.Guard.DeviceToken(account, presented, at)
	if err != nil {
		s.Log.WarnContext(ctx, "device token", "err", err)
		return ""
	}
	http.SetCookie(w, &http.Cookie{
		Name: DeviceCookie, Value: tok, Path: "/v1", MaxAge: int(s.Config.Devices.TTL / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode,
	})
	return tok
}

// handleRevokeDevices is DELETE /v1/devices/{account}: every device token
// of the account issued until now is untrusted from now on → 204.
func (s *Server) handleRevokeDevices(w http.ResponseWriter, r *http.Request) {
	account, err := identity.ParseAccount(r.PathValue("account"))
	if err != nil {
		invalidRequest(map[string]string{"account": reason(err)}).write(w)
		return
	}
	if err := s.Guard.RevokeDevices(r.Context(), account); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.Log.InfoContext(r.Context(), "revoke devices", "subject", s.Guard.Fingerprint("account", account))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// devicePurpose reports whether an approved code for purpose proves an
// account the way a login does (and so earns a device token).
func devicePurpose(purpose string) bool { return purpose == "login" || purpose == "reset" }
