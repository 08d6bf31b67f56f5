package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

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
// deployed stack through the operator's AWS credentials).
type UI struct {
	Backend Backend
	// SimUsers is the population of "simulate this"; 0: 2000.
	SimUsers int
}

// Handler is the console's HTTP handler.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.FileServerFS(assets))
	mux.HandleFunc("GET /{$}", u.rules)
	mux.HandleFunc("GET /subject", u.subject)
	mux.HandleFunc("POST /subject/unblock", u.unblock)
	mux.HandleFunc("POST /subject/revoke", u.revoke)
	mux.HandleFunc("GET /config", u.config)
	mux.HandleFunc("POST /config/validate", u.validate)
	mux.HandleFunc("POST /config/apply", u.apply)
	mux.HandleFunc("POST /config/rollback", u.rollback)
	mux.HandleFunc("POST /config/simulate", u.simulate)
	return securityHeaders(mux)
}

// securityHeaders: the console's pages load nothing from anywhere else.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
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

func (u *UI) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	a, err := u.Backend.Access(r.Context())
	p.Access = a
	if err != nil && p.Error == "" {
		p.Error = err.Error()
	}
	if p.Flash == "" {
		p.Flash = r.URL.Query().Get("flash")
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
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

func (u *UI) unblock(w http.ResponseWriter, r *http.Request) {
	dim, value := r.FormValue("dimension"), r.FormValue("value")
	var out map[string]any
	code, err := u.Backend.Unblock(r.Context(), dim, value, &out)
	flash := "unblocked"
	if err != nil || code != 204 {
		flash = fmt.Sprintf("unblock failed: %d %v %v", code, err, out["detail"])
	}
	http.Redirect(w, r, "/subject?"+url.Values{"dimension": {dim}, "value": {value}, "flash": {flash}}.Encode(), http.StatusSeeOther)
}

func (u *UI) revoke(w http.ResponseWriter, r *http.Request) {
	value := r.FormValue("value")
	var out map[string]any
	code, err := u.Backend.Revoke(r.Context(), value, &out)
	flash := "device tokens revoked"
	if err != nil || code != 204 {
		flash = fmt.Sprintf("revocation failed: %d %v %v", code, err, out["detail"])
	}
	http.Redirect(w, r, "/subject?"+url.Values{"dimension": {"account"}, "value": {value}, "flash": {flash}}.Encode(), http.StatusSeeOther)
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

// validate is the editor's check as you type: the same validation as the
// server's start-up (guard.ParseConfig), each bad field on a line, and
// the diff against the running document.
func (u *UI) validate(w http.ResponseWriter, r *http.Request) {
	doc := r.FormValue("document")
	running, _ := u.Backend.Config(r.Context())
	out := map[string]any{"ok": true, "errors": []string{}, "diff": Diff(running.Document, doc)}
	if _, err := guard.ParseConfig([]byte(doc)); err != nil {
		out["ok"], out["errors"] = false, Problems(err)
	}
	writeJSON(w, http.StatusOK, out)
}

func (u *UI) apply(w http.ResponseWriter, r *http.Request) {
	doc := r.FormValue("document")
	if _, err := guard.ParseConfig([]byte(doc)); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "errors": Problems(err)})
		return
	}
	id, errs, err := u.Backend.Apply(r.Context(), doc)
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadGateway, map[string]any{"ok": false, "errors": []string{err.Error()}})
	case len(errs) > 0:
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "errors": errs})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": id})
	}
}

func (u *UI) rollback(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.FormValue("version"))
	doc, verr := u.Backend.Version(r.Context(), n)
	if err != nil || verr != nil {
		http.Redirect(w, r, "/config?flash="+url.QueryEscape("no such version"), http.StatusSeeOther)
		return
	}
	_, errs, err := u.Backend.Apply(r.Context(), doc)
	flash := fmt.Sprintf("rolled back to version %d", n)
	if err != nil || len(errs) > 0 {
		flash = fmt.Sprintf("rollback failed: %v %v", err, errs)
	}
	http.Redirect(w, r, "/config?flash="+url.QueryEscape(flash), http.StatusSeeOther)
}

// simulate runs the traffic simulator on the edited document beside the
// running one (a small population: seconds, not minutes) and answers the
// table.
func (u *UI) simulate(w http.ResponseWriter, r *http.Request) {
	edited, err := guard.ParseConfig([]byte(r.FormValue("document")))
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "errors": Problems(err)})
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
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "errors": []string{err.Error()}})
			return
		}
		results = append(results, res)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "table": sim.Table(results), "charts": sim.ChartSVGs(results), "users": users})
}

// Diff is a line diff of a and b: unchanged lines with "  ", removed
// with "- ", added with "+ " (longest common subsequence; documents are
// short).
func Diff(a, b string) []string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			out = append(out, "  "+x[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+x[i])
			i++
		default:
			out = append(out, "+ "+y[j])
			j++
		}
	}
	return out
}
