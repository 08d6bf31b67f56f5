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

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/internal/sim"
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

// ConfigData is the running document and its history.
type ConfigData struct {
	Document string    `json:"document"`
	ID       string    `json:"id"`
	File     bool      `json:"file"` // it can be changed (a GUARD_CONFIG file, an SSM parameter)
	Where    string    `json:"where"`
	History  []Version `json:"history"`
}

func (u *UI) config(w http.ResponseWriter, r *http.Request) {
	d, err := u.Backend.Config(r.Context())
	p := page{Title: "Config", Nav: "config", Data: &d}
	if err != nil {
		p.Error = "the running config: " + err.Error()
	}
	u.render(w, r, "config.html", p)
}

// document reads a change's {"document": "..."}.
func document(r *http.Request) (string, *problem) {
	var in struct {
		Document *string `json:"document"`
	}
	if p := decodeBody(r, &in); p != nil {
		return "", p
	}
	if in.Document == nil {
		p := newProblem("invalid_request", "the body has no document")
		p.Errors = map[string]string{"document": "is required"}
		return "", p
	}
	return *in.Document, nil
}

// validate is the editor's check as you type: the same validation as the
// server's start-up (guard.ParseConfig), each bad field on a line, and
// the diff against the running document.
func (u *UI) validate(w http.ResponseWriter, r *http.Request) {
	doc, p := document(r)
	if p != nil {
		p.write(w)
		return
	}
	_, err := guard.ParseConfig([]byte(doc))
	if limitError(err) != nil {
		configProblem(err).write(w)
		return
	}
	running, _ := u.Backend.Config(r.Context())
	out := map[string]any{"ok": true, "problems": []string{}, "diff": Diff(running.Document, doc)}
	if err != nil {
		out["ok"], out["problems"] = false, Problems(err)
	}
	writeJSON(w, http.StatusOK, out)
}

func (u *UI) apply(w http.ResponseWriter, r *http.Request) {
	doc, p := document(r)
	if p != nil {
		p.write(w)
		return
	}
	if _, err := guard.ParseConfig([]byte(doc)); err != nil {
		configProblem(err).write(w)
		return
	}
	id, errs, err := u.Backend.Apply(r.Context(), doc)
	switch {
	case err != nil:
		writeProblem(w, "upstream_unavailable", "apply: "+err.Error())
	case len(errs) > 0:
		p := newProblem("invalid_config", "the server did not apply the document; see problems")
		p.Problems = errs
		p.write(w)
	default:
		u.changed(w, "applied "+id, "/config", map[string]any{"id": id})
	}
}

func (u *UI) rollback(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Version *int `json:"version"`
	}
	if p := decodeBody(r, &in); p != nil {
		p.write(w)
		return
	}
	if in.Version == nil {
		p := newProblem("invalid_request", "the body has no version")
		p.Errors = map[string]string{"version": "is required"}
		p.write(w)
		return
	}
	n := *in.Version
	doc, err := u.Backend.Version(r.Context(), n)
	if err != nil {
		writeProblem(w, "not_found", fmt.Sprintf("no version %d", n))
		return
	}
	if _, err := guard.ParseConfig([]byte(doc)); err != nil {
		p := configProblem(err)
		p.Detail = fmt.Sprintf("version %d is not a valid config (today's validation): %s", n, p.Detail)
		p.write(w)
		return
	}
	_, errs, err := u.Backend.Apply(r.Context(), doc)
	switch {
	case err != nil:
		writeProblem(w, "upstream_unavailable", "rollback: "+err.Error())
	case len(errs) > 0:
		p := newProblem("invalid_config", "the server did not apply the version; see problems")
		p.Problems = errs
		p.write(w)
	default:
		u.changed(w, fmt.Sprintf("rolled back to version %d", n), "/config", nil)
	}
}

// simulate runs the traffic simulator on the edited document beside the
// running one (a small population: seconds, not minutes) and answers the
// table.
func (u *UI) simulate(w http.ResponseWriter, r *http.Request) {
	doc, p := document(r)
	if p != nil {
		p.write(w)
		return
	}
	edited, err := guard.ParseConfig([]byte(doc))
	if err != nil {
		configProblem(err).write(w)
		return
	}
	running, _ := u.Backend.Config(r.Context())
	cur, err := guard.ParseConfig([]byte(running.Document))
	if err != nil {
		cur = guard.DefaultConfig()
	}
	users := u.SimUsers
	if users == 0 {
		users = 2000
	}
	var results []*sim.Result
	for _, c := range []struct {
		name string
		cfg  guard.Config
	}{{"running", cur}, {"edited", edited}} {
		res, err := sim.Run(r.Context(), c.name, c.cfg, sim.Options{Seed: 1, Users: users, Scale: float64(users) / 100_000})
		if err != nil {
			writeProblem(w, "internal_error", "simulate: "+err.Error())
			return
		}
		results = append(results, res)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "table": sim.Table(results), "charts": sim.ChartSVGs(results), "users": users})
}

// maxDiffCells bounds the longest-common-subsequence table of Diff.
const maxDiffCells = 1 << 20

// Diff is a line diff of a and b: unchanged lines with "  ", removed
// with "- ", added with "+ ". The lines both share at the start and at
// the end are set aside; what changed between them is diffed by longest
// common subsequence when its table has at most maxDiffCells cells, and
// shown whole (removed, then added) when it would have more: time and
// memory stay linear in the documents, whatever they are.
func Diff(a, b string) []string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	head := 0
	for head < len(x) && head < len(y) && x[head] == y[head] {
		head++
	}
	tail := 0
	for tail < len(x)-head && tail < len(y)-head && x[len(x)-1-tail] == y[len(y)-1-tail] {
		tail++
	}
	out := make([]string, 0, len(x)+len(y)-head-tail)
	for _, l := range x[:head] {
		out = append(out, "  "+l)
	}
	xm, ym := x[head:len(x)-tail], y[head:len(y)-tail]
	if (len(xm)+1)*(len(ym)+1) <= maxDiffCells {
		out = lcsDiff(out, xm, ym)
	} else {
		for _, l := range xm {
			out = append(out, "- "+l)
		}
		for _, l := range ym {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range x[len(x)-tail:] {
		out = append(out, "  "+l)
	}
	return out
}

// lcsDiff appends the diff of x and y by longest common subsequence.
func lcsDiff(out, x, y []string) []string {
	n, m := len(x), len(y)
	w := m + 1
	lcs := make([]int32, (n+1)*w) // lcs[i*w+j]: of x[i:] and y[j:]
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			out = append(out, "  "+x[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			out = append(out, "- "+x[i])
			i++
		default:
			out = append(out, "+ "+y[j])
			j++
		}
	}
	return out
}
