package api

import "net/http"

// route is one public endpoint.
type route struct {
	method, path string
	handler      func(*Server) http.HandlerFunc
}

// routeTable is the whole API surface: the SAM template maps each to one
// function (a test checks the two agree).
var routeTable = []route{
	{http.MethodPost, "/v1/otp/send", func(s *Server) http.HandlerFunc { return s.handleSend }},
	{http.MethodPost, "/v1/otp/verify", func(s *Server) http.HandlerFunc { return s.handleVerify }},
	{http.MethodGet, "/.well-known/jwks.json", func(s *Server) http.HandlerFunc { return s.handleJWKS }},
	{http.MethodGet, "/healthz", func(s *Server) http.HandlerFunc { return s.handleHealth }},
}

// Routes lists the API's routes as "METHOD /path".
func Routes() []string {
	out := make([]string, len(routeTable))
	for i, r := range routeTable {
		out[i] = r.method + " " + r.path
	}
	return out
}

func (s *Server) routes() {
	for _, r := range routeTable {
		s.mux.Handle(r.path, only(r.method, r.handler(s)))
	}
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
