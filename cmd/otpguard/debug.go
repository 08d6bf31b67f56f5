package main

import (
	"expvar"
	"net/http"
	"net/http/pprof"
	"runtime"
)

func init() {
	expvar.Publish("goroutines", expvar.Func(func() any { return runtime.NumGoroutine() }))
}

// debugHandler serves expvar (memstats, goroutines) and pprof, on the
// GUARD_DEBUG_ADDR listener only: never on the API's.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/debug/vars", expvar.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/heap", pprof.Index)
	return mux
}
