// Package templates renders the verification messages: per locale, an
// email (subject, HTML and text) and an SMS, each with the code, its
// purpose and its expiry. Each locale is a folder of this package:
//
//	<locale>/strings.yaml      the subject line and the purposes' wording
//	<locale>/email.html.tmpl   html/template
//	<locale>/email.txt.tmpl    text/template
//	<locale>/sms.txt.tmpl      text/template; for the default locale it
//	                           stays within one GSM-7 segment (160 chars)
//
// The templates are plain text with placeholders, not Go templates:
// {{.Code}}, {{.Purpose}} (the worded purpose), {{.Minutes}} (the code's
// lifetime, rounded up) and, in the HTML, {{.Subject}}; in the HTML every
// value is HTML-escaped. No logic, so a template cannot do anything but
// show these values; and no text/template, whose reflection would keep the
// Go linker from dropping unused methods and double the Lambda binaries.
// An unknown placeholder fails at start-up (and in the tests). Adding a
// locale is adding a folder and listing it in [Locales].
package templates

import (
	"embed"
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
)

//go:embed */*.tmpl */strings.yaml
var files embed.FS

// Default is the locale used when a request names none or one we lack.
const Default = "en"

// locales lists the folders, the default first (the matcher's fallback).
var locales = []string{"en", "fr"}

// Locales returns the supported locales, the default first.
func Locales() []string { return append([]string(nil), locales...) }

// Content is a rendered message.
type Content struct {
	// Subject and HTML are empty for SMS.
	Subject, Text, HTML string
}

// Data is what a message says.
type Data struct {
	Code    string
	Purpose string
	TTL     time.Duration
}

type locale struct {
	subject, html, text, sms string
	purposes                 map[string]string
}

// placeholders are the names a template may use.
var placeholders = []string{"{{.Code}}", "{{.Purpose}}", "{{.Minutes}}", "{{.Subject}}"}

var (
	byLocale = map[string]*locale{}
	matcher  language.Matcher
)

func init() {
	var tags []language.Tag
	for _, name := range locales {
		l, err := load(name)
		if err != nil {
			panic(err) // the embedded files are part of the build; tests load them
		}
		byLocale[name] = l
		tags = append(tags, language.MustParse(name))
	}
	matcher = language.NewMatcher(tags)
}

func load(name string) (*locale, error) {
	raw, err := files.ReadFile(name + "/strings.yaml")
	if err != nil {
		return nil, err
	}
	var s struct {
		Subject  string            `yaml:"subject"`
		Purposes map[string]string `yaml:"purposes"`
	}
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("templates: %s/strings.yaml: %w", name, err)
	}
	l := &locale{subject: s.Subject, purposes: s.Purposes}
	for _, f := range []struct {
		dst  *string
		name string
	}{{&l.html, "email.html.tmpl"}, {&l.text, "email.txt.tmpl"}, {&l.sms, "sms.txt.tmpl"}} {
		b, err := files.ReadFile(name + "/" + f.name)
		if err != nil {
			return nil, err
		}
		*f.dst = string(b)
	}
	for file, t := range map[string]string{"strings.yaml subject": l.subject, "email.html.tmpl": l.html, "email.txt.tmpl": l.text, "sms.txt.tmpl": l.sms} {
		rest := t
		for _, p := range placeholders {
			rest = strings.ReplaceAll(rest, p, "")
		}
		if i := strings.Index(rest, "{{"); i >= 0 {
			end := min(len(rest), i+20)
			return nil, fmt.Errorf("templates: %s/%s: unknown placeholder near %q", name, file, rest[i:end])
		}
	}
	return l, nil
}

// ValidLocale reports whether s is a well-formed BCP 47 tag (supported or
// not: an unsupported one falls back to the closest or the default).
func ValidLocale(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 35 {
		return false
	}
	_, err := language.Parse(s)
	return err == nil
}

// Match returns the supported locale closest to the requested one.
func Match(requested string) string {
	if requested == "" {
		return Default
	}
	tag, err := language.Parse(requested)
	if err != nil {
		return Default
	}
	_, i, conf := matcher.Match(tag)
	if conf == language.No {
		return Default
	}
	return locales[i]
}

// Render renders the message of channel ("email" or "sms") in the
// supported locale closest to the requested one.
func Render(channel, requested string, d Data) (Content, error) {
	l := byLocale[Match(requested)]
	purpose := d.Purpose
	if w, ok := l.purposes[d.Purpose]; ok {
		purpose = w
	}
	minutes := strconv.Itoa(int((d.TTL + time.Minute - 1) / time.Minute))
	plain := values{code: d.Code, purpose: purpose, minutes: minutes}
	switch channel {
	case "sms":
		return Content{Text: strings.TrimRight(fill(l.sms, plain), "\n")}, nil
	case "email":
		subject := fill(l.subject, plain)
		escaped := values{code: html.EscapeString(d.Code), purpose: html.EscapeString(purpose), minutes: minutes,
			subject: html.EscapeString(subject), withSubject: true}
		return Content{Subject: subject, Text: fill(l.text, plain), HTML: fill(l.html, escaped)}, nil
	}
	return Content{}, fmt.Errorf("templates: unknown channel %q", channel)
}

// values are what a template's placeholders stand for.
type values struct {
	code, purpose, minutes, subject string
	withSubject                     bool // {{.Subject}} is replaced (the HTML)
}

// fill replaces the placeholders of t ({{.Code}}, {{.Purpose}},
// {{.Minutes}}, {{.Subject}}) with v's in one pass, as a strings.Replacer
// of those pairs would (a value is never scanned again), without building
// one per message.
func fill(t string, v values) string {
	var b strings.Builder
	b.Grow(len(t) + len(v.code) + len(v.purpose) + len(v.subject))
	for {
		i := strings.Index(t, "{{.")
		if i < 0 {
			b.WriteString(t)
			return b.String()
		}
		b.WriteString(t[:i])
		t = t[i:]
		switch {
		case strings.HasPrefix(t, "{{.Code}}"):
			b.WriteString(v.code)
			t = t[len("{{.Code}}"):]
		case strings.HasPrefix(t, "{{.Purpose}}"):
			b.WriteString(v.purpose)
			t = t[len("{{.Purpose}}"):]
		case strings.HasPrefix(t, "{{.Minutes}}"):
			b.WriteString(v.minutes)
			t = t[len("{{.Minutes}}"):]
		case strings.HasPrefix(t, "{{.Subject}}") && v.withSubject:
			b.WriteString(v.subject)
			t = t[len("{{.Subject}}"):]
		default:
			b.WriteString("{{.")
			t = t[len("{{."):]
		}
	}
}
