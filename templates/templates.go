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
// Templates see .Code, .Purpose (the worded purpose), .Minutes (the
// code's lifetime, rounded up) and, for the HTML, .Subject. Adding a
// locale is adding a folder and listing it in [Locales].
package templates

import (
	"bytes"
	"embed"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
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
	subject  *texttemplate.Template
	purposes map[string]string
	html     *htmltemplate.Template
	text     *texttemplate.Template
	sms      *texttemplate.Template
}

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
	l := &locale{purposes: s.Purposes}
	if l.subject, err = texttemplate.New("subject").Option("missingkey=error").Parse(s.Subject); err != nil {
		return nil, fmt.Errorf("templates: %s subject: %w", name, err)
	}
	if l.html, err = htmltemplate.ParseFS(files, name+"/email.html.tmpl"); err != nil {
		return nil, err
	}
	if l.text, err = texttemplate.ParseFS(files, name+"/email.txt.tmpl"); err != nil {
		return nil, err
	}
	if l.sms, err = texttemplate.ParseFS(files, name+"/sms.txt.tmpl"); err != nil {
		return nil, err
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
	v := struct {
		Code, Purpose, Subject string
		Minutes                int
	}{Code: d.Code, Purpose: d.Purpose, Minutes: int((d.TTL + time.Minute - 1) / time.Minute)}
	if w, ok := l.purposes[d.Purpose]; ok {
		v.Purpose = w
	}
	var out Content
	switch channel {
	case "sms":
		text, err := exec(l.sms, v)
		if err != nil {
			return Content{}, err
		}
		out.Text = strings.TrimRight(text, "\n")
	case "email":
		subject, err := exec(l.subject, v)
		if err != nil {
			return Content{}, err
		}
		v.Subject = subject
		if out.Text, err = exec(l.text, v); err != nil {
			return Content{}, err
		}
		var b bytes.Buffer
		if err := l.html.Execute(&b, v); err != nil {
			return Content{}, fmt.Errorf("render email html: %w", err)
		}
		out.Subject, out.HTML = subject, b.String()
	default:
		return Content{}, fmt.Errorf("templates: unknown channel %q", channel)
	}
	return out, nil
}

func exec(t *texttemplate.Template, v any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return b.String(), nil
}
