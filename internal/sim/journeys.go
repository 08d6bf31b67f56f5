package sim

import (
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/message"
)

func (e *engine) login(p *person, typo bool, tries int, began time.Time) bool {
	ip := p.ip
	if e.rng.Float64() < 0.05 {
		ip = e.roamingIP()
	}
	return e.loginFrom(p, ip, typo, tries, began)
}

// loginFrom is a login of p's from ip (with a typo first when typo).
func (e *engine) loginFrom(p *person, ip string, typo bool, tries int, began time.Time) bool {
	first := e.touch(p)
	pass := p.pass
	if typo {
		pass = p.pass + "x"
	}
	r := e.post("/v1/login", ip, p.device, map[string]string{"username": p.email, "password": pass})
	if !e.warm() {
		e.res.Logins++
	}
	switch {
	case r.guarded():
		e.refused(p, first, r, tries, began, func(b time.Time) { e.loginFrom(p, ip, typo, tries+1, b) })
		return false
	case typo && !p.quiet:
		e.at(e.now.Add(8*time.Second), func() { e.loginFrom(p, ip, false, tries, began) })
	case typo:
		// (a household's typos: mistype goes on)
	case r.status == 200 && r.str("status") == "challenge":
		// a step-up code went to the user's mailbox: most enter it
		counted := !e.warm()
		if counted {
			e.res.Challenged++
			if p.attacked {
				e.res.ChallengedAttacked++
			}
		}
		session := r.str("session")
		if e.rng.Float64() < 0.05 {
			if counted {
				e.res.Abandoned++
				e.res.GaveUp++
			}
			return false
		}
		e.at(e.now.Add(time.Duration(20+e.rng.IntN(60))*time.Second), func() {
			c := e.post("/v1/login/challenge", ip, "", map[string]string{"session": session, "code": e.codes[p.email]})
			if c.status == 200 {
				if counted {
					e.res.Passed++
				}
				p.keep(c)
				e.done(began)
			}
		})
	default:
		p.keep(r)
		e.done(began)
	}
	return r.status == 200
}

func (e *engine) otp(p *person, ch message.Channel, resend bool, tries int, began time.Time) {
	first := e.touch(p)
	to := p.email
	if ch == message.SMS {
		to = p.phone
	}
	r := e.post("/v1/otp/send", p.ip, "", map[string]string{"channel": string(ch), "to": to, "purpose": "login"})
	if r.guarded() {
		e.refused(p, first, r, tries, began, func(b time.Time) { e.otp(p, ch, resend, tries+1, b) })
		return
	}
	if resend {
		// "I did not get it": a second send 45 seconds later.
		e.at(e.now.Add(45*time.Second), func() { e.otp(p, ch, false, tries, began) })
		return
	}
	if e.rng.Float64() < 0.05 {
		return // never entered
	}
	e.at(e.now.Add(time.Duration(15+e.rng.IntN(45))*time.Second), func() { e.verify(p, to, e.rng.Float64() < 0.03, 0, began) })
}

func (e *engine) verify(p *person, to string, typo bool, tries int, began time.Time) {
	code := e.codes[to]
	if typo {
		code = fmt.Sprintf("%06d", (atoi(code)+1)%1000000)
	}
	r := e.post("/v1/otp/verify", p.ip, p.device, map[string]string{"to": to, "purpose": "login", "code": code})
	switch {
	case r.guarded():
		e.refused(p, false, r, tries, began, func(b time.Time) { e.verify(p, to, false, tries+1, b) })
	case typo:
		e.at(e.now.Add(10*time.Second), func() { e.verify(p, to, false, tries, began) })
	default:
		if to == p.email {
			p.keep(r) // a token for the account the address names
		}
		e.done(began)
	}
}

func (e *engine) signup(p *person, tries int, began time.Time) {
	first := e.touch(p)
	r := e.post("/v1/signup", p.ip, "", map[string]string{"email": p.email, "password": p.pass})
	if r.guarded() {
		e.refused(p, first, r, tries, began, func(b time.Time) { e.signup(p, tries+1, b) })
		return
	}
	e.done(began)
	e.at(e.now.Add(30*time.Second), func() { e.login(p, false, 0, time.Time{}) })
}
