package api

import "testing"

// BenchmarkDecodeSend is the body of a POST /v1/otp/send read into its
// fields: by decodeBytes (the flat fast path) and by the token decoder
// alone (what every body took before it).
func BenchmarkDecodeSend(b *testing.B) {
	body := []byte(`{"channel":"email","to":"someone@example.com","purpose":"login"}`)
	var in struct{ Channel, To, Purpose, Locale, CaptchaToken string }
	f := fields{"channel": &in.Channel, "to": &in.To, "purpose": &in.Purpose, "locale": &in.Locale, "captchaToken": &in.CaptchaToken}
	for _, c := range []struct {
		name   string
		decode func([]byte, fields) *Problem
	}{{"decodeBytes", decodeBytes}, {"tokens", decodeTokens}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p := c.decode(body, f); p != nil || in.To != "someone@example.com" {
					b.Fatal(p)
				}
			}
		})
	}
}
