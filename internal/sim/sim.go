// Package sim drives the real guard and HTTP API (internal/app, in
// process, on the embedded Redis) with a day of simulated traffic on a
// virtual clock: a population of legitimate users and a mix of attacks,
// each a small generator with a seed. It reports, per configuration, how
// much of each attack succeeded and how many real users were refused.
//
// Time comes from the store, as in production: the embedded Redis's clock
// is set to each event's instant (and its keys expire as it advances), and
// the process's own state (deny cache, leases, backstop) reads the same
// virtual clock.
package sim

import (
	"container/heap"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"
	"golang.org/x/crypto/bcrypt"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/users"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/localredis"
)

// Options size a run.
type Options struct {
	Seed  uint64
	Users int // legitimate population; default 2000
	// Scale multiplies every attack's volume; default 1.
	Scale float64
}

// Attack names, in report order.
const (
	Pumping    = "sms pumping"
	Bombing    = "email bombing"
	BruteForce = "otp brute force"
	StuffFast  = "stuffing (fast)"
	StuffSlow  = "stuffing (slow)"
	Spraying   = "password spraying"
)

// Attacks lists them in report order.
var Attacks = []string{Pumping, Bombing, BruteForce, StuffFast, StuffSlow, Spraying}

// AttackStats is what one attack achieved.
type AttackStats struct {
	Attempts  int     // requests sent
	Admitted  int     // requests that got past the guard (answered other than 429/503)
	Succeeded int     // SMS delivered, victim emails, codes guessed, accounts taken over
	Cost      float64 // USD of pumped SMS
}

// Rate is Succeeded / Attempts.
func (a AttackStats) Rate() float64 {
	if a.Attempts == 0 {
		return 0
	}
	return float64(a.Succeeded) / float64(a.Attempts)
}

// Result is one configuration's day.
type Result struct {
	Config  string
	Attacks map[string]*AttackStats
	// Users: legitimate users active in the day; refused at least once;
	// refused at their first request; the extra waits of tasks delayed by
	// a refusal (until success, or an hour when they gave up).
	Users, RefusedOnce, RefusedFirst, GaveUp int
	Waits                                    []time.Duration
	// Hourly: attack requests admitted and legitimate requests refused.
	AttackAdmitted, UsersRefused [24]int
}

// MedianWait is the median extra wait of delayed tasks.
func (r *Result) MedianWait() time.Duration {
	if len(r.Waits) == 0 {
		return 0
	}
	w := slices.Clone(r.Waits)
	slices.Sort(w)
	return w[len(w)/2]
}

// Day0 is the simulated day (a Tuesday).
var Day0 = time.Date(2030, 1, 8, 0, 0, 0, 0, time.UTC)

// smsPrice is the USD price of one SMS by country (a rough public price
// list), for the cost of pumping.
var smsPrice = map[string]float64{"US": 0.0083, "LV": 0.11, "TN": 0.27, "KG": 0.31, "UZ": 0.26}

// Run simulates one day under cfg. name labels the result.
func Run(ctx context.Context, name string, cfg guard.Config, o Options) (*Result, error) {
	if o.Users == 0 {
		o.Users = 2000
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	srv, err := localredis.Start()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	e := &engine{rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)), srv: srv, now: Day0, expired: Day0, codes: map[string]string{},
		res: &Result{Config: name, Attacks: map[string]*AttackStats{}}}
	for _, a := range Attacks {
		e.res.Attacks[a] = &AttackStats{}
	}
	srv.SetTime(Day0)
	e.users, err = users.Open("", bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	// The network: the simulated clients are the peers (no proxy).
	cfg.Network.TrustedProxies = nil
	seedKey := ed25519.NewKeyFromSeed(make([]byte, 32))
	a, err := app.New(ctx, app.Settings{
		Redis: srv.Client(), Secret: []byte("otpguard-simulator-secret"), Auth: e.users,
		Senders: func(guard.Store) (api.Sender, error) { return e, nil },
		Log:     slog.New(slog.DiscardHandler), Clock: func() time.Time { return e.now },
	}, cfg, app.Keys{Signing: seedKey})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	e.h = a
	if err := e.population(o.Users); err != nil {
		return nil, err
	}
	e.attacks(o.Scale)
	for e.q.Len() > 0 {
		ev := heap.Pop(&e.q).(*event)
		if ev.at.After(Day0.Add(24 * time.Hour)) {
			continue // the day is over
		}
		e.advance(ev.at)
		ev.fn()
	}
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
	}
	return e.res, nil
}

// event is something that happens at an instant; seq keeps the order of
// events at one instant deterministic.
type event struct {
	at  time.Time
	seq int
	fn  func()
}

type evq []*event

func (q evq) Len() int { return len(q) }
func (q evq) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q evq) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *evq) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *evq) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

type engine struct {
	rng *rand.Rand
	srv *localredis.Server
	now time.Time
	// expired: the instant up to which keys have been expired.
	expired time.Time
	h       http.Handler
	q       evq
	seq     int
	res     *Result
	users   *users.Store
	people  []*person
	codes   map[string]string // the last code delivered per address
	sent    []sent            // messages delivered since the last look
}

type sent struct {
	channel guard.Channel
	to      string
}

// Send implements api.Sender: the simulated provider.
func (e *engine) Send(_ context.Context, m guard.Message) error {
	e.codes[m.To] = m.Code
	e.sent = append(e.sent, sent{m.Channel, m.To})
	return nil
}

func (e *engine) at(t time.Time, fn func()) {
	e.seq++
	heap.Push(&e.q, &event{at: t, seq: e.seq, fn: fn})
}

// advance moves the clock to t. Redis's TIME follows at once; its keys
// expire in steps of at most 1s (expiring walks every key; users retry a
// second after their Retry-After).
func (e *engine) advance(t time.Time) {
	if !t.After(e.now) {
		return
	}
	e.now = t
	e.srv.SetTime(t)
	if d := t.Sub(e.expired); d >= time.Second {
		e.srv.FastForward(d)
		e.expired = t
	}
}

// reply is an API answer.
type reply struct {
	status int
	retry  time.Duration
	body   map[string]any
}

func (e *engine) post(path, ip string, body any) reply {
	b, _ := json.Marshal(body)
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
	r.Header.Set("Content-Type", "application/json")
	if strings.Contains(ip, ":") {
		r.RemoteAddr = "[" + ip + "]:443"
	} else {
		r.RemoteAddr = ip + ":443"
	}
	w := httptest.NewRecorder()
	e.sent = e.sent[:0]
	e.h.ServeHTTP(w, r)
	out := reply{status: w.Code}
	raw, _ := io.ReadAll(w.Body)
	_ = json.Unmarshal(raw, &out.body)
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil {
		out.retry = time.Duration(s) * time.Second
	}
	return out
}

func (r reply) guarded() bool {
	return r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable
}

// ---------------------------------------------------------------- users

// person is a legitimate user.
type person struct {
	email, phone, pass, ip string
	active                 bool // made at least one request
	refused, refusedFirst  bool
}

// hourWeights is the daily rhythm: quiet at night, busy from 8 to 22.
var hourWeights = [24]float64{0.2, 0.1, 0.1, 0.1, 0.1, 0.2, 0.5, 0.9, 1.3, 1.5, 1.5, 1.4, 1.4, 1.5, 1.5, 1.4, 1.4, 1.5, 1.6, 1.7, 1.6, 1.3, 0.9, 0.5}

// instant draws a moment of the day following the rhythm.
func (e *engine) instant() time.Time {
	var total float64
	for _, w := range hourWeights {
		total += w
	}
	x := e.rng.Float64() * total
	h := 0
	for ; h < 23 && x >= hourWeights[h]; h++ {
		x -= hourWeights[h]
	}
	return Day0.Add(time.Duration(h)*time.Hour + time.Duration(e.rng.Int64N(int64(time.Hour))))
}

// usAreas are US area codes; numbers are drawn in them and kept when
// libphonenumber calls them valid mobile (or fixed-or-mobile) numbers.
var usAreas = []string{"201", "212", "213", "305", "312", "404", "415", "503", "617", "646", "702", "713", "818", "917", "972"}

// phonePolicy is the default config's: the numbers the simulation draws
// are the ones the default rules accept.
func phonePolicy() guard.PhonePolicy {
	cfg := guard.DefaultConfig()
	return cfg.PhonePolicy()
}

func (e *engine) population(n int) error {
	policy := phonePolicy()
	// Shared addresses: 5 carrier-grade NATs (hundreds of users each),
	// 20 offices.
	cgnat := make([]string, 5)
	for i := range cgnat {
		cgnat[i] = fmt.Sprintf("100.64.%d.1", i)
	}
	offices := make([]string, 20)
	for i := range offices {
		offices[i] = fmt.Sprintf("192.0.%d.10", 100+i)
	}
	for i := range n {
		p := &person{email: fmt.Sprintf("user%d@example.net", i), pass: fmt.Sprintf("a long passphrase of user %d", i)}
		for {
			num := "+1" + usAreas[e.rng.IntN(len(usAreas))] + strconv.Itoa(200+e.rng.IntN(800)) + fmt.Sprintf("%04d", e.rng.IntN(10000))
			if d, err := guard.ParsePhone(num, policy); err == nil {
				p.phone = d.Address
				break
			}
		}
		switch x := e.rng.Float64(); {
		case x < 0.25:
			p.ip = cgnat[e.rng.IntN(len(cgnat))]
		case x < 0.35:
			p.ip = offices[e.rng.IntN(len(offices))]
		case x < 0.55:
			p.ip = fmt.Sprintf("2001:db8:%x:%x::%x", e.rng.IntN(4096), e.rng.IntN(65536), 1+e.rng.IntN(1000))
		default:
			p.ip = fmt.Sprintf("%d.%d.%d.%d", 11+e.rng.IntN(100), e.rng.IntN(256), e.rng.IntN(256), 1+e.rng.IntN(254))
		}
		// Some old accounts (1 in 200) use a password a sprayer tries.
		if i%200 == 7 {
			p.pass = sprayPassword
		}
		if err := e.users.Add(p.email, p.pass); err != nil {
			return err
		}
		e.people = append(e.people, p)
		// A day: logins (some with a typo first), OTP flows, and a few
		// new signups.
		if e.rng.Float64() < 0.7 {
			e.at(e.instant(), func() { e.login(p, e.rng.Float64() < 0.05, 0, time.Time{}) })
		}
		if e.rng.Float64() < 0.35 {
			ch := guard.Email
			if e.rng.Float64() < 0.3 {
				ch = guard.SMS
			}
			e.at(e.instant(), func() { e.otp(p, ch, e.rng.Float64() < 0.1, 0, time.Time{}) })
		}
	}
	for i := range n / 10 {
		p := &person{email: fmt.Sprintf("new%d@example.org", i), pass: fmt.Sprintf("a brand new passphrase %d", i),
			ip: fmt.Sprintf("%d.%d.%d.%d", 11+e.rng.IntN(100), e.rng.IntN(256), e.rng.IntN(256), 1+e.rng.IntN(254))}
		if e.rng.Float64() < 0.3 {
			p.ip = fmt.Sprintf("100.64.%d.1", e.rng.IntN(5))
		}
		e.people = append(e.people, p)
		e.at(e.instant(), func() { e.signup(p, 0, time.Time{}) })
	}
	return nil
}

// refused notes a refusal of a user's request (first: the user's first
// request of the day) and has the user try again after the Retry-After,
// up to 3 times and only for waits up to 30 minutes; else the user gives
// up (counted as an hour's wait).
func (e *engine) refused(p *person, first bool, r reply, tries int, began time.Time, again func(began time.Time)) {
	p.refused = true
	if first {
		p.refusedFirst = true
	}
	e.res.UsersRefused[e.now.Hour()]++
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
	if !began.IsZero() {
		e.res.Waits = append(e.res.Waits, e.now.Sub(began))
	}
}

func (e *engine) touch(p *person) bool {
	first := !p.active
	p.active = true
	return first
}

func (e *engine) login(p *person, typo bool, tries int, began time.Time) {
	first := e.touch(p)
	pass := p.pass
	if typo {
		pass = p.pass + "x"
	}
	r := e.post("/v1/login", p.ip, map[string]string{"username": p.email, "password": pass})
	switch {
	case r.guarded():
		e.refused(p, first, r, tries, began, func(b time.Time) { e.login(p, typo, tries+1, b) })
	case typo:
		e.at(e.now.Add(8*time.Second), func() { e.login(p, false, tries, began) })
	default:
		e.done(began)
	}
}

func (e *engine) otp(p *person, ch guard.Channel, resend bool, tries int, began time.Time) {
	first := e.touch(p)
	to := p.email
	if ch == guard.SMS {
		to = p.phone
	}
	r := e.post("/v1/otp/send", p.ip, map[string]string{"channel": string(ch), "to": to, "purpose": "login"})
	if r.guarded() {
		e.refused(p, first, r, tries, began, func(b time.Time) { e.otp(p, ch, resend, tries+1, b) })
		return
	}
	if resend {
		// "I did not get it": a second send 45 seconds later.
		e.at(e.now.Add(45*time.Second), func() { e.otp(p, ch, false, tries, began) })
		return
	}
	e.at(e.now.Add(time.Duration(15+e.rng.IntN(45))*time.Second), func() { e.verify(p, to, e.rng.Float64() < 0.03, 0, began) })
}

func (e *engine) verify(p *person, to string, typo bool, tries int, began time.Time) {
	code := e.codes[to]
	if typo {
		code = fmt.Sprintf("%06d", (atoi(code)+1)%1000000)
	}
	r := e.post("/v1/otp/verify", p.ip, map[string]string{"to": to, "purpose": "login", "code": code})
	switch {
	case r.guarded():
		e.refused(p, false, r, tries, began, func(b time.Time) { e.verify(p, to, false, tries+1, b) })
	case typo:
		e.at(e.now.Add(10*time.Second), func() { e.verify(p, to, false, tries, began) })
	default:
		e.done(began)
	}
}

func (e *engine) signup(p *person, tries int, began time.Time) {
	first := e.touch(p)
	r := e.post("/v1/signup", p.ip, map[string]string{"email": p.email, "password": p.pass})
	if r.guarded() {
		e.refused(p, first, r, tries, began, func(b time.Time) { e.signup(p, tries+1, b) })
		return
	}
	e.done(began)
	e.at(e.now.Add(30*time.Second), func() { e.login(p, false, 0, time.Time{}) })
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// -------------------------------------------------------------- attacks

const sprayPassword = "Winter2030!"

func (e *engine) attacks(scale float64) {
	n := func(x int) int { return int(math.Round(float64(x) * scale)) }
	e.pumping(n(4000))
	e.bombing(n(3000))
	e.bruteForce(n(5000))
	e.stuffing(StuffFast, n(3000), 2*time.Hour, Day0.Add(3*time.Hour))
	e.stuffing(StuffSlow, n(3000), 24*time.Hour, Day0)
	e.spraying()
}

// sources are n attacking addresses: IPv4 from a few /16s, a quarter IPv6
// from a few /48s (a /64 each).
func (e *engine) sources(n int, tag int) []string {
	out := make([]string, n)
	for i := range out {
		if i%4 == 3 {
			out[i] = fmt.Sprintf("2001:db8:%x:%x::1", 0xa000+tag*16+e.rng.IntN(4), e.rng.IntN(65536))
		} else {
			out[i] = fmt.Sprintf("203.%d.%d.%d", tag*10+e.rng.IntN(10), e.rng.IntN(256), 1+e.rng.IntN(254))
		}
	}
	return out
}

// pumping: sequential numbers in a few high-cost mobile prefixes, from
// 200 addresses, spread over the day.
func (e *engine) pumping(attempts int) {
	st := e.res.Attacks[Pumping]
	src := e.sources(200, 1)
	policy := phonePolicy()
	var bases []guard.Destination
	for _, region := range []string{"LV", "TN", "KG"} {
		for k := 0; k < 1000; k++ {
			ex := exampleMobile(region, k)
			if d, err := guard.ParsePhone(ex, policy); err == nil {
				bases = append(bases, d)
				break
			}
		}
	}
	for i := range attempts {
		base := bases[i%len(bases)]
		num := bumpNumber(base.Address, i/len(bases))
		at := Day0.Add(time.Duration(e.rng.Int64N(int64(24 * time.Hour))))
		ip := src[e.rng.IntN(len(src))]
		country := base.Country
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/otp/send", ip, map[string]string{"channel": "sms", "to": num, "purpose": "signup"})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
			for _, m := range e.sent {
				if m.channel == guard.SMS {
					st.Succeeded++
					st.Cost += smsPrice[country]
				}
			}
		})
	}
}

// bombing: one victim's address, from 300 addresses, over two hours.
func (e *engine) bombing(attempts int) {
	st := e.res.Attacks[Bombing]
	src := e.sources(300, 2)
	const victim = "victim.person@example.com"
	for range attempts {
		at := Day0.Add(14*time.Hour + time.Duration(e.rng.Int64N(int64(2*time.Hour))))
		ip := src[e.rng.IntN(len(src))]
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/otp/send", ip, map[string]string{"channel": "email", "to": victim, "purpose": "signup"})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
			st.Succeeded += len(e.sent)
		})
	}
}

// bruteForce: guesses at a victim's pending login codes from 100
// addresses; the attacker asks for a new code every 10 minutes (its
// sends are attempts too).
func (e *engine) bruteForce(guesses int) {
	st := e.res.Attacks[BruteForce]
	src := e.sources(100, 3)
	victim := "+14155550100"
	if d, err := guard.ParsePhone("+12015550123", phonePolicy()); err == nil {
		victim = d.Address
	}
	for k := 0; k < 144; k++ {
		at := Day0.Add(time.Duration(k) * 10 * time.Minute)
		ip := src[k%len(src)]
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/otp/send", ip, map[string]string{"channel": "sms", "to": victim, "purpose": "login"})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
		})
	}
	for i := range guesses {
		at := Day0.Add(time.Duration(i) * (24 * time.Hour) / time.Duration(guesses))
		ip := src[e.rng.IntN(len(src))]
		guess := fmt.Sprintf("%06d", e.rng.IntN(1000000))
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/otp/verify", ip, map[string]string{"to": victim, "purpose": "login", "code": guess})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
			if r.status == http.StatusOK {
				st.Succeeded++
			}
		})
	}
}

// stuffing: a leaked list of (account, password) pairs, 2% of them real
// users' real passwords, each tried once from 300 addresses over span.
func (e *engine) stuffing(name string, pairs int, span time.Duration, from time.Time) {
	st := e.res.Attacks[name]
	src := e.sources(300, 4)
	for i := range pairs {
		acct, pass := fmt.Sprintf("leaked%d-%s@example.com", i, strings.Fields(name)[0]), "hunter2-"+strconv.Itoa(i)
		if e.rng.Float64() < 0.02 {
			p := e.people[e.rng.IntN(len(e.people))]
			acct, pass = p.email, p.pass
		}
		at := from.Add(time.Duration(e.rng.Int64N(int64(span))))
		ip := src[e.rng.IntN(len(src))]
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/login", ip, map[string]string{"username": acct, "password": pass})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
			if r.status == http.StatusOK {
				st.Succeeded++
			}
		})
	}
}

// spraying: one common password against every known account, from 30
// addresses, over the day.
func (e *engine) spraying() {
	st := e.res.Attacks[Spraying]
	src := e.sources(30, 5)
	for i, p := range e.people {
		at := Day0.Add(time.Duration(i) * (24 * time.Hour) / time.Duration(len(e.people)))
		ip := src[i%len(src)]
		acct := p.email
		e.at(at, func() {
			st.Attempts++
			r := e.post("/v1/login", ip, map[string]string{"username": acct, "password": sprayPassword})
			if !r.guarded() {
				st.Admitted++
				e.res.AttackAdmitted[e.now.Hour()]++
			}
			if r.status == http.StatusOK {
				st.Succeeded++
			}
		})
	}
}

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
