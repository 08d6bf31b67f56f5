// Command bench measures otpguard side by side with its peers, in one run,
// against redis-server processes it starts itself (a single node and a
// 3-master cluster), interleaving the implementations round by round so
// that all of them see the same machine load:
//
//   - allowed: a decision of three rules (destination, IP, global), every
//     request allowed, by otpguard (one Allow: one script call), by
//     go-redis/redis_rate, ulule/limiter and throttled (one call per rule)
//     by a hand-written Lua script touching the same three keys (the
//     floor), and by the contract's floor (the script that also reads
//     Redis's clock and answers each rule, its caller hashing the
//     identifiers), at concurrency 1, 32 and 128;
//
//   - attack: the same three rules with real limits, 95% of requests from
//     subjects already over them, otpguard with and without its deny
//     cache, and redis_rate;
//
//   - memory: bytes of Redis memory per (rule, subject), per algorithm;
//
//   - cluster: one hot global rule on the cluster, with and without
//     leases.
//
//   - instructions, parts, client: instructions per call counted under
//     valgrind, redis-server's and the guard's own (see instructions.go,
//     client.go).
//
//     go run . [-duration 3s] [-rounds 3] [-only allowed,attack,login,memory,cluster,http,cost,instructions,client,parts]
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"hash"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	throttledstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulule "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var (
	duration = flag.Duration("duration", 3*time.Second, "how long each measurement runs")
	rounds   = flag.Int("rounds", 5, "measurements of each case; the median round is reported")
	only     = flag.String("only", "allowed,attack,login,memory,cluster,http,cost,instructions,client", "the sections to run")
	cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the benchmark process to this file")
)

const secret = "bench-secret-0123456789"

// decider makes the i-th decision; allowed reports its answer.
type decider func(ctx context.Context, i int) (allowed bool, err error)

type impl struct {
	name string
	f    decider
}

func run() error {
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	b := &bench{srv: srv, medians: map[string]result{}}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	fmt.Printf("redis-server %s on loopback, sharing this machine's cores with the client; %d rounds of %s per case, interleaved, median round shown\n",
		redisVersion(ctx, admin), *rounds, *duration)
	for _, s := range strings.Split(*only, ",") {
		var err error
		switch s {
		case "allowed":
			err = b.allowed(ctx)
		case "attack":
			err = b.attack(ctx)
		case "login":
			err = b.login(ctx)
		case "memory":
			err = b.memory(ctx)
		case "cluster":
			err = b.cluster(ctx)
		case "http":
			err = b.httpSends(ctx)
		case "cost":
			err = b.cost(ctx)
		case "instructions":
			err = b.instructions(ctx)
		case "parts":
			err = b.parts(ctx)
		case "client":
			err = b.clientInstructions(ctx)
		default:
			err = fmt.Errorf("unknown section %q", s)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	b.targets()
	return nil
}

type bench struct {
	srv       *redistest.Server
	trips     atomic.Int64
	serverPid int // the built server's, while one runs (startServer)
	// medians are the median rounds of each case, by section title's
	// first word, concurrency and implementation: what targets reads.
	medians map[string]result
	// httpCPU is the built server's CPU per request (http), 0 when not run.
	httpCPU float64
	// httpPlainCPU is plainsend's, measured beside it.
	httpPlainCPU float64
}

// client is a client of the bench's redis-server for one implementation:
// every implementation gets the same options, RESP2 included, as the
// product's own client speaks it (redisstore.NewClient).
func (b *bench) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: b.srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true, Protocol: 2})
	c.AddHook(redistest.RoundTrips{N: &b.trips})
	return c
}

// subjects are the requests' subjects: user i at 10.x.y.z.
const subjects = 10000

func requests(action string) []guard.Request { return requestsN(action, subjects) }

// legit is the number of legitimate subjects of the attack mix.
const legit = 300000

func requestsN(action string, n int) []guard.Request {
	reqs := make([]guard.Request, n)
	for i := range reqs {
		d, _ := identity.ParseEmail(fmt.Sprintf("user%d@example.com", i))
		reqs[i] = guard.Request{Action: action, Subject: guard.Subject{Destination: d, IP: benchIP(i)}}
	}
	return reqs
}

// benchIP is the i-th subject's address (10.0.0.0/8).
func benchIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// signIn is a login as the API makes it: a decision and, the password
// being right, its settlement as a success.
func signIn(ctx context.Context, g *guard.Guard, r guard.Request) (bool, error) {
	d, err := g.Allow(ctx, r)
	if err != nil || !d.Allowed {
		return false, err
	}
	_, err = g.Settle(ctx, r, d, guard.Success)
	return true, err
}

func keysOf(n int) [3]string {
	return [3]string{fmt.Sprintf("dest:user%d@example.com", n), fmt.Sprintf("ip:10.%d.%d.%d", n>>16&255, n>>8&255, n&255), "global"}
}

func newGuard(ctx context.Context, rdb redis.UniversalClient, doc string) (*guard.Guard, error) {
	return newGuardCoalesced(ctx, rdb, doc, 0)
}

// newGuardCoalesced is newGuard whose store sends the calls that arrive
// together as one pipeline, through up to lanes batches at once
// (redisstore.Options.Coalesce, as the local server does).
func newGuardCoalesced(ctx context.Context, rdb redis.UniversalClient, doc string, lanes int) (*guard.Guard, error) {
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		return nil, err
	}
	st := redisstore.New(rdb, redisstore.Options{Coalesce: lanes})
	if err := st.Preload(ctx); err != nil {
		return nil, err
	}
	return guard.New(cfg.Engine(), st, guard.Options{Secret: []byte(secret), Backstop: memstore.New(nil)})
}

func otpguard(g *guard.Guard, reqs []guard.Request, pick func(int) int) decider {
	return func(ctx context.Context, i int) (bool, error) {
		d, err := g.Allow(ctx, reqs[pick(i)])
		return d.Allowed, err
	}
}

// The peers, one call per rule, stopping at the first denial.
func redisRate(rdb *redis.Client, limit redis_rate.Limit, pick func(int) int) decider {
	lim := redis_rate.NewLimiter(rdb)
	return func(ctx context.Context, i int) (bool, error) {
		for _, key := range keysOf(pick(i)) {
			r, err := lim.Allow(ctx, key, limit)
			if err != nil || r.Allowed == 0 {
				return false, err
			}
		}
		return true, nil
	}
}

func ululeLimiter(rdb *redis.Client, rate limiter.Rate, pick func(int) int) (decider, error) {
	st, err := ulule.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule", MaxRetry: 3})
	if err != nil {
		return nil, err
	}
	lim := limiter.New(st, rate)
	return func(ctx context.Context, i int) (bool, error) {
		for _, key := range keysOf(pick(i)) {
			r, err := lim.Get(ctx, key)
			if err != nil || r.Reached {
				return false, err
			}
		}
		return true, nil
	}, nil
}

func throttledLimiter(rdb *redis.Client, quota throttled.RateQuota, pick func(int) int) (decider, error) {
	st, err := throttledstore.NewCtx(rdb, "throttled:")
	if err != nil {
		return nil, err
	}
	lim, err := throttled.NewGCRARateLimiterCtx(st, quota)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int) (bool, error) {
		for _, key := range keysOf(pick(i)) {
			limited, _, err := lim.RateLimitCtx(ctx, key, 1)
			if err != nil && strings.Contains(err.Error(), "Failed to store updated rate limit data") {
				// Its compare-and-set gave up on a contended key (the
				// global one): counted as not allowed, shown in "allowed".
				return false, nil
			}
			if err != nil || limited {
				return false, err
			}
		}
		return true, nil
	}, nil
}

// rawLua is the floor: one script, the three keys, a fixed window each
// (INCR, PEXPIRE when new), no hashing, no parsing, no results.
const rawLua = `
for i = 1, 3 do
  local n = redis.call('INCR', KEYS[i])
  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end
  if n > tonumber(ARGV[1]) then return 0 end
end
return 1`

// contractLua is the contract's floor: what any decision of these 3 rules
// that answers as docs/contract.md asks must do in Redis, and nothing
// more. It reads Redis's clock (TIME: a window's time is Redis's, not a
// client's), takes the three counters as the floor does, and answers
// the decision as the library's batch does: 20 integers (allowed, the
// time, and each rule's allowed, remaining, reset, retry-after, lockout
// and take), packed into one string.
const contractLua = `
local t = redis.call('TIME')
local o = {1, tonumber(t[1]) * 1000000 + tonumber(t[2])}
for i = 1, 3 do
  local n = redis.call('INCRBY', KEYS[i], '1')
  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end
  local j = 2 + 6 * (i - 1)
  o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5], o[j + 6] = 1, 1000000000 - n, 3600000000, 0, 0, 1
end
return struct.pack('>llllllllllllllllllll', unpack(o, 1, 20))`

// contract runs contractLua with the client's share of the same floor:
// the identifiers keyed-hashed into the keys (no clear identifier in a
// Redis key), and the answer unpacked.
func contract(rdb *redis.Client, pick func(int) int) decider {
	s := redis.NewScript(contractLua)
	macs := sync.Pool{New: func() any { return hmac.New(sha256.New, []byte("bench-secret-0123456789")) }}
	tag := func(prefix, id string) string {
		m := macs.Get().(hash.Hash)
		defer macs.Put(m)
		m.Reset()
		m.Write([]byte(id))
		var sum [sha256.Size]byte
		return prefix + base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:16])
	}
	return func(ctx context.Context, i int) (bool, error) {
		n := pick(i)
		keys := []string{tag("c:d:", fmt.Sprintf("user%d@example.com", n)), tag("c:i:", fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)), "c:g"}
		v, err := s.Run(ctx, rdb, keys).Text()
		if err != nil {
			return false, err
		}
		if len(v) != 160 {
			return false, fmt.Errorf("contract floor: an answer of %d bytes", len(v))
		}
		var out [20]int64
		for j := range out {
			out[j] = int64(binary.BigEndian.Uint64([]byte(v[8*j:])))
		}
		return out[0] == 1 && out[2] == 1 && out[8] == 1 && out[14] == 1, nil
	}
}

func raw(rdb *redis.Client, pick func(int) int) decider {
	s := redis.NewScript(rawLua)
	return func(ctx context.Context, i int) (bool, error) {
		k := keysOf(pick(i))
		n, err := s.Run(ctx, rdb, k[:], 1000000000).Int()
		return n == 1, err
	}
}

// result is one measurement.
type result struct {
	perSec     float64
	p50, p99   time.Duration
	tripsPerOp float64
	serverUS   float64 // redis-server time in commands per decision, from INFO commandstats
	serverCPU  float64 // redis-server process CPU per decision (user + system, INFO cpu)
	clientCPU  float64 // this process's CPU per decision (user + system, getrusage: the client and the load)
	allowed    float64 // share of decisions allowed
}

func (b *bench) measure(ctx context.Context, admin *redis.Client, f decider, conc int) (result, error) {
	if _, _, _, err := load(ctx, f, conc, 300*time.Millisecond); err != nil { // warm up: connections, scripts
		return result{}, err
	}
	b.trips.Store(0)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, err
	}
	cpu0, err := serverCPU(ctx, admin)
	if err != nil {
		return result{}, err
	}
	self0 := testutil.CPUTime()
	lat, allowed, elapsed, err := load(ctx, f, conc, *duration)
	if err != nil {
		return result{}, err
	}
	self1 := testutil.CPUTime()
	cpu1, err := serverCPU(ctx, admin)
	if err != nil {
		return result{}, err
	}
	usec, err := serverMicros(ctx, admin)
	if err != nil {
		return result{}, err
	}
	slices.Sort(lat)
	n := float64(len(lat))
	return result{perSec: n / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100],
		tripsPerOp: float64(b.trips.Load()) / n, serverUS: usec / n, serverCPU: (cpu1 - cpu0) / n, clientCPU: float64(self1-self0) / float64(time.Microsecond) / n, allowed: float64(allowed) / n}, nil
}

// compare measures impls at each concurrency, rounds times interleaved,
// and prints the median rounds; ratios are against base.
func (b *bench) compare(ctx context.Context, title string, impls []impl, concs []int, base string) error {
	admin := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer admin.Close()
	fmt.Printf("\n%s\n\n", title)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\timplementation\tdecisions/s\tp50\tp99\tround trips/decision\tredis-server CPU µs/decision\tin commands µs/decision\tclient CPU µs/decision\tallowed\tthroughput vs "+base+"\t")
	for _, conc := range concs {
		all := make([][]result, len(impls))
		for range *rounds {
			for k, im := range impls {
				r, err := b.measure(ctx, admin, im.f, conc)
				if err != nil {
					return fmt.Errorf("%s: %w", im.name, err)
				}
				all[k] = append(all[k], r)
			}
		}
		med := make([]result, len(impls))
		var baseRate float64
		for k, rs := range all {
			sort.Slice(rs, func(i, j int) bool { return rs[i].perSec < rs[j].perSec })
			med[k] = rs[len(rs)/2]
			if impls[k].name == base {
				baseRate = med[k].perSec
			}
		}
		section, _, _ := strings.Cut(title, ":")
		for k, im := range impls {
			r := med[k]
			b.medians[fmt.Sprintf("%s/%d/%s", section, conc, im.name)] = r
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f%%\t%.2f×\t\n", conc, im.name, r.perSec,
				r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.tripsPerOp, r.serverCPU, r.serverUS, r.clientCPU, 100*r.allowed, r.perSec/baseRate)
		}
	}
	return tw.Flush()
}

func (b *bench) allowed(ctx context.Context) error {
	const doc = `
store: {timeout: 5s}
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`
	ident := func(i int) int { return i % subjects }
	gc, cc, rc, uc, tc, lc := b.client(), b.client(), b.client(), b.client(), b.client(), b.client()
	defer func() {
		gc.Close()
		cc.Close()
		rc.Close()
		uc.Close()
		tc.Close()
		lc.Close()
	}()
	g, err := newGuard(ctx, gc, doc)
	if err != nil {
		return err
	}
	coalesced, err := newGuardCoalesced(ctx, cc, doc, 2)
	if err != nil {
		return err
	}
	u, err := ululeLimiter(uc, limiter.Rate{Period: time.Hour, Limit: 1000000000}, ident)
	if err != nil {
		return err
	}
	th, err := throttledLimiter(tc, throttled.RateQuota{MaxRate: throttled.PerHour(1000000000), MaxBurst: 1000000000}, ident)
	if err != nil {
		return err
	}
	return b.compare(ctx, "allowed: one decision = 3 rules (destination, IP, global), fixed window (otpguard, raw Lua, ulule) or GCRA (redis_rate, throttled), every request allowed", []impl{
		{"otpguard", otpguard(g, requests("bench"), ident)},
		{"otpguard coalesced", otpguard(coalesced, requests("bench"), ident)},
		{"redis_rate ×3", redisRate(rc, redis_rate.Limit{Rate: 1000000000, Burst: 1000000000, Period: time.Hour}, ident)},
		{"ulule/limiter ×3", u},
		{"throttled ×3", th},
		{"raw Lua (floor)", raw(lc, ident)},
		{"contract floor", contract(lc, ident)},
	}, []int{1, 32, 128}, "redis_rate ×3")
}

// login: a login as the API makes it, a decision and, the password being
// right, its settlement as a success, under the default rules before the
// network rules (docs/contract.md §7: 6 login rules) and now (the network
// ratio and the networks per account for untrusted clients, the
// per-device lockout),
// from an untrusted client and from a trusted device (whose decision
// carries the device check and the conditional ops in the same call).
func (b *bench) login(ctx context.Context) error {
	prev, err := os.ReadFile("../../cmd/simulate/previous-defaults.yaml")
	if err != nil {
		return err
	}
	pc, nc, tc := b.client(), b.client(), b.client()
	defer func() { pc.Close(); nc.Close(); tc.Close() }()
	gPrev, err := newGuard(ctx, pc, string(prev))
	if err != nil {
		return err
	}
	gNew, err := newGuard(ctx, nc, "")
	if err != nil {
		return err
	}
	gTrusted, err := newGuard(ctx, tc, "")
	if err != nil {
		return err
	}
	reqs := make([]guard.Request, subjects)
	trusted := make([]guard.Request, subjects)
	for i := range reqs {
		reqs[i] = guard.Request{Action: "login", Subject: guard.Subject{Account: fmt.Sprintf("user%d@example.com", i), IP: benchIP(i)}}
		trusted[i] = reqs[i]
		if trusted[i].Device, err = gTrusted.DeviceToken(reqs[i].Subject.Account, "", time.Now()); err != nil {
			return err
		}
	}
	ident := func(i int) int { return i % subjects }
	login := func(g *guard.Guard, reqs []guard.Request) decider {
		return func(ctx context.Context, i int) (bool, error) { return signIn(ctx, g, reqs[ident(i)]) }
	}
	return b.compare(ctx, "login: a decision and its settlement as a success (2 calls), under the default login rules before and after the network rules", []impl{
		{"previous defaults (6 rules)", login(gPrev, reqs)},
		{"defaults, untrusted (8 rules)", login(gNew, reqs)},
		{"defaults, trusted device", login(gTrusted, trusted)},
	}, []int{1, 32}, "previous defaults (6 rules)")
}

// attack: 95% of requests come from 500 subjects already over their
// per-destination limit, 5% from 300000 others, taken in turn so that none
// of them reaches its limit during the run: the legitimate traffic stays
// allowed, as it would be.
func (b *bench) attack(ctx context.Context) error {
	rules := `
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 5, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`
	pick := func(i int) int {
		h := uint64(i) * 0x9E3779B97F4A7C15
		if h%100 < 95 {
			return int(h>>32) % 500 // an attacker
		}
		return 500 + i%legit
	}
	gc, cc, nc, rc := b.client(), b.client(), b.client(), b.client()
	defer func() { gc.Close(); cc.Close(); nc.Close(); rc.Close() }()
	cached, err := newGuard(ctx, gc, "store: {timeout: 5s, denyCache: {ttl: 2s, size: 100000}}\n"+rules)
	if err != nil {
		return err
	}
	coalesced, err := newGuardCoalesced(ctx, cc, "store: {timeout: 5s, denyCache: {ttl: 2s, size: 100000}}\n"+rules, 2)
	if err != nil {
		return err
	}
	uncached, err := newGuard(ctx, nc, "store: {timeout: 5s, denyCache: {ttl: 0s}}\n"+rules)
	if err != nil {
		return err
	}
	reqs := requestsN("bench", 500+legit)
	// The attackers are over their limit before the measurement (the
	// legitimate 9500 subjects would need 5 requests each in one round
	// of a few seconds to reach it: they do not).
	for i := range 500 {
		for range 6 {
			if _, err := cached.Allow(ctx, reqs[i]); err != nil {
				return err
			}
		}
	}
	// redis_rate's attackers, over a limit of 5 an hour on destination.
	lim := redis_rate.NewLimiter(rc)
	limit := redis_rate.Limit{Rate: 5, Burst: 5, Period: time.Hour}
	for i := range 500 {
		for range 6 {
			if _, err := lim.Allow(ctx, keysOf(i)[0], limit); err != nil {
				return err
			}
		}
	}
	rr := func(ctx context.Context, i int) (bool, error) {
		n := pick(i)
		for k, key := range keysOf(n) {
			l := redis_rate.Limit{Rate: 1000000000, Burst: 1000000000, Period: time.Hour}
			if k == 0 {
				l = limit
			}
			r, err := lim.Allow(ctx, key, l)
			if err != nil || r.Allowed == 0 {
				return false, err
			}
		}
		return true, nil
	}
	return b.compare(ctx, "attack: the same 3 rules, per-destination 5 an hour; 95% of requests from 500 subjects already over it, 5% from others (allowed)", []impl{
		{"otpguard (deny cache)", otpguard(cached, reqs, pick)},
		{"otpguard (deny cache, coalesced)", otpguard(coalesced, reqs, pick)},
		{"otpguard (no deny cache)", otpguard(uncached, reqs, pick)},
		{"redis_rate ×3", rr},
	}, []int{32}, "redis_rate ×3")
}

// memory: Redis used_memory per (rule, subject), per algorithm.
func (b *bench) memory(ctx context.Context) error {
	c := b.client()
	defer c.Close()
	const n = 50000
	fmt.Printf("\nmemory: Redis used_memory per (rule, subject), %d subjects, one request each\n\n", n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rules\tbytes per (rule, subject)\t")
	reqs := requestsN("mem", n)
	for _, tc := range []struct{ name, rules string }{
		{"fixed_window", `[{name: r, action: mem, key: [destination], limit: 100, window: 1h}]`},
		{"token_bucket", `[{name: r, action: mem, key: [destination], limit: 100, window: 1h, algorithm: token_bucket}]`},
		{"sliding_window", `[{name: r, action: mem, key: [destination], limit: 100, window: 1h, algorithm: sliding_window}]`},
		{"sliding_log", `[{name: r, action: mem, key: [destination], limit: 100, window: 1h, algorithm: sliding_log}]`},
		{"distinct (1 value)", `[{name: r, action: mem, key: [destination], of: ip, limit: 100, window: 1h, algorithm: distinct}]`},
		{"fixed_window + token_bucket, one key (packed)", `[{name: a, action: mem, key: [destination], limit: 100, window: 1h},
  {name: b, action: mem, key: [destination], limit: 1000, window: 24h, algorithm: token_bucket}]`},
		{"fixed_window ×2 (hour, day), one key (packed)", `[{name: a, action: mem, key: [destination], limit: 100, window: 1h},
  {name: b, action: mem, key: [destination], limit: 1000, window: 24h}]`},
		{"token_bucket ×2, one key (packed)", `[{name: a, action: mem, key: [destination], limit: 100, window: 1h, algorithm: token_bucket},
  {name: b, action: mem, key: [destination], limit: 1000, window: 24h, algorithm: token_bucket}]`},
		{"sliding_window ×2, one key (packed)", `[{name: a, action: mem, key: [destination], limit: 100, window: 1h, algorithm: sliding_window},
  {name: b, action: mem, key: [destination], limit: 1000, window: 24h, algorithm: sliding_window}]`},
		{"fixed_window ×3 (minute, hour, day), one key (packed)", `[{name: a, action: mem, key: [destination], limit: 10, window: 1m},
  {name: b, action: mem, key: [destination], limit: 100, window: 1h}, {name: c, action: mem, key: [destination], limit: 1000, window: 24h}]`},
	} {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return err
		}
		g, err := newGuard(ctx, c, "store: {timeout: 5s}\nrules: "+tc.rules+"\n")
		if err != nil {
			return err
		}
		before, err := usedMemory(ctx, c)
		if err != nil {
			return err
		}
		for i := range n {
			if _, err := g.Allow(ctx, reqs[i]); err != nil {
				return err
			}
		}
		after, err := usedMemory(ctx, c)
		if err != nil {
			return err
		}
		perRule := float64(after-before) / float64(n) / float64(strings.Count(tc.rules, "name:"))
		fmt.Fprintf(tw, "%s\t%.0f\t\n", tc.name, perRule)
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return tw.Flush()
}

// cluster: one hot global counter on a 3-master cluster, with and
// without leases.
func (b *bench) cluster(ctx context.Context) error {
	cl, err := redistest.StartCluster(3)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("\ncluster: 3 masters; one decision = a global rule (one hot key) and a per-destination rule; concurrency 32\n\n")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "global rule\tdecisions/s\tp50\tp99\tround trips/decision\t")
	ident := func(i int) int { return i % subjects }
	var trips atomic.Int64
	for _, tc := range []struct{ name, lease string }{{"no lease", ""}, {"lease of 100", ", lease: {units: 100}"}} {
		var rs []result
		for range *rounds {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, PoolSize: 64,
				NewClient: func(o *redis.Options) *redis.Client {
					c := redis.NewClient(o)
					c.AddHook(redistest.RoundTrips{N: &trips})
					return c
				}})
			g, err := newGuard(ctx, rdb, `store: {timeout: 5s}
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h`+tc.lease+`}
`)
			if err != nil {
				return err
			}
			f := otpguard(g, requests("bench"), ident)
			if _, _, _, err := load(ctx, f, 32, 300*time.Millisecond); err != nil {
				return err
			}
			trips.Store(0)
			lat, _, elapsed, err := load(ctx, f, 32, *duration)
			if err != nil {
				return err
			}
			slices.Sort(lat)
			rs = append(rs, result{perSec: float64(len(lat)) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100],
				tripsPerOp: float64(trips.Load()) / float64(len(lat))})
			rdb.Close()
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].perSec < rs[j].perSec })
		r := rs[len(rs)/2]
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%.2f\t\n", tc.name, r.perSec, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.tripsPerOp)
	}
	return tw.Flush()
}

// load runs f from conc goroutines for d and returns every latency and
// how many were allowed.
func load(ctx context.Context, f decider, conc int, d time.Duration) ([]time.Duration, int, time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	allowed := 0
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 4096)
			ok := 0
			i := rand.IntN(1 << 20)
			for n := 0; time.Now().Before(deadline); n++ {
				t0 := time.Now()
				a, err := f(ctx, i+n*conc+w)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				if a {
					ok++
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			allowed += ok
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, allowed, time.Since(start), firstErr
}

// serverMicros is the CPU time redis-server spent in commands since the
// last CONFIG RESETSTAT.
func serverMicros(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for name, v := range info["Commandstats"] {
		if name == "cmdstat_config" || name == "cmdstat_info" {
			continue
		}
		var calls, usec float64
		if _, err := fmt.Sscanf(v, "calls=%g,usec=%g", &calls, &usec); err == nil {
			total += usec
		}
	}
	return total, nil
}

// serverCPU is redis-server's CPU time so far (used_cpu_user +
// used_cpu_sys), in µs: everything the server did, its network included,
// which INFO commandstats leaves out (and where a script's commands count
// inside the script's time and again on their own).
func serverCPU(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.InfoMap(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		var v float64
		if _, err := fmt.Sscan(info["CPU"][k], &v); err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		total += v
	}
	return total * 1e6, nil
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	_, err = fmt.Sscan(info["Memory"]["used_memory"], &n)
	return n, err
}

func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.InfoMap(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	return info["Server"]["redis_version"]
}

func newTable(header string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	return tw
}

// medianIndex is the index of the median round by throughput.
func medianIndex(rs []result) int {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return rs[idx[a]].perSec < rs[idx[b]].perSec })
	return idx[len(idx)/2]
}
