package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/otpguard/otpguard/internal/svgchart"
)

//go:embed assets/*
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{"yaml": HighlightYAML}).ParseFS(assets, "assets/*.html"))

// HighlightYAML marks up a YAML document for reading: comments, keys and
// strings in spans (every byte of the document HTML-escaped first).
func HighlightYAML(doc string) template.HTML {
	var b strings.Builder
	for i, line := range strings.Split(doc, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		code, comment, hasComment := strings.Cut(line, "#")
		if hasComment && strings.Count(code, "\"")%2 == 1 {
			code, comment, hasComment = line, "", false // a # inside a string
		}
		esc := template.HTMLEscapeString(code)
		esc = yamlKey.ReplaceAllString(esc, `$1<span class="k">$2</span>:`)
		b.WriteString(esc)
		if hasComment {
			b.WriteString(`<span class="c">#` + template.HTMLEscapeString(comment) + `</span>`)
		}
	}
	return template.HTML(b.String())
}

var yamlKey = regexp.MustCompile(`(^|[{,\s-]\s*)([A-Za-z_][A-Za-z0-9_]*):`)

// UI is the console: its pages, on a Backend (the local server, or a
// deployed stack through the operator's AWS credentials), defended as
// secure.go says.
type UI struct {
	Backend Backend
	// SimUsers is the population of "simulate this"; 0: 2000.
	SimUsers int
	// Secret is this start's secret (NewSecret): the URL the console
	// prints carries it, and every request but that one needs it in the
	// session cookie. Empty refuses every request.
	Secret string

	mu    sync.Mutex
	flash string // the outcome of the last change, for the next page
}

// route is one of the console's routes; a change is a POST.
type route struct {
	method, path string
	handler      func(*UI) http.HandlerFunc
}

var uiRoutes = []route{
	{"GET", "/{$}", func(u *UI) http.HandlerFunc { return u.rules }},
	{"GET", "/subject", func(u *UI) http.HandlerFunc { return u.subject }},
	{"POST", "/subject/unblock", func(u *UI) http.HandlerFunc { return u.unblock }},
	{"POST", "/subject/revoke", func(u *UI) http.HandlerFunc { return u.revoke }},
	{"GET", "/config", func(u *UI) http.HandlerFunc { return u.config }},
	{"POST", "/config/validate", func(u *UI) http.HandlerFunc { return u.validate }},
	{"POST", "/config/apply", func(u *UI) http.HandlerFunc { return u.apply }},
	{"POST", "/config/rollback", func(u *UI) http.HandlerFunc { return u.rollback }},
	{"POST", "/config/simulate", func(u *UI) http.HandlerFunc { return u.simulate }},
}

// Changes lists the console's routes that take a change (POST): each
// needs the session and the console's own origin, and takes JSON only.
func Changes() []string {
	var out []string
	for _, r := range uiRoutes {
		if r.method == "POST" {
			out = append(out, r.path)
		}
	}
	return out
}

// Handler is the console's HTTP handler. Every answer but a page or an
// asset is JSON; every error is problem+json.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.FileServerFS(assets))
	methods := map[string]string{}
	for _, r := range uiRoutes {
		mux.HandleFunc(r.method+" "+r.path, r.handler(u))
		methods[strings.TrimSuffix(r.path, "{$}")] = r.method
	}
	// every other request: a 405 or 404 problem, never net/http's text
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if m, ok := methods[r.URL.Path]; ok {
			w.Header().Set("Allow", m)
			writeProblem(w, "method_not_allowed", "use "+m)
			return
		}
		writeProblem(w, "not_found", "no such page")
	})
	return u.defend(mux)
}

// page is what every page's layout shows.
type page struct {
	Title  string
	Nav    string
	Access Access
	Error  string
	Flash  string
	Data   any
}

// setFlash keeps the outcome of a change for the next page to show (the
// console's own state: no URL can make the console say anything).
func (u *UI) setFlash(msg string) { u.mu.Lock(); u.flash = msg; u.mu.Unlock() }

func (u *UI) takeFlash() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.flash
	u.flash = ""
	return f
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	a, err := u.Backend.Access(r.Context())
	p.Access = a
	if err != nil && p.Error == "" {
		p.Error = err.Error()
	}
	p.Flash = u.takeFlash()
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		writeProblem(w, "internal_error", "the page could not be drawn")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// ruleRow is one rule on the Rules page.
type ruleRow struct {
	RuleStats
	Chart template.HTML
}

func (u *UI) rules(w http.ResponseWriter, r *http.Request) {
	p := page{Title: "Rules", Nav: "rules"}
	stats, err := u.Backend.Stats(r.Context())
	if err != nil {
		p.Error = "the rules' decisions: " + err.Error()
	}
	var rows []ruleRow
	for _, s := range sortedRules(stats) {
		ser := []svgchart.Series{{Label: "allowed"}, {Label: "denied"}, {Label: "challenged"}, {Label: "shadow denied"}}
		labels := make([]string, len(s.Minutes))
		for i, c := range s.Minutes {
			labels[i] = fmt.Sprintf("-%d", 59-i)
			ser[0].Values = append(ser[0].Values, float64(c.Allowed))
			ser[1].Values = append(ser[1].Values, float64(c.Denied))
			ser[2].Values = append(ser[2].Values, float64(c.Challenged))
			ser[3].Values = append(ser[3].Values, float64(c.ShadowDenied))
		}
		chart := svgchart.Chart{XLabels: labels, XTitle: "minutes ago", YTitle: "decisions / min", Series: ser, Width: 520, Height: 180}
		rows = append(rows, ruleRow{RuleStats: s, Chart: template.HTML(chart.SVG())})
	}
	p.Data = rows
	u.render(w, r, "rules.html", p)
}

// dimensions a subject may be looked up by.
var dimensions = []string{"account", "destination", "ip", "ip/24", "ip/16", "ip/56", "ip/48", "asn", "country", "prefix"}

type subjectData struct {
	Dimensions []string
	Dimension  string
	Value      string
	Status     map[string]any
	Found      bool
	Locked     bool
}

func (u *UI) subject(w http.ResponseWriter, r *http.Request) {
	d := subjectData{Dimensions: dimensions, Dimension: r.URL.Query().Get("dimension"), Value: strings.TrimSpace(r.URL.Query().Get("value"))}
	p := page{Title: "Subject", Nav: "subject", Data: &d}
	if d.Dimension != "" && d.Value != "" {
		code, err := u.Backend.Status(r.Context(), d.Dimension, d.Value, &d.Status)
		switch {
		case err != nil:
			p.Error = err.Error()
		case code != 200:
			p.Error = fmt.Sprintf("%d: %v", code, d.Status["detail"])
			if errs, ok := d.Status["errors"].(map[string]any); ok {
				p.Error += fmt.Sprintf(" %v", errs)
			}
		default:
			d.Found = true
			rules, _ := d.Status["rules"].([]any)
			for _, r := range rules {
				if m, _ := r.(map[string]any); m["locked"] == true {
					d.Locked = true
				}
			}
		}
	}
	u.render(w, r, "subject.html", p)
}

// changed answers a change that went through: the page to show next,
// where the flash tells what was done.
func (u *UI) changed(w http.ResponseWriter, flash, next string, more map[string]any) {
	u.setFlash(flash)
	out := map[string]any{"ok": true, "next": next}
	for k, v := range more {
		out[k] = v
	}
	writeJSON(w, http.StatusOK, out)
}

// backendProblem is the answer for a change the backend did not make:
// its status and detail (for a refusal: the server's 403 for a viewer,
// IAM's AccessDenied), or a 502 when it could not be reached.
func backendProblem(what string, code int, err error, out map[string]any) *problem {
	if err != nil {
		return newProblem("upstream_unavailable", what+": "+err.Error())
	}
	p := newProblem("upstream_unavailable", fmt.Sprintf("%s: the server answered %d %v", what, code, out["detail"]))
	switch code {
	case http.StatusUnauthorized:
		p = newProblem("unauthorized", fmt.Sprintf("%s: %v", what, out["detail"]))
	case http.StatusForbidden:
		p = newProblem("forbidden", fmt.Sprintf("%s: %v", what, out["detail"]))
	case http.StatusBadRequest:
		p = newProblem("invalid_request", fmt.Sprintf("%s: %v", what, out["detail"]))
		if errs, ok := out["errors"].(map[string]any); ok {
			p.Errors = map[string]string{}
			for k, v := range errs {
				p.Errors[k] = fmt.Sprint(v)
			}
		}
	}
	return p
}

func subjectPage(dim, value string) string {
	return "/subject?" + url.Values{"dimension": {dim}, "value": {value}}.Encode()
}

func (u *UI) unblock(w http.ResponseWriter, r *http.Request) {
	var in struct{ Dimension, Value string }
	if p := decodeBody(r, &in); p != nil {
		p.write(w)
		return
	}
	var out map[string]any
	code, err := u.Backend.Unblock(r.Context(), in.Dimension, in.Value, &out)
	if err != nil || code != http.StatusNoContent {
		backendProblem("unblock", code, err, out).write(w)
		return
	}
	u.changed(w, "unblocked", subjectPage(in.Dimension, in.Value), nil)
}

func (u *UI) revoke(w http.ResponseWriter, r *http.Request) {
	var in struct{ Value string }
	if p := decodeBody(r, &in); p != nil {
		p.write(w)
		return
	}
	var out map[string]any
	code, err := u.Backend.Revoke(r.Context(), in.Value, &out)
	if err != nil || code != http.StatusNoContent {
		backendProblem("revoke", code, err, out).write(w)
		return
	}
	u.changed(w, "device tokens revoked", subjectPage("account", in.Value), nil)
}
