package api

import "net/http"

// routes is the whole API surface.
func (s *Server) routes() {
	s.mux.Handle("/v1/otp/send", only(http.MethodPost, s.handleSend))
	s.mux.Handle("/v1/otp/verify", only(http.MethodPost, s.handleVerify))
	s.mux.Handle("/.well-known/jwks.json", only(http.MethodGet, s.handleJWKS))
	s.mux.Handle("/healthz", only(http.MethodGet, s.handleHealth))
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem("not_found", "no such route: "+r.Method+" "+r.URL.Path).write(w)
	}))
}

// only answers other methods than method with a 405 problem.
func only(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			problem("method_not_allowed", "use "+method).write(w)
			return
		}
		h(w, r)
	})
}
