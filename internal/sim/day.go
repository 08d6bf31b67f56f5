package sim

import (
	"container/heap"
	"time"
)

// runDay runs the queued events in time order until the simulated day
// ends, moving the clock to each.
func (e *engine) runDay() {
	end := Day0.Add(24 * time.Hour)
	for e.q.Len() > 0 {
		ev := heap.Pop(&e.q).(*event)
		if !ev.at.Before(end) {
			continue // the day is over
		}
		if ev.at.After(e.now) {
			e.now = ev.at
		}
		ev.fn()
	}
}

// countUsers adds up, over the people active in the day, those refused
// (at all, and at their first attempt) and the quiet ones.
func (e *engine) countUsers() {
	for _, u := range e.people {
		if !u.active {
			continue
		}
		e.res.Users++
		if u.refused {
			e.res.RefusedOnce++
		}
		if u.refusedFirst {
			e.res.RefusedFirst++
		}
		if u.quiet {
			e.res.QuietUsers++
			if u.refused {
				e.res.QuietRefused++
			}
		}
	}
}
