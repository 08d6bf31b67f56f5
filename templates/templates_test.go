package templates

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestRenderGolden(t *testing.T) {
	d := Data{Code: "042917", Purpose: "signup", TTL: 10 * time.Minute}
	for _, loc := range Locales() {
		for _, ch := range []string{"email", "sms"} {
			t.Run(loc+"-"+ch, func(t *testing.T) {
				c, err := Render(ch, loc, d)
				if err != nil {
					t.Fatal(err)
				}
				got := "subject: " + c.Subject + "\n--- text\n" + c.Text + "\n--- html\n" + c.HTML
				golden := filepath.Join("testdata", loc+"-"+ch+".golden")
				if *update {
					if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./templates -update to create it)", err)
				}
				if got != string(want) {
					t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", golden, got, want)
				}
			})
		}
	}
}

// gsm7 is the GSM 03.38 basic character set; a message of these
// characters up to 160 long is one SMS segment.
const gsm7 = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"

func TestSMSOneSegmentInDefaultLocale(t *testing.T) {
	for _, purpose := range []string{"signup", "login", "reset", "verify", "a-custom-purpose-name"} {
		c, err := Render("sms", Default, Data{Code: "0123456789", Purpose: purpose, TTL: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range c.Text {
			if !strings.ContainsRune(gsm7, r) {
				t.Errorf("%q: %q is not GSM-7; the SMS would need UCS-2 (70 chars a segment)", c.Text, r)
			}
			n++
		}
		if n > 160 {
			t.Errorf("%q: %d characters, more than one segment", c.Text, n)
		}
	}
}

func TestLocaleMatching(t *testing.T) {
	for in, want := range map[string]string{"": "en", "fr": "fr", "fr-CA": "fr", "en-GB": "en", "de": "en", "zz-bogus": "en"} {
		if got := Match(in); got != want {
			t.Errorf("Match(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"": true, "fr-CA": true, "en": true, "not a tag": false, "<script>": false, strings.Repeat("a", 40): false} {
		if got := ValidLocale(in); got != want {
			t.Errorf("ValidLocale(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestHTMLEscapesItsInputs(t *testing.T) {
	c, err := Render("email", "en", Data{Code: "123456", Purpose: "<b>x</b>", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.HTML, "<b>x</b>") || !strings.Contains(c.HTML, "&lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("purpose not escaped in HTML:\n%s", c.HTML)
	}
}

func TestUnknownChannel(t *testing.T) {
	if _, err := Render("fax", "en", Data{Code: "1"}); err == nil {
		t.Error("Render accepted channel fax")
	}
}

// TestFillIsTheReplacerItReplaced: fill answers what a strings.Replacer
// of the same pairs answers, on every template of every locale and on
// crafted texts (placeholders side by side, broken ones, values holding
// placeholders, which are never scanned again).
func TestFillIsTheReplacerItReplaced(t *testing.T) {
	v := values{code: "12{{.Purpose}}34", purpose: "log {{.Code}} in", minutes: "10", subject: "S <&> {{.Minutes}}", withSubject: true}
	replacer := func(v values) *strings.Replacer {
		pairs := []string{"{{.Code}}", v.code, "{{.Purpose}}", v.purpose, "{{.Minutes}}", v.minutes}
		if v.withSubject {
			pairs = append(pairs, "{{.Subject}}", v.subject)
		}
		return strings.NewReplacer(pairs...)
	}
	texts := []string{"", "{{.", "{{.Code", "{{.Code}}{{.Code}}", "a{{.Purpose}}b{{.Minutes}}c{{.Subject}}d", "{{{{.Code}}}}", "{{.code}} {{ .Code }}", "x{{.Subject}}"}
	for _, name := range locales {
		l := byLocale[name]
		texts = append(texts, l.subject, l.html, l.text, l.sms)
	}
	for _, with := range []bool{false, true} {
		v.withSubject = with
		r := replacer(v)
		for _, text := range texts {
			if got, want := fill(text, v), r.Replace(text); got != want {
				t.Errorf("fill(%q, subject %v) = %q, want %q", text, with, got, want)
			}
		}
	}
}
