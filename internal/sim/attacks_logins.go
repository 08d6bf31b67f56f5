package sim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard/identity"
)

// stuffing: a leaked list of (account, password) pairs, 2% of them real
// users' real passwords, each tried once, from 3000 addresses in 300 /16s
// over span. The adaptive attacker dilutes failure ratios: before each
// pair it logs in to one of its own 30 accounts from the same address
// (a success, from a client that keeps no device token). The retrying
// one tries each pair a step-up challenged again (see retryPair), and
// dilutes its retries the same way.
func (e *engine) stuffing(name string, pairs int, span time.Duration, from time.Time, adaptive bool) {
	st := e.res.Attacks[name]
	st.Targets = pairs
	src := e.sources(3000, 300)
	var own []string
	if adaptive || name == StuffRetry {
		for i := range 30 {
			a := fmt.Sprintf("mule%d-%d@example.com", e.attackers, i)
			e.accounts[a] = "mule password " + strconv.Itoa(i)
			own = append(own, a)
		}
	}
	for i := range pairs {
		acct, pass := fmt.Sprintf("leaked%d-%s@example.com", i, name[:6]), "hunter2-"+strconv.Itoa(i)
		if e.rng.Float64() < 0.02 && len(e.people) > 0 {
			p := e.people[e.rng.IntN(len(e.people))]
			p.attacked = true
			acct, pass = p.email, p.pass
		}
		at := from.Add(time.Duration(e.rng.Int64N(int64(span))))
		ip := src[i%len(src)]
		e.at(at, func() {
			if e.stuffPair(st, own, adaptive, ip, acct, pass) && name == StuffRetry {
				e.retryPair(st, own, ip, acct, pass, 3)
			}
		})
	}
}

// retryPair asks again for a pair a step-up challenged, a minute later,
// from another address of the same network (the network the challenge
// saw), up to tries times: a challenge that committed what it flagged
// lets the second try in.
func (e *engine) retryPair(st *AttackStats, own []string, ip, acct, pass string, tries int) {
	if tries == 0 {
		return
	}
	e.at(e.now.Add(time.Minute), func() {
		again := fmt.Sprintf("%s.%d.%d", netOf(ip), e.rng.IntN(256), 1+e.rng.IntN(254))
		if strings.Contains(ip, ":") {
			again = ip
		}
		if e.stuffPair(st, own, true, again, acct, pass) {
			e.retryPair(st, own, ip, acct, pass, tries-1)
		}
	})
}

func mustAccount(s string) string { a, _ := identity.ParseAccount(s); return a }

// stuffPair is one leaked pair tried from ip, after (when dilute) a
// success on one of the attacker's own accounts from the same address. A
// right password answered with a step-up challenge is lost to the
// attacker (the code goes to the account's owner), unless it tries again:
// it reports a challenge. A pair already taken is not tried again.
func (e *engine) stuffPair(st *AttackStats, own []string, dilute bool, ip, acct, pass string) (challenged bool) {
	if dilute {
		m := own[e.rng.IntN(len(own))]
		e.admitted(st, ip, e.post("/v1/login", ip, "", map[string]string{"username": m, "password": e.accounts[mustAccount(m)]}))
	}
	if e.takenOver[acct] {
		return false
	}
	r := e.attack(st, "/v1/login", ip, map[string]string{"username": acct, "password": pass})
	switch {
	case r.status == http.StatusOK && r.str("status") == "challenge":
		st.Challenged++
		return true
	case taken(r):
		e.takenOver[acct] = true
		st.Succeeded++
	}
	return false
}

// rotating: stuffing through residential proxies by an attacker who
// reads every answer. Each pair is tried from a network where real users
// live (the big ISPs' /16s and the carriers'); a pair the step-up
// challenges (its password is right) is tried again from the next such
// network, up to 10, hoping for the owner's own; every address tries at
// most 5 pairs an hour and every /16 sees one of the attacker's own
// accounts log in for every pair (the failure ratios stay low): within
// each rule's budget.
func (e *engine) rotating(pairs int, span time.Duration, from time.Time) {
	st := e.res.Attacks[StuffRotate]
	st.Targets = pairs
	nets := make([]string, 0, ispNets+mobileCarrier)
	for k := range ispNets {
		nets = append(nets, fmt.Sprintf("%d.%d", 60+k/2, 10+(k*37)%200))
	}
	for c := range mobileCarrier {
		nets = append(nets, fmt.Sprintf("172.%d", 56+c))
	}
	var own []string
	for i := range 30 {
		a := fmt.Sprintf("rotating-mule%d@example.com", i)
		e.accounts[a] = "mule password " + strconv.Itoa(i)
		own = append(own, a)
	}
	addr := func(net string) string {
		if strings.HasPrefix(net, "172.") {
			return fmt.Sprintf("%s.10.%d", net, 1+e.rng.IntN(64)) // the carrier's NAT
		}
		return fmt.Sprintf("%s.%d.%d", net, e.rng.IntN(256), 1+e.rng.IntN(254))
	}
	var try func(acct, pass string, k, left int)
	try = func(acct, pass string, k, left int) {
		net := nets[k%len(nets)]
		if e.stuffPair(st, own, true, addr(net), acct, pass) && left > 1 {
			e.at(e.now.Add(time.Duration(1+e.rng.IntN(10))*time.Minute), func() { try(acct, pass, k+1+e.rng.IntN(3), left-1) })
		}
	}
	for i := range pairs {
		acct, pass := fmt.Sprintf("leaked%d-rota@example.com", i), "hunter2-"+strconv.Itoa(i)
		if e.rng.Float64() < 0.02 && len(e.people) > 0 {
			p := e.people[e.rng.IntN(len(e.people))]
			p.attacked = true
			acct, pass = p.email, p.pass
		}
		at := from.Add(time.Duration(e.rng.Int64N(int64(span))))
		k := e.rng.IntN(len(nets))
		e.at(at, func() { try(acct, pass, k, 10) })
	}
}

// residential: stuffing through a residential-proxy network: 3000
// addresses in 300 networks where real users live (the ISPs' /16s, the
// carriers' NATs, other home networks), a few pairs each, and before
// every other pair a success on one of its own 30 accounts from the same
// address (diluting the networks' failure ratios with the users' own
// successes). A right password that is answered with a step-up challenge
// is lost to it: the code goes to the account's owner.
func (e *engine) residential(pairs int, span time.Duration, from time.Time) {
	st := e.res.Attacks[StuffResi]
	st.Targets = pairs
	nets := make([]string, 300)
	for i := range nets {
		switch {
		case i < ispNets:
			k := i
			nets[i] = fmt.Sprintf("%d.%d", 60+k/2, 10+(k*37)%200)
		case i < ispNets+mobileCarrier:
			nets[i] = fmt.Sprintf("172.%d", 56+i-ispNets)
		default:
			nets[i] = fmt.Sprintf("%d.%d", 120+e.rng.IntN(20), e.rng.IntN(256))
		}
	}
	src := make([]string, 3000)
	for i := range src {
		src[i] = fmt.Sprintf("%s.%d.%d", nets[i%len(nets)], e.rng.IntN(256), 1+e.rng.IntN(254))
	}
	var own []string
	for i := range 30 {
		a := fmt.Sprintf("proxy-mule%d@example.com", i)
		e.accounts[a] = "mule password " + strconv.Itoa(i)
		own = append(own, a)
	}
	for i := range pairs {
		acct, pass := fmt.Sprintf("leaked%d-resi@example.com", i), "hunter2-"+strconv.Itoa(i)
		if e.rng.Float64() < 0.02 && len(e.people) > 0 {
			p := e.people[e.rng.IntN(len(e.people))]
			p.attacked = true
			acct, pass = p.email, p.pass
		}
		at := from.Add(time.Duration(e.rng.Int64N(int64(span))))
		ip := src[e.rng.IntN(len(src))]
		dilute := i%2 == 0
		e.at(at, func() {
			e.stuffPair(st, own, dilute, ip, acct, pass)
		})
	}
}

// spraying: one common password against every known account, from 30
// addresses in 10 /16s, over the day.
func (e *engine) spraying() {
	st := e.res.Attacks[Spraying]
	src := e.sources(30, 10)
	var accounts []string
	for _, p := range e.people {
		if p.pass != "" && e.accounts[p.account] != "" {
			accounts = append(accounts, p.email)
		}
	}
	st.Targets = len(accounts)
	for i, acct := range accounts {
		at := Day0.Add(time.Duration(i) * (24 * time.Hour) / time.Duration(len(accounts)))
		ip := src[i%len(src)]
		e.at(at, func() {
			r := e.attack(st, "/v1/login", ip, map[string]string{"username": acct, "password": sprayPassword})
			switch {
			case taken(r):
				st.Succeeded++
			case r.str("status") == "challenge":
				st.Challenged++
			}
		})
	}
}

// lockoutDoS: wrong passwords against victims' accounts, from 500
// addresses, from 8:00 to 22:00 (about 30 an hour per account), to lock
// their owners out. Half the victims' browsers hold a device token and
// log in once, between 9:00 and 21:00, from their usual address; the
// other half keep no token and log in from a network their account never
// used (a trip): they get in at once, or by the step-up code they are
// sent (most answer it; whoever does not is not counted in).
func (e *engine) lockoutDoS(victims, attempts int) {
	st := e.res.Attacks[LockoutDoS]
	src := e.sources(500, 50)
	withToken, without := e.lockoutVictims(victims)
	vs := append(slices.Clone(withToken), without...)
	if len(vs) == 0 {
		return
	}
	for _, v := range vs {
		v.attacked = true
	}
	st.Targets = len(vs)
	for i := range attempts {
		v := vs[i%len(vs)]
		at := Day0.Add(8*time.Hour + time.Duration(e.rng.Int64N(int64(14*time.Hour))))
		ip := src[e.rng.IntN(len(src))]
		e.at(at, func() {
			e.attack(st, "/v1/login", ip, map[string]string{"username": v.email, "password": "not the password " + strconv.Itoa(i)})
		})
	}
	for _, v := range withToken {
		at := Day0.Add(9*time.Hour + time.Duration(e.rng.Int64N(int64(12*time.Hour))))
		e.at(at, func() {
			e.res.Victims++
			r := e.post("/v1/login", v.ip, v.device, map[string]string{"username": v.email, "password": v.pass})
			if taken(r) {
				e.res.VictimsFirstTry++
			} else {
				st.Succeeded++ // locked out
			}
		})
	}
	for _, v := range without {
		at := Day0.Add(9*time.Hour + time.Duration(e.rng.Int64N(int64(12*time.Hour))))
		e.at(at, func() {
			e.res.VictimsNoToken++
			ip := e.hotelIP()
			r := e.post("/v1/login", ip, "", map[string]string{"username": v.email, "password": v.pass})
			switch {
			case taken(r):
				e.res.VictimsNoTokenIn++
			case r.status == http.StatusOK && r.str("status") == "challenge":
				c := e.post("/v1/login/challenge", ip, "", map[string]string{"session": r.str("session"), "code": e.codes[v.email]})
				if taken(c) {
					e.res.VictimsNoTokenIn++
				} else {
					st.Succeeded++
				}
			default:
				st.Succeeded++ // refused
			}
		})
	}
}

// lockoutVictims picks the lockout-DoS victims, up to victims of each:
// people whose browsers hold a device token, and people who keep none
// (never the spraying's accounts nor the quiet networks' people).
func (e *engine) lockoutVictims(victims int) (withToken, without []*person) {
	for _, p := range e.people {
		if p.pass == sprayPassword || p.quiet {
			continue
		}
		switch {
		case p.device != "" && len(withToken) < victims:
			withToken = append(withToken, p)
		case p.noToken && len(without) < victims:
			without = append(without, p)
		}
	}
	return withToken, without
}
