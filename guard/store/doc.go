// Package store is the protocol between the engine (package guard) and
// the stores that keep its rules' state: what a store must implement
// ([Store], and [Backstop] for the in-process one) and the batch it
// applies ([Op], [OpResult]), with what a store needs to know of a rule
// ([Spec]: its [Algorithm], limit, window, [Lockout]...). Package
// redisstore is the production Store on Redis, package memstore the
// in-process backstop with the same semantics, internal/oracle the
// reference model both are checked against.
//
// A decision is one call to [Store.Do]: one Op per rule, applied
// atomically with respect to its Take and Peek operations (every Take is
// applied only if no enforcing Op denies), so a denied attempt consumes
// nothing of any rule. Settling an attempt (Strike, Refund, Cancel,
// Release, Commit) and an administrator's Unblock are batches too.
//
// # Time
//
// Every window, token bucket and lockout runs on the store's clock
// (Redis's TIME, or the server's time measured outside a script where
// scripts may not read it), never a container's: two containers whose
// clocks differ count alike. [OpResult.Now] reports it; [Op.At] names a
// take by it.
//
// This package holds no logic but [Clock]'s estimate: the algorithms
// are the stores'.
package store
