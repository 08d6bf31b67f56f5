package api

import "net/http"

// route is one endpoint.
type route struct {
	method, path string
	// internal routes are for the app's backend: a bearer ADMIN_TOKEN
	// locally, the IAM authorizer in AWS.
	internal bool
	handler  func(*Server) http.HandlerFunc
}

// routeTable is the whole API surface: the SAM template maps each to one
// function (a test checks the two agree).
var routeTable = []route{
	{http.MethodPost, "/v1/otp/send", false, func(s *Server) http.HandlerFunc { return s.handleSend }},
	{http.MethodPost, "/v1/otp/verify", false, func(s *Server) http.HandlerFunc { return s.handleVerify }},
	{http.MethodPost, "/v1/login", false, func(s *Server) http.HandlerFunc { return s.handleLogin }},
	{http.MethodPost, "/v1/login/challenge", false, func(s *Server) http.HandlerFunc { return s.handleLoginChallenge }},
	{http.MethodPost, "/v1/signup", false, func(s *Server) http.HandlerFunc { return s.handleSignup }},
	{http.MethodGet, "/.well-known/jwks.json", false, func(s *Server) http.HandlerFunc { return s.handleJWKS }},
	{http.MethodGet, "/healthz", false, func(s *Server) http.HandlerFunc { return s.handleHealth }},
	{http.MethodPost, "/v1/decisions", true, func(s *Server) http.HandlerFunc { return s.handleDecision }},
	{http.MethodPost, "/v1/outcomes", true, func(s *Server) http.HandlerFunc { return s.handleOutcome }},
	{http.MethodGet, "/v1/blocks/{dimension}/{value}", true, func(s *Server) http.HandlerFunc { return s.handleBlockStatus }},
	{http.MethodDelete, "/v1/blocks/{dimension}/{value}", true, func(s *Server) http.HandlerFunc { return s.handleUnblock }},
	{http.MethodDelete, "/v1/devices/{account}", true, func(s *Server) http.HandlerFunc { return s.handleRevokeDevices }},
}

// Route is one route of the API, for the deployment's checks.
type Route struct {
	Method, Path string
	Internal     bool
}

// Routes lists the API's routes.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, r := range routeTable {
		out[i] = Route{r.method, r.path, r.internal}
	}
	return out
}

func (s *Server) routes() {
	byPath := map[string][]route{}
	var paths []string
	for _, r := range routeTable {
		if byPath[r.path] == nil {
			paths = append(paths, r.path)
		}
		byPath[r.path] = append(byPath[r.path], r)
	}
	for _, p := range paths {
		s.mux.Handle(p, s.methods(byPath[p]))
	}
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// the path is not repeated: it may hold an identifier
		problem("not_found", "no such route").write(w)
	}))
}

// methods dispatches a path's routes by method (GET also answers HEAD);
// other methods get a 405 problem, and internal routes first check the
// caller.
func (s *Server) methods(rs []route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow string
		for _, rt := range rs {
			if r.Method == rt.method || (rt.method == http.MethodGet && r.Method == http.MethodHead) {
				if rt.internal && (s.Admin == nil || !s.Admin(r)) {
					problem("unauthorized", "the internal routes need the backend's credentials").write(w)
					return
				}
				rt.handler(s)(w, r)
				return
			}
			if allow != "" {
				allow += ", "
			}
			allow += rt.method
		}
		w.Header().Set("Allow", allow)
		problem("method_not_allowed", "use "+allow).write(w)
	})
}
