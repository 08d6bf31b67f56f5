// Package guard decides whether an attempt at an action (a code sent, a
// code checked, a login, a signup, any action of yours) may proceed, by
// rules counted in a store (Redis) per identifier: per email or phone,
// per IP and IP network, per account, per phone country and prefix, and
// globally. It is the domain of otpguard: no HTTP, no AWS, no Redis key
// format, no YAML; package store is the protocol a store implements
// (store.Store, store.Op), package redisstore the Store on Redis, package
// memstore the in-process backstop, package api the HTTP API around it.
//
// A Guard runs by a [Config]: its rules and the few settings the engine
// reads (the store timeout, the deny cache, the IPv6 prefix, the device
// token lifetime). The product's configuration document, of which these
// are a part, is package config's: it parses, fills and validates the
// YAML and gives the engine its part (config.Config.Engine).
//
// # An attempt, from start to end
//
// A caller parses what it knows of the subject (guard/identity:
// ParseEmail, ParsePhone, ParseIP, ParseAccount: normalization closes the
// bypasses, see docs/contract.md §4) and asks:
//
//	d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: s})
//
// Allow applies every rule of the action whose `when` filters the request
// passes, in one round trip to Redis on a single node (two phases on a
// cluster: see redisstore). The attempt is allowed only if every enforcing
// rule allows; then every rule consumed one unit. A denied attempt
// consumes nothing, of any rule, so a blocked client hammering a victim's
// address leaves the victim's budget whole. d.RetryAfter says when to
// come back; d.Rules tells each rule's part (read it only: a denial the
// deny cache answers shares its Rules with the same entry's other answers
// for up to 100ms; see Decision.Rules).
//
// The attempt then ends in one of three ways:
//
//   - Settle(ctx, req, d, outcome) reports how it ended, for the
//     failure-counting rules (count: failures), which counted the attempt
//     as a failure when they admitted it (so their limits hold under any
//     concurrency):
//     Failure keeps it, and on a rule with a lockout may start one;
//     Success gives it back (and clears a resetOnSuccess rule's failures
//     and lockout history: the pair is proven);
//     Stray keeps it only on the rules not keyed on what the subject owns
//     (a guess at a code nobody sent counts against the IP, not against
//     the address);
//     Void gives back everything the decision took, of every rule: the
//     attempt failed through no doing of the subject's (the authenticator
//     or the provider failed).
//     Pass the zero Decision when the decision is not at hand (an outcome
//     reported to another process): the store then assumes the attempt
//     was counted in the current window.
//   - Release(ctx, req, d.Lease) gives back a concurrency rule's lease.
//   - Nothing: a request-count rule's unit stays spent.
//
// Settle and Release outlive the request: give them a context the
// client's hang-up does not cancel.
//
// A lockout starts when a rule's failures reach its limit and lasts
// initial, then initial×factor for each further lockout within reset, up
// to max. It does not hand out a fresh budget when it ends: within reset,
// the next failure locks again at once, for the next duration, so an
// attacker gets one try per lockout, not limit tries.
//
// An administrator reads a subject's state with Status and clears it
// with Unblock (counters, lockouts, lockout history).
//
// # Inside Allow
//
// AllowN runs five steps:
//
//  1. Remembered: a denial this process remembers (the deny cache)
//     answers without Redis.
//  2. Plan: one operation per rule; a rule with a lease may be paid from
//     units this process already took.
//  3. Decide: Redis decides. Only when Redis fails does the backstop
//     decide, for the rules with onStoreError allow; the others deny.
//  4. Decision: the results in configuration order.
//  5. Learn: the leases and the deny cache learn from the decision.
//
// # What a process keeps, and the rule that keeps it true to Redis
//
// Three things live in a process. Each is a copy of what Redis said,
// never a second opinion: while Redis answers, Redis alone decides. One
// place, Guard.apply, makes every change to the store outside a decision
// (a strike, a refund, a release, an unblock) and to the copies with it.
//
//   - The deny cache remembers denials that time alone ends (a
//     request-count rule at its limit), for at most store.denyCache.ttl,
//     keyed by the rule, the subject and, for a distinct rule, the value.
//     It never remembers a lockout or a failure count, which a success,
//     an outcome reported elsewhere or an administrator can end at any
//     moment. A refund, release or unblock through this process drops the
//     entry; an unblock through another process reaches this one through
//     Options.Unblocked and Forget (Redis pub/sub in the App); a Redis
//     that lost its data is seen when the subscription reconnects
//     (ForgetAll), or within the ttl.
//   - Leases are blocks of a hot rule's units this process took ahead
//     (lease: {units}); an unblock drops them.
//   - The backstop (Options.Backstop, memstore) decides only while Redis
//     fails. Until then it is told what Redis answered for each rule that
//     falls back on it (Mirror), and each change apply makes; it counts
//     the takes in flight to Redis as taken (Begin), so that a burst
//     whose calls time out is not admitted by Redis and then again by the
//     backstop. It never vetoes an answer Redis gave.
//
// # Distributed attacks (docs/contract.md §7)
//
// Network dimensions (ip/24, ip/16, asn through Options.Networks) group
// an attacker's addresses. A ratio rule counts attempts and failures over
// a sliding window and denies a network where most fail. A device token
// ([Guard.DeviceToken], in Request.Device) is judged by the store in the
// decision's own call: the batch starts with a device check (the token's
// issue time against the account's revocation time and the lifetime), and
// the ops of the rules filtered or keyed on the device carry a condition
// on its answer; a rule keyed on the device has two ops, the trusted
// device's state and the untrusted clients' shared one, of which one
// applies. A send's [Guard.Receipt] is kept with its code, and the verify
// that approves it settles the send ([Guard.SettleReceipt]): a success
// gives the failure back and, on an elastic rule, counts it verified.
//
// # Time
//
// Every window, token bucket and lockout runs on the store's clock
// (Redis's TIME, or the server's time measured outside a script where
// scripts may not read it), never a container's: two containers whose
// clocks differ count alike. The process's clock only measures durations
// the store reported (the deny cache, leases).
package guard
