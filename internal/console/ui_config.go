package console

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/internal/sim"
)

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
// server's start-up (config.Parse), each bad field on a line, and
// the diff against the running document.
func (u *UI) validate(w http.ResponseWriter, r *http.Request) {
	doc, p := document(r)
	if p != nil {
		p.write(w)
		return
	}
	_, err := config.Parse([]byte(doc))
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
	if _, err := config.Parse([]byte(doc)); err != nil {
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
	if _, err := config.Parse([]byte(doc)); err != nil {
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
	edited, err := config.Parse([]byte(doc))
	if err != nil {
		configProblem(err).write(w)
		return
	}
	running, _ := u.Backend.Config(r.Context())
	cur, err := config.Parse([]byte(running.Document))
	if err != nil {
		cur = config.Default()
	}
	users := u.SimUsers
	if users == 0 {
		users = 2000
	}
	var results []*sim.Result
	for _, c := range []struct {
		name string
		cfg  config.Config
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
