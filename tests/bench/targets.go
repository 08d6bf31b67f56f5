package main

import (
	"fmt"
	"os"
	"text/tabwriter"
)

// targets prints, from the sections this run measured, each performance
// target beside what the run gave: the guard's calls on their own (every
// host; a Lambda container's only way) and coalesced into pipelines (a
// long-running host: the local server, a backend in process). A row whose
// section did not run is left out.
func (b *bench) targets() {
	type row struct {
		what, target string
		lone, coal   float64
		cf           float64 // the contract floor's figure (0: not measured)
		unit         string
		met          func(float64) bool
	}
	get := func(key string) (result, bool) { r, ok := b.medians[key]; return r, ok }
	var rows []row
	base, okB := get("allowed/32/redis_rate ×3")
	lone, okL := get("allowed/32/otpguard")
	coal, okC := get("allowed/32/otpguard coalesced")
	floor, okF := get("allowed/32/raw Lua (floor)")
	cf, _ := get("allowed/32/contract floor") // (not measured: every figure 0, shown blank)
	if okB && okL && okC && okF {
		rows = append(rows,
			row{"3-rule allowed decision vs redis_rate ×3 (concurrency 32)", "≥ 2.75×", lone.perSec / base.perSec, coal.perSec / base.perSec, cf.perSec / base.perSec, "×", func(v float64) bool { return v >= 2.75 }},
			row{"same, share of the raw-Lua floor", "≥ 80%", 100 * lone.perSec / floor.perSec, 100 * coal.perSec / floor.perSec, 100 * cf.perSec / floor.perSec, "%", func(v float64) bool { return v >= 80 }},
			row{"redis-server CPU per allowed decision vs the floor's (INFO cpu)", "≤ 1.3×", lone.serverCPU / floor.serverCPU, coal.serverCPU / floor.serverCPU, cf.serverCPU / floor.serverCPU, "×", func(v float64) bool { return v <= 1.3 }},
			row{"same, time in commands (INFO commandstats: a script's commands count twice)", "", lone.serverUS / floor.serverUS, coal.serverUS / floor.serverUS, cf.serverUS / floor.serverUS, "×", nil})
	}
	abase, okAB := get("attack/32/redis_rate ×3")
	alone, okAL := get("attack/32/otpguard (deny cache)")
	acoal, okAC := get("attack/32/otpguard (deny cache, coalesced)")
	if okAB && okAL && okAC {
		rows = append(rows, row{"attack mix (95% over the limit), deny cache, vs redis_rate ×3", "≥ 15×", alone.perSec / abase.perSec, acoal.perSec / abase.perSec, 0, "×", func(v float64) bool { return v >= 15 }})
	}
	if len(rows) == 0 && b.httpCPU == 0 {
		return
	}
	fmt.Printf("\ntargets (this run's medians; lone: each call on its own, as in Lambda; coalesced: Options.Coalesce, as the local server; contract floor: the least any decision answering as the contract asks does, each call on its own)\n\n")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\t\tlone\tmet\tcoalesced\tmet\tcontract floor\tmet\t")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, r := range rows {
		m1, m2, m3 := "", "", "" // a row shown beside the targets, not one
		if r.met != nil {
			m1, m2, m3 = yes(r.met(r.lone)), yes(r.met(r.coal)), yes(r.met(r.cf))
		}
		cf := ""
		if r.cf > 0 {
			cf = fmt.Sprintf("%.2f%s", r.cf, r.unit)
		} else {
			m3 = ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f%s\t%s\t%.2f%s\t%s\t%s\t%s\t\n", r.what, r.target, r.lone, r.unit, m1, r.coal, r.unit, m2, cf, m3)
	}
	if b.httpCPU > 0 {
		fmt.Fprintf(tw, "HTTP POST /v1/otp/send, the built server's CPU per request\t≤ 60 µs\t\t\t%.0f µs\t%s\t\t\t\n", b.httpCPU, yes(b.httpCPU <= 60))
		fmt.Fprintf(tw, "same, a plain endpoint's (plainsend: net/http, encoding/json, go-redis, one round trip), beside it\t\t\t\t%.0f µs\t\t\t\t\n", b.httpPlainCPU)
	}
	_ = tw.Flush()
}
