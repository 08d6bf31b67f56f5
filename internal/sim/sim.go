// Package sim drives the real guard and HTTP API (guard/api, in process)
// with a day of simulated traffic on a virtual clock: a population of
// legitimate users on realistic networks and a mix of attacks, each a
// small generator with a seed. It reports, per configuration, how much of
// each attack succeeded and how many real users were refused.
//
// The store is memstore, the in-process pure-Go implementation of the
// Redis library (the two are held to the same results by a differential
// test), on the virtual clock; codes and accounts are kept in memory (no
// bcrypt). What runs between the HTTP request and the store is the
// product's own code: the API's handlers, the guard, the rules.
package sim

import (
	"container/heap"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/guard/token"
)

// Options size a run.
type Options struct {
	Seed  uint64
	Users int // legitimate population; default 100,000
	// Scale multiplies every attack's volume; default 1.
	Scale float64

	debug func(*engine)
	// store, when set, is the store the day runs on, given its virtual
	// clock (default memstore: see BenchmarkTheDayOnTheLuaLibrary)
	store func(clock func() time.Time) store.Store
}

// Attack names, in report order.
const (
	Pumping = "sms pumping"
	// PumpingCognito is the same pumping through a Cognito user pool's
	// sign-up: the custom SMS sender trigger (docs/contract.md §10).
	PumpingCognito = "sms pumping (Cognito sign-up)"
	Bombing        = "email bombing"
	BruteForce     = "otp brute force"
	StuffFast      = "stuffing (fast)"
	StuffSlow      = "stuffing (slow)"
	StuffAdapt     = "stuffing (adaptive)"
	StuffResi      = "stuffing (residential proxies)"
	// StuffRetry asks again for every pair a step-up challenged, from
	// the same network; StuffRotate, from the residential networks where
	// real users live, one after another, within every rule's budget.
	StuffRetry  = "stuffing (retrying challenged pairs)"
	StuffRotate = "stuffing (rotating networks)"
	Spraying    = "password spraying"
	LockoutDoS  = "lockout-DoS"
)

// Attacks lists them in report order.
var Attacks = []string{Pumping, PumpingCognito, Bombing, BruteForce, StuffFast, StuffSlow, StuffAdapt, StuffResi, StuffRetry, StuffRotate, Spraying, LockoutDoS}

// captchaPrice is what an attacker pays a solving service per CAPTCHA
// (the market's $1-3 a thousand).
const captchaPrice = 0.002

// AttackStats is what one attack achieved, and what it cost the attacker.
type AttackStats struct {
	Attempts int // the attack's requests (its own accounts' logins included)
	Admitted int // requests that got past the guard (answered other than 429/503)
	// Challenged: right passwords the attacker could not use (a step-up
	// code went to the account's owner). Captchas: CAPTCHAs it bought
	// from a solving service (captchaPrice each) to answer a challenge.
	Challenged, Captchas int
	Succeeded            int     // SMS delivered, victim emails, codes guessed, accounts taken over
	Targets              int     // accounts, pairs or numbers the success counts against
	Cost                 float64 // USD of pumped SMS
	// Networks is how many IPv4 /16s (IPv6 /32s) the attack sent from.
	Networks int
	nets     map[string]bool
}

// from notes a request the attack sent from ip.
func (a *AttackStats) from(ip string) {
	if a.nets == nil {
		a.nets = map[string]bool{}
	}
	if n := netOf(ip); !a.nets[n] {
		a.nets[n] = true
		a.Networks++
	}
}

// netOf is ip's /16 (IPv4) or /32 (IPv6), as text.
func netOf(ip string) string {
	if i := strings.IndexByte(ip, ':'); i >= 0 {
		if j := strings.IndexByte(ip[i+1:], ':'); j >= 0 {
			return ip[:i+1+j]
		}
		return ip
	}
	if i := strings.IndexByte(ip, '.'); i >= 0 {
		if j := strings.IndexByte(ip[i+1:], '.'); j >= 0 {
			return ip[:i+1+j]
		}
	}
	return ip
}

// Rate is Succeeded / Targets (or Attempts when the attack has no targets).
func (a AttackStats) Rate() float64 {
	n := a.Targets
	if n == 0 {
		n = a.Attempts
	}
	if n == 0 {
		return 0
	}
	return float64(a.Succeeded) / float64(n)
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
	// Victims of the lockout-DoS with a device token: how many logged
	// in at their first try. Victims without one, logging in from a
	// network their account never used: how many got in, at once or by
	// a step-up code.
	Victims, VictimsFirstTry         int
	VictimsNoToken, VictimsNoTokenIn int
	// QuietUsers: users of households and small offices, each on a /16
	// of its own (quiet networks), who made a request; QuietRefused:
	// those refused at least once.
	QuietUsers, QuietRefused int
	// Logins: legitimate login requests (first tries and retries);
	// Challenged: those answered with a step-up challenge; Passed: the
	// challenges answered with the code; Abandoned: challenges the user
	// did not answer.
	Logins, Challenged, Passed, Abandoned int
	// ChallengedAttacked: the challenged logins of accounts under attack
	// (a leaked pair's, a lockout-DoS's victim).
	ChallengedAttacked int
	// RefusedBy counts the legitimate requests each rule refused.
	RefusedBy map[string]int
	// Hourly: attack requests admitted and legitimate requests refused.
	AttackAdmitted, UsersRefused [24]int
	// Requests made in the day (the day before, which warms the state,
	// is not counted).
	Requests int
	Took     time.Duration
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

// secret keys the simulated deployment's hashes and device tokens.
var secret = []byte("otpguard-simulator-secret")

// Run simulates one day under cfg. name labels the result.
func Run(ctx context.Context, name string, cfg config.Config, o Options) (*Result, error) {
	if o.Users == 0 {
		o.Users = 100_000
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	began := time.Now()
	e := &engine{nets: newNetworks(), rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)), now: Day0.Add(-24 * time.Hour), codes: map[string]string{}, accounts: map[string]string{},
		pending: map[string]*pendingCode{}, puts: map[string]*codePuts{}, blobs: map[string]blob{}, solved: map[string]bool{}, takenOver: map[string]bool{}, res: &Result{Config: name, Attacks: map[string]*AttackStats{}, RefusedBy: map[string]int{}}}
	for _, a := range Attacks {
		e.res.Attacks[a] = &AttackStats{}
	}
	// The network: the simulated clients are the peers (no proxy).
	cfg.Network.TrustedProxies = nil
	clock := func() time.Time { return e.now }
	// Bounded well above what a day makes: nothing is forgotten.
	var st store.Store = memstore.NewSized(clock, 50_000_000)
	if o.store != nil {
		st = o.store(clock)
	}
	g, err := guard.New(cfg.Engine(), st, guard.Options{Secret: secret, Backstop: noBackstop{}, Clock: clock, Networks: e.nets})
	if err != nil {
		return nil, err
	}
	codes, err := otp.New(cfg, memCodes{e}, secret)
	if err != nil {
		return nil, err
	}
	signer, err := token.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)), cfg.Token.Issuer, cfg.Token.TTL)
	if err != nil {
		return nil, err
	}
	srv, err := api.NewServer(api.Deps{
		Config: cfg, Guard: g, Codes: codes, Tokens: signer, Sender: e, Auth: e,
		Health: func(context.Context) error { return nil }, Log: slog.New(slog.DiscardHandler), Blobs: memBlobs{e},
		Captcha: solvingMarket{e},
	})
	if err != nil {
		return nil, err
	}
	e.h, e.g, e.srv = srv, g, srv
	if err := e.population(o.Users); err != nil {
		return nil, err
	}
	e.attacks(o.Scale)
	if o.debug != nil {
		o.debug(e)
	}
	e.runDay()
	e.countUsers()
	e.res.Took = time.Since(began)
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
	nets      *networks
	attackers int // attacks that drew sources: each has its own providers
	rng       *rand.Rand
	now       time.Time
	h         http.Handler
	srv       *api.Server
	g         *guard.Guard
	q         evq
	seq       int
	res       *Result
	people    []*person
	accounts  map[string]string       // account -> password: the authenticator
	pending   map[string]*pendingCode // the code store
	puts      map[string]*codePuts    // and its count of puts per key
	blobs     map[string]blob         // held logins
	codes     map[string]string       // the last code delivered per address
	sent      []sent                  // messages delivered by the request in progress
	solved    map[string]bool         // CAPTCHA tokens spent
	takenOver map[string]bool         // accounts an attacker took over
	captchas  int                     // tokens bought
}

func (e *engine) at(t time.Time, fn func()) {
	e.seq++
	heap.Push(&e.q, &event{at: t, seq: e.seq, fn: fn})
}

// reply is an API answer.
type reply struct {
	rule   string // the rule that refused
	status int
	retry  time.Duration
	body   map[string]any
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

// cognitoSignUp is a user pool's custom SMS sender asked, for a sign-up
// by user, to deliver a code to num: the trigger's API method, as the
// cognitosend function calls it once it decrypted the code.
func (e *engine) cognitoSignUp(st *AttackStats, num, user string) {
	e.sent = e.sent[:0]
	st.Attempts++
	err := e.srv.CognitoSend(context.Background(), api.CognitoMessage{
		TriggerSubject: api.TriggerSubject{Account: user}, Source: "SignUp", Channel: message.SMS, To: num, Code: "123456",
	})
	if err == nil {
		st.Admitted++
	}
	e.res.Requests++
}

// post sends a request from ip (with a device token, when device is set).
func (e *engine) post(path, ip, device string, body any) reply {
	b, _ := json.Marshal(body)
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
	r.Header.Set("Content-Type", "application/json")
	if device != "" {
		r.Header.Set("X-Device-Token", device)
	}
	if strings.Contains(ip, ":") {
		r.RemoteAddr = "[" + ip + "]:443"
	} else {
		r.RemoteAddr = ip + ":443"
	}
	w := httptest.NewRecorder()
	e.sent = e.sent[:0]
	e.h.ServeHTTP(w, r)
	if !e.warm() {
		e.res.Requests++
	}
	out := reply{status: w.Code}
	raw, _ := io.ReadAll(w.Body)
	_ = json.Unmarshal(raw, &out.body)
	out.rule = out.str("rule")
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil {
		out.retry = time.Duration(s) * time.Second
	}
	return out
}

func (r reply) guarded() bool {
	return r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable
}

// instant draws a moment of the day that begins at day, following the
// rhythm.
func (e *engine) instant(day time.Time) time.Time {
	var total float64
	for _, w := range hourWeights {
		total += w
	}
	x := e.rng.Float64() * total
	h := 0
	for ; h < 23 && x >= hourWeights[h]; h++ {
		x -= hourWeights[h]
	}
	return day.Add(time.Duration(h)*time.Hour + time.Duration(e.rng.Int64N(int64(time.Hour))))
}

// hourWeights is the daily rhythm: quiet at night, busy from 8 to 22.
var hourWeights = [24]float64{0.2, 0.1, 0.1, 0.1, 0.1, 0.2, 0.5, 0.9, 1.3, 1.5, 1.5, 1.4, 1.4, 1.5, 1.5, 1.4, 1.4, 1.5, 1.6, 1.7, 1.6, 1.3, 0.9, 0.5}
