package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
)

// person is a legitimate user.
type person struct {
	email, account, phone, pass, ip string
	// device is the device token this user's browser holds ("" none).
	device string
	// noToken: the user's client keeps no device token (an app, a
	// browser without cookies); quiet: a household's or small office's
	// user, on a /16 of its own.
	noToken, quiet        bool
	attacked              bool // a leaked pair's or a lockout-DoS's victim
	typing                bool // in the middle of a login with typos
	active                bool // made at least one request
	refused, refusedFirst bool
}

// The networks legitimate users come from (docs/contract.md §7 is about
// telling these from an attacker's): most users sit in a few big ISPs'
// /16s with thousands of users each, mobile users behind carrier-grade
// NATs (dozens of users per address), office workers behind one address
// per office, a fifth on IPv6 (their /56 in a provider's /32), and a few
// everywhere else (travellers, small ISPs): quiet /16s.
const (
	shareISP      = 0.55
	shareMobile   = 0.15
	shareOffice   = 0.08
	shareIPv6     = 0.20
	ispNets       = 40  // IPv4 /16s of the big ISPs
	mobileCarrier = 5   // each a pool of 64 addresses in one /24
	offices       = 400 // each one address, in 20 business /16s
	ipv6Providers = 8
)

// homeIP draws a user's usual address.
func (e *engine) homeIP() string {
	switch x := e.rng.Float64(); {
	case x < shareISP:
		k := e.rng.IntN(ispNets)
		return fmt.Sprintf("%d.%d.%d.%d", 60+k/2, 10+(k*37)%200, e.rng.IntN(256), 1+e.rng.IntN(254))
	case x < shareISP+shareMobile:
		return fmt.Sprintf("172.%d.10.%d", 56+e.rng.IntN(mobileCarrier), 1+e.rng.IntN(64))
	case x < shareISP+shareMobile+shareOffice:
		o := e.rng.IntN(offices)
		return fmt.Sprintf("38.%d.%d.10", 100+o%20, o/20)
	case x < shareISP+shareMobile+shareOffice+shareIPv6:
		return fmt.Sprintf("2a02:%x:%x:%x00::%x", 0x1000+e.rng.IntN(ipv6Providers), e.rng.IntN(65536), e.rng.IntN(256), 1+e.rng.IntN(4096))
	default:
		return fmt.Sprintf("%d.%d.%d.%d", 120+e.rng.IntN(20), e.rng.IntN(256), e.rng.IntN(256), 1+e.rng.IntN(254))
	}
}

// phoneCountries are where the users' phones are, by share.
var phoneCountries = []struct {
	region string
	share  float64
}{{"US", 0.6}, {"GB", 0.12}, {"FR", 0.1}, {"DE", 0.08}, {"IN", 0.06}, {"BR", 0.04}}

// phone draws a valid mobile number in one of the users' countries.
func (e *engine) phone() string {
	x, region := e.rng.Float64(), "US"
	for _, c := range phoneCountries {
		if x < c.share {
			region = c.region
			break
		}
		x -= c.share
	}
	for range 100 {
		if num := e.mobileNumber(region); num != "" {
			return num
		}
	}
	return "+14155550100"
}

// mobileNumber is a number in region's mobile ranges (within a hundred
// million of its example mobile number; US numbers in any exchange of a
// few area codes), when libphonenumber calls it a valid mobile one. The
// users' numbers are spread as real ones are: a few per prefix at most.
func (e *engine) mobileNumber(region string) string {
	ex := exampleMobile(region, 0)
	if ex == "" {
		return ""
	}
	var num string
	if region == "US" {
		num = fmt.Sprintf("+1%s%03d%04d", usAreas[e.rng.IntN(len(usAreas))], 200+e.rng.IntN(800), e.rng.IntN(10000))
	} else {
		num = bumpNumber(ex, e.rng.IntN(100_000_000))
	}
	d, err := identity.ParsePhone(num, policy)
	if err != nil {
		return ""
	}
	return d.Address
}

// usAreas are US area codes the users' numbers are drawn in.
var usAreas = []string{"201", "212", "213", "305", "312", "404", "415", "503", "617", "646", "702", "713", "818", "917", "972"}

// policy is the default config's phone policy: the numbers the
// simulation draws are ones the rules accept.
var policy = func() identity.PhonePolicy {
	cfg := config.Default()
	return cfg.OTP.SMS.Policy()
}()

// population makes n users and their day: logins (80% of them from a
// device that holds a token from an earlier login, 10% from clients that
// keep none, 5% with a typo first, 2% of users travelling), codes by
// email or SMS (some resent, some mistyped, some never entered), 2% new
// signups, and households and small offices on quiet networks (n/200 of
// them, 2 to 5 users each, who mistype more and keep device tokens
// less).
func (e *engine) population(n int) error {
	for i := range n {
		p := &person{email: fmt.Sprintf("user%d@example.net", i), pass: fmt.Sprintf("a long passphrase of user %d", i), ip: e.homeIP()}
		// Some old accounts (1 in 200) use a password a sprayer tries.
		if i%200 == 7 {
			p.pass = sprayPassword
		}
		p.noToken = e.rng.Float64() < 0.1
		if err := e.enroll(p, !p.noToken && e.rng.Float64() < 0.89); err != nil {
			return err
		}
		if e.rng.Float64() < 0.02 {
			// a traveller: one login of the day from a hotel's network
			e.at(e.instant(Day0), func() { e.loginFrom(p, e.hotelIP(), false, 0, time.Time{}) })
		}
		// Every user logged in within the last 30 days from their usual
		// network (what rules on an account's networks remember).
		e.history(p)
		// The day before warms the state (yesterday's counts weigh in
		// the sliding windows, as they do in production); only the day
		// counts.
		for _, day := range []time.Time{Day0.Add(-24 * time.Hour), Day0} {
			if e.rng.Float64() < 0.6 {
				e.at(e.instant(day), func() { e.login(p, e.rng.Float64() < 0.05, 0, time.Time{}) })
				if e.rng.Float64() < 0.25 {
					e.at(e.instant(day), func() { e.login(p, e.rng.Float64() < 0.05, 0, time.Time{}) })
				}
			}
			if e.rng.Float64() < 0.2 {
				ch := message.Email
				if e.rng.Float64() < 0.3 {
					ch = message.SMS
					if p.phone == "" {
						p.phone = e.phone()
					}
				}
				e.at(e.instant(day), func() { e.otp(p, ch, e.rng.Float64() < 0.1, 0, time.Time{}) })
			}
		}
	}
	if err := e.households(n / 200); err != nil {
		return err
	}
	e.verifiedBefore()
	for i := range n / 50 {
		p := &person{email: fmt.Sprintf("new%d@example.org", i), pass: fmt.Sprintf("a brand new passphrase %d", i), ip: e.homeIP()}
		p.account, _ = identity.ParseAccount(p.email)
		e.people = append(e.people, p)
		e.at(e.instant(Day0), func() { e.signup(p, 0, time.Time{}) })
	}
	return nil
}

// enroll makes p an account (with a device token from an earlier login
// when token) that logged in from its network within 30 days, and adds
// it to the population.
func (e *engine) enroll(p *person, token bool) error {
	a, err := identity.ParseAccount(p.email)
	if err != nil {
		return err
	}
	p.account = a
	e.accounts[a] = p.pass
	if token {
		tok, err := e.g.DeviceToken(p.account, "", Day0.Add(-time.Duration(1+e.rng.IntN(90))*24*time.Hour))
		if err != nil {
			return err
		}
		p.device = tok
	}
	e.people = append(e.people, p)
	return nil
}

// households are k homes and small offices, each on a /16 no one else
// uses (a small ISP's, a business line's): 2 to 5 users behind one
// address, half of them on clients that keep no device token, who log in
// once or twice a day, mistype their password up to three times at 30%
// of their logins and four times before they find a forgotten one at 15%
// (the pattern a network's failure ratio sees; a fifth would meet their
// own account's lockout on that address); and, in a fifth of them, a bad
// morning.
func (e *engine) households(k int) error {
	for h := range k {
		ip := fmt.Sprintf("%d.%d.%d.%d", 100+h/256%20, h%256, 1+e.rng.IntN(250), 1+e.rng.IntN(254))
		// a bad morning in a fifth of them: the first three each mistype
		// four times between 7:00 and 8:00 before they log in (four
		// failures of five each: what a network's ratio denies)
		bad := e.rng.Float64() < 0.2
		for u := range 2 + e.rng.IntN(4) {
			p := &person{email: fmt.Sprintf("home%d-%d@example.net", h, u), pass: fmt.Sprintf("a household passphrase %d %d", h, u), ip: ip, quiet: true}
			p.noToken = e.rng.Float64() < 0.5
			if err := e.enroll(p, !p.noToken && e.rng.Float64() < 0.5); err != nil {
				return err
			}
			e.history(p)
			if bad && u < 3 {
				e.at(Day0.Add(7*time.Hour+time.Duration(e.rng.Int64N(int64(time.Hour)))), func() { e.mistype(p, 4) })
			}
			for _, day := range []time.Time{Day0.Add(-24 * time.Hour), Day0} {
				for range 1 + e.rng.IntN(2) {
					typos := 0
					switch x := e.rng.Float64(); {
					case x < 0.15:
						typos = 4 // a forgotten password, found again
					case x < 0.45:
						typos = 1 + e.rng.IntN(3)
					}
					e.at(e.instant(day), func() { e.mistype(p, typos) })
				}
			}
		}
	}
	return nil
}

// mistype is a login with typos wrong passwords first, 8 seconds apart
// (one at a time: a login the user is in the middle of is not begun
// again).
func (e *engine) mistype(p *person, typos int) {
	if p.typing {
		return
	}
	p.typing = true
	e.typo(p, typos)
}

func (e *engine) typo(p *person, typos int) {
	if typos == 0 {
		p.typing = false
		e.loginFrom(p, p.ip, false, 0, time.Time{})
		return
	}
	e.loginFrom(p, p.ip, true, 0, time.Time{})
	e.at(e.now.Add(8*time.Second), func() { e.typo(p, typos-1) })
}

// hotelIP is a network a traveller logs in from: one no user calls home.
func (e *engine) hotelIP() string {
	return fmt.Sprintf("%d.%d.%d.%d", 90+e.rng.IntN(10), e.rng.IntN(256), e.rng.IntN(256), 1+e.rng.IntN(254))
}

// refused notes a refusal of a user's request (first: the user's first
// request of the day) and has the user try again after the Retry-After,
// up to 3 times and only for waits up to 30 minutes; else the user gives
// up (counted as an hour's wait).
func (e *engine) refused(p *person, first bool, r reply, tries int, began time.Time, again func(began time.Time)) {
	if e.warm() {
		return
	}
	p.refused = true
	if first {
		p.refusedFirst = true
	}
	e.res.UsersRefused[e.now.Hour()]++
	e.res.RefusedBy[r.rule]++
	if began.IsZero() {
		began = e.now
	}
	if r.retry <= 0 {
		r.retry = time.Second
	}
	if tries >= 3 || r.retry > 30*time.Minute {
		e.res.GaveUp++
		e.res.Waits = append(e.res.Waits, time.Hour)
		return
	}
	e.at(e.now.Add(r.retry+time.Second), func() { again(began) })
}

func (e *engine) done(began time.Time) {
	if !began.IsZero() && !e.warm() {
		e.res.Waits = append(e.res.Waits, e.now.Sub(began))
	}
}

// warm reports the day before the simulated one.
func (e *engine) warm() bool { return e.now.Before(Day0) }

func (e *engine) touch(p *person) bool {
	if e.warm() {
		return false
	}
	first := !p.active
	p.active = true
	return first
}

// keep stores the device token an answer carries, where the user's
// client keeps one.
func (p *person) keep(r reply) {
	if t := r.str("deviceToken"); t != "" && !p.noToken {
		p.device = t
	}
}

// history has p log in once, 2 days before the simulated day, from its
// usual network (through the guard, as a success).
func (e *engine) history(p *person) {
	ip, err := identity.ParseIP(p.ip)
	if err != nil {
		return
	}
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: p.account, IP: ip}}
	ctx := context.Background()
	if d, err := e.g.Allow(ctx, req); err == nil && d.Allowed {
		_, _ = e.g.Settle(ctx, req, d, guard.Success)
	}
}

// verifiedBefore has every user with a phone receive and enter a code
// by SMS the day before the warm-up day (through the guard: a send and
// its receipt settled), so that the countries' and number ranges'
// budgets of unverified SMS start from a steady state, as in production
// (a cold start is docs/api.md, "Codes that follow verified traffic").
func (e *engine) verifiedBefore() {
	ctx := context.Background()
	now := e.now
	defer func() { e.now = now }()
	var ps []*person
	for _, p := range e.people {
		if p.phone != "" {
			ps = append(ps, p)
		}
	}
	for k, p := range ps {
		e.now = Day0.Add(-48*time.Hour + time.Duration(k)*24*time.Hour/time.Duration(len(ps)))
		d, err := identity.ParsePhone(p.phone, policy)
		if err != nil {
			continue
		}
		ip, _ := identity.ParseIP(p.ip)
		req := guard.Request{Action: "otp.send", Subject: guard.Subject{Destination: d, IP: ip},
			Attributes: map[string]string{"channel": "sms", "purpose": "login"}}
		if dec, err := e.g.Allow(ctx, req); err == nil && dec.Allowed {
			_ = e.g.SettleReceipt(ctx, e.g.Receipt(dec), guard.Success)
		}
	}
}

// roamingIP is a network a user logs in from away from home (5% of
// logins): a mobile carrier's NAT.
func (e *engine) roamingIP() string {
	return fmt.Sprintf("172.%d.10.%d", 56+e.rng.IntN(mobileCarrier), 1+e.rng.IntN(64))
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// exampleMobile is libphonenumber's example mobile number of region, plus
// k, in E.164.
func exampleMobile(region string, k int) string {
	n := phonenumbers.GetExampleNumberForType(region, phonenumbers.MOBILE)
	if n == nil {
		return ""
	}
	return bumpNumber(phonenumbers.Format(n, phonenumbers.E164), k)
}

// bumpNumber adds k to an E.164 number: the next numbers of a range.
func bumpNumber(e164 string, k int) string {
	v, err := strconv.ParseInt(strings.TrimPrefix(e164, "+"), 10, 64)
	if err != nil {
		return e164
	}
	return "+" + strconv.FormatInt(v+int64(k), 10)
}
