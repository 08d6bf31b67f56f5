// Package console is `otpguard console` (docs/contract.md §11), the operator's
// web console, and the routes it reads and writes on the local server
// (`make run`): the rules with their decisions over time, a subject's
// state with unblock and device revocation, and the config document with
// validation as you type, a diff, "simulate this", apply and rollback.
//
// The local server mounts Routes under /v1/console/: ADMIN_TOKEN may read
// and write, VIEWER_TOKEN only read. The console itself (UI) is a
// separate process on 127.0.0.1 that holds the token and calls the
// server; it serves nothing but its own pages and embedded assets (no
// CDN, no build step), and only to the browser that opened the URL it
// printed (secure.go: a per-start secret, the Host it listens on, changes
// from its own origin as JSON). Config documents are bounded where they
// enter (config.MaxConfigBytes, config.MaxRules), and so is the diff.
package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

// Access is what a request's bearer token allows.
type Access struct{ Read, Write bool }

// Tokens checks the console's bearer tokens: admin reads and writes,
// viewer reads. An empty token matches nothing.
type Tokens struct{ Admin, Viewer string }

// Of is the access r's Authorization header gives.
func (t Tokens) Of(r *http.Request) Access {
	got := []byte(r.Header.Get("Authorization"))
	is := func(tok string) bool { return tok != "" && subtle.ConstantTimeCompare(got, []byte("Bearer "+tok)) == 1 }
	switch {
	case is(t.Admin):
		return Access{Read: true, Write: true}
	case is(t.Viewer):
		return Access{Read: true}
	}
	return Access{}
}

// ConfigFile is the local server's config document: the file GUARD_CONFIG
// names, its history of applied versions (beside it, in <file>.history/),
// and the reload that puts a new document in force.
type ConfigFile struct {
	Path   string
	Reload func(config.Config) error
	// Applied, when set, is told each document put in force (by Apply
	// or by an edit of the file).
	Applied func(doc string, cfg config.Config)

	mu  sync.Mutex
	doc string // the document in force
}

// NewConfigFile is the file at path, whose document doc is in force: it
// becomes the history's latest version (so that the first change can be
// rolled back).
func NewConfigFile(path, doc string, reload func(config.Config) error) *ConfigFile {
	f := &ConfigFile{Path: path, Reload: reload, doc: doc}
	if path != "" {
		if vs, err := f.versions(); err == nil && (len(vs) == 0 || vs[len(vs)-1].ID != DocID(doc)) {
			_ = f.keep(doc)
		}
	}
	return f
}

// Doc is the document in force.
func (f *ConfigFile) Doc() string { f.mu.Lock(); defer f.mu.Unlock(); return f.doc }

// DocID names a document without showing it.
func DocID(doc string) string {
	sum := sha256.Sum256([]byte(doc))
	return fmt.Sprintf("%x", sum[:4])
}

// Apply validates doc, writes it to the file (atomically), keeps a copy
// in the history and reloads it. A document that does not validate
// changes nothing and returns the validation errors.
func (f *ConfigFile) Apply(doc string) error {
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Path == "" {
		return errors.New("the server runs on the default config (no GUARD_CONFIG file): nothing to write")
	}
	if err := f.Reload(cfg); err != nil {
		return err
	}
	if err := writeAtomic(f.Path, doc); err != nil {
		return err
	}
	f.doc = doc
	if f.Applied != nil {
		f.Applied(doc, cfg)
	}
	return f.keep(doc)
}

// Changed is the file's content read again (the watcher): a new valid
// document is reloaded; an invalid one is returned as an error and the
// document in force stays.
func (f *ConfigFile) Changed(doc string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if doc == f.doc {
		return false, nil
	}
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		return false, err
	}
	if err := f.Reload(cfg); err != nil {
		return false, err
	}
	f.doc = doc
	if f.Applied != nil {
		f.Applied(doc, cfg)
	}
	return true, f.keep(doc)
}

// Version is one applied document of the history.
type Version struct {
	N  int       `json:"n"`
	At time.Time `json:"at"`
	ID string    `json:"id"`
	// Who changed it (the IAM principal, from the SSM history); "" locally.
	Who string `json:"who,omitempty"`
}

func (f *ConfigFile) historyDir() string { return f.Path + ".history" }

// keep writes doc as the next version of the history; the caller holds mu.
func (f *ConfigFile) keep(doc string) error {
	if err := os.MkdirAll(f.historyDir(), 0o700); err != nil {
		return err
	}
	vs, err := f.versions()
	if err != nil {
		return err
	}
	n := 1
	if len(vs) > 0 {
		n = vs[len(vs)-1].N + 1
	}
	return os.WriteFile(filepath.Join(f.historyDir(), fmt.Sprintf("%06d.yaml", n)), []byte(doc), 0o600)
}

func (f *ConfigFile) versions() ([]Version, error) {
	ents, err := os.ReadDir(f.historyDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, e := range ents {
		n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".yaml"))
		if err != nil || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.historyDir(), e.Name()))
		if err != nil {
			continue
		}
		out = append(out, Version{N: n, At: info.ModTime().UTC(), ID: DocID(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N < out[j].N })
	return out, nil
}

// History lists the applied versions, oldest first.
func (f *ConfigFile) History() ([]Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.versions()
}

// Version is the document of version n.
func (f *ConfigFile) Version(n int) (string, error) {
	b, err := os.ReadFile(filepath.Join(f.historyDir(), fmt.Sprintf("%06d.yaml", n)))
	return string(b), err
}

func writeAtomic(path, doc string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Routes are the local server's console routes, under /v1/console/.
func Routes(tokens Tokens, file *ConfigFile, stats *Stats, rules func() []guard.Rule) http.Handler {
	mux := http.NewServeMux()
	read := func(h http.HandlerFunc) http.HandlerFunc { return forReaders(tokens, h) }
	write := func(h http.HandlerFunc) http.HandlerFunc { return forWriters(tokens, h) }
	mux.HandleFunc("GET /v1/console/whoami", read(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, tokens.Of(r))
	}))
	mux.HandleFunc("GET /v1/console/config", read(func(w http.ResponseWriter, r *http.Request) {
		h, err := file.History()
		if err != nil {
			writeProblem(w, "internal_error", "the config's history cannot be read")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"document": file.Doc(), "id": DocID(file.Doc()), "file": file.Path != "", "history": h})
	}))
	mux.HandleFunc("GET /v1/console/config/versions/{n}", read(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		doc, rerr := file.Version(n)
		if err != nil || rerr != nil {
			writeProblem(w, "not_found", "no such version")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"n": n, "document": doc, "id": DocID(doc)})
	}))
	// PUT /v1/console/config {"document": "..."}: the document, bounded
	// (413 naming the bound) and validated, is applied.
	mux.HandleFunc("PUT /v1/console/config", write(func(w http.ResponseWriter, r *http.Request) {
		if p := jsonBody(w, r); p != nil {
			p.write(w)
			return
		}
		doc, p := document(r)
		if p != nil {
			p.write(w)
			return
		}
		if err := file.Apply(doc); err != nil {
			configProblem(err).write(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": DocID(doc)})
	}))
	// every other request under /v1/console/: a problem, never net/http's text
	mux.HandleFunc("/v1/console/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, "not_found", "no such console route (or not with this method)")
	})
	mux.HandleFunc("GET /v1/console/stats", read(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, stats.Snapshot(rules(), time.Now()))
	}))
	return mux
}

// forReaders lets through to h the requests with a token that may read
// (ADMIN_TOKEN or VIEWER_TOKEN).
func forReaders(tokens Tokens, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !tokens.Of(r).Read {
			writeProblem(w, "unauthorized", "a bearer token (ADMIN_TOKEN or VIEWER_TOKEN) is required")
			return
		}
		h(w, r)
	}
}

// forWriters lets through to h the requests with a token that may write
// (ADMIN_TOKEN).
func forWriters(tokens Tokens, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch a := tokens.Of(r); {
		case !a.Read:
			writeProblem(w, "unauthorized", "a bearer token (ADMIN_TOKEN) is required")
		case !a.Write:
			writeProblem(w, "forbidden", "VIEWER_TOKEN may read only")
		default:
			h(w, r)
		}
	}
}

// Problems splits a config error into one line per bad field.
func Problems(err error) []string {
	var out []string
	for l := range strings.SplitSeq(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
