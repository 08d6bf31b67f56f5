package sim

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
)

const sprayPassword = "Winter2030!"

// smsPrice is the USD price of one SMS by country (a rough public price
// list), for the cost of pumping.
var smsPrice = map[string]float64{"LV": 0.11, "TN": 0.27, "KG": 0.31, "UZ": 0.26, "LK": 0.20, "PK": 0.15, "NG": 0.30,
	"ID": 0.35, "EG": 0.22, "BD": 0.25, "KZ": 0.29, "TJ": 0.33, "AZ": 0.30, "GE": 0.21, "AM": 0.24, "MN": 0.19, "KH": 0.23,
	"NP": 0.20, "MM": 0.28, "SN": 0.26}

// pumpCountries are where pumped numbers are: high-cost destinations
// where the simulated service has no users.
var pumpCountries = []string{"LV", "TN", "KG", "UZ", "LK", "PK", "NG", "ID", "EG", "BD"}

// cognitoPumpCountries are the Cognito pumping's: ten others of the same
// kind, so that each attack meets budgets the other did not spend.
var cognitoPumpCountries = []string{"KZ", "TJ", "AZ", "GE", "AM", "MN", "KH", "NP", "MM", "SN"}

func (e *engine) attacks(scale float64) {
	n := func(x int) int { return int(math.Round(float64(x) * scale)) }
	e.pumping(n(4000), false)
	e.pumping(n(4000), true)
	e.bombing(n(3000))
	e.bruteForce(n(5000))
	e.stuffing(StuffFast, n(3000), 2*time.Hour, Day0.Add(3*time.Hour), false)
	e.stuffing(StuffSlow, n(3000), 24*time.Hour, Day0, false)
	e.stuffing(StuffAdapt, n(3000), 4*time.Hour, Day0.Add(13*time.Hour), true)
	e.residential(n(3000), 6*time.Hour, Day0.Add(9*time.Hour))
	e.stuffing(StuffRetry, n(3000), 6*time.Hour, Day0.Add(16*time.Hour), false)
	e.rotating(n(3000), 12*time.Hour, Day0.Add(8*time.Hour))
	e.spraying()
	e.lockoutDoS(n(100), n(40000))
}

// hosting is the attackers' address space: /16s of hosting and proxy
// providers, none of which the users come from (first octets 141-219, not
// 172), and their IPv6 /32s.
func (e *engine) hostingNets(k int) []string {
	nets := make([]string, k)
	for i := range nets {
		first := 141 + e.rng.IntN(79)
		if first == 172 {
			first = 173
		}
		nets[i] = fmt.Sprintf("%d.%d", first, e.rng.IntN(256))
	}
	return nets
}

// sources are n attacking addresses in nets /16s (a quarter of them IPv6,
// in a /32 of a hosting provider per four of those /16s), the networks of
// ten hosting providers (autonomous systems) of the attack's own.
func (e *engine) sources(n, nets int) []string {
	e.attackers++
	v4 := e.hostingNets(nets)
	v6 := make([]string, max(1, nets/4))
	for i := range v6 {
		v6[i] = fmt.Sprintf("2a0c:%x", 0x1000+e.rng.IntN(0xe000))
	}
	for i, net := range append(v4, v6...) {
		e.nets.add(net, 65000+uint32(e.attackers*10+i%10))
	}
	out := make([]string, n)
	for i := range out {
		if i%4 == 3 {
			out[i] = fmt.Sprintf("%s:%x:%x::%x", v6[e.rng.IntN(len(v6))], e.rng.IntN(65536), e.rng.IntN(65536), 1+e.rng.IntN(65535))
		} else {
			out[i] = fmt.Sprintf("%s.%d.%d", v4[e.rng.IntN(len(v4))], e.rng.IntN(256), 1+e.rng.IntN(254))
		}
	}
	return out
}

// attack is one request of an attack from ip: counted, and when a
// CAPTCHA is asked for, asked again with one bought from a solving
// service (the answer that counts is the second).
func (e *engine) attack(st *AttackStats, path, ip string, body map[string]string) reply {
	r := e.post(path, ip, "", body)
	e.admitted(st, ip, r)
	if r.status == http.StatusForbidden && r.str("code") == "challenge_required" {
		st.Captchas++
		e.captchas++
		body["captchaToken"] = fmt.Sprintf("solved-%d", e.captchas)
		r = e.post(path, ip, "", body)
		e.admitted(st, ip, r)
	}
	return r
}

func (e *engine) admitted(st *AttackStats, ip string, r reply) {
	st.Attempts++
	st.from(ip)
	if !r.guarded() {
		st.Admitted++
		e.res.AttackAdmitted[e.now.Hour()]++
	}
}

// taken reports a login answer that hands the account over: its tokens,
// not a step-up challenge.
func taken(r reply) bool {
	return r.status == http.StatusOK && r.str("status") == "authenticated"
}

// pumping: numbers in 50 high-cost mobile prefixes of 10 countries, each
// asked for a code once, from 200 addresses, at a low rate all day;
// viaCognito, the same through a user pool's sign-up (its custom SMS
// sender trigger, which sees no address; each sign-up a new user name).
func (e *engine) pumping(attempts int, viaCognito bool) {
	st := e.res.Attacks[Pumping]
	if viaCognito {
		st = e.res.Attacks[PumpingCognito]
	}
	src := e.sources(200, 20)
	type prefix struct {
		base    string
		country string
	}
	var prefixes []prefix
	countries := pumpCountries
	if viaCognito {
		countries = cognitoPumpCountries
	}
	for _, region := range countries {
		found := 0
		for k := 0; k < 200_000 && found < 5; k += 10_000 {
			if d, err := identity.ParsePhone(exampleMobile(region, k), policy); err == nil {
				prefixes = append(prefixes, prefix{d.Address, region})
				found++
			}
		}
	}
	for i := range attempts {
		p := prefixes[i%len(prefixes)]
		num := bumpNumber(p.base, 1+i/len(prefixes))
		at := Day0.Add(time.Duration(e.rng.Int64N(int64(24 * time.Hour))))
		ip := src[e.rng.IntN(len(src))]
		e.at(at, func() {
			if viaCognito {
				e.cognitoSignUp(st, num, fmt.Sprintf("pump-%d", i))
			} else {
				e.attack(st, "/v1/otp/send", ip, map[string]string{"channel": "sms", "to": num, "purpose": "signup"})
			}
			for _, m := range e.sent {
				if m.channel == message.SMS {
					st.Succeeded++
					st.Cost += smsPrice[p.country]
				}
			}
		})
	}
}

// bombing: one victim's address, from 300 addresses, over two hours.
func (e *engine) bombing(attempts int) {
	st := e.res.Attacks[Bombing]
	src := e.sources(300, 30)
	const victim = "victim.person@example.com"
	for range attempts {
		at := Day0.Add(14*time.Hour + time.Duration(e.rng.Int64N(int64(2*time.Hour))))
		ip := src[e.rng.IntN(len(src))]
		e.at(at, func() {
			e.attack(st, "/v1/otp/send", ip, map[string]string{"channel": "email", "to": victim, "purpose": "signup"})
			st.Succeeded += len(e.sent)
		})
	}
}

// bruteForce: guesses at a victim's pending login codes from 100
// addresses; the attacker asks for a new code every 10 minutes (its
// sends are attempts too).
func (e *engine) bruteForce(guesses int) {
	st := e.res.Attacks[BruteForce]
	src := e.sources(100, 10)
	victim := "+12015550123"
	if d, err := identity.ParsePhone(victim, policy); err == nil {
		victim = d.Address
	}
	for k := 0; k < 144; k++ {
		at := Day0.Add(time.Duration(k) * 10 * time.Minute)
		ip := src[k%len(src)]
		e.at(at, func() {
			e.attack(st, "/v1/otp/send", ip, map[string]string{"channel": "sms", "to": victim, "purpose": "login"})
		})
	}
	for i := range guesses {
		at := Day0.Add(time.Duration(i) * (24 * time.Hour) / time.Duration(max(guesses, 1)))
		ip := src[e.rng.IntN(len(src))]
		guess := fmt.Sprintf("%06d", e.rng.IntN(1000000))
		e.at(at, func() {
			r := e.attack(st, "/v1/otp/verify", ip, map[string]string{"to": victim, "purpose": "login", "code": guess})
			if r.status == http.StatusOK {
				st.Succeeded++
			}
		})
	}
}
