// Package users is the local authenticator of `make run` (AUTH=local):
// users in memory, or in a JSON-lines file of
//
//	{"username":"ann@example.com","passwordHash":"$2a$10$...","confirmed":true}
//
// with bcrypt hashes, which signup and confirmation append to (a later
// line for a user replaces an earlier one; a line without "confirmed", as
// files written before confirmation existed hold, is a confirmed user).
// Usernames match as identity.ParseAccount normalizes them (trimmed, NFKC,
// case-folded).
//
// A signup creates an unconfirmed user, which cannot log in until the
// code the API sends to the address is approved (Confirm): nobody takes
// an address without its mailbox. A signup for an unconfirmed address
// replaces its pending password (the mailbox's owner confirms the signup
// whose code they enter); for a confirmed one it changes nothing. Both
// answer alike and in the same time.
//
// bcrypt reads at most 72 bytes: a longer password is first hashed, and
// the hash marked with a NUL byte no password can hold (the API refuses
// NUL), so that no typed password, such as the hash's own text, logs in
// as a long one.
//
// A wrong password, an unknown user, an unconfirmed and a disabled one
// answer alike and in the same time: an unknown user costs a bcrypt
// comparison against a dummy hash of the same cost.
package users

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/identity"
)

// Store is the local users. It is safe for concurrent use.
type Store struct {
	cost  int
	dummy []byte // a hash no password matches, for unknown users
	mu    sync.RWMutex
	users map[string]*user // account → user
	file  *os.File         // nil: in memory only
}

type user struct {
	name      string // as typed at signup
	hash      []byte
	confirmed bool
}

type line struct {
	Username     string `json:"username"`
	PasswordHash string `json:"passwordHash"`
	Confirmed    *bool  `json:"confirmed,omitempty"`
}

// Open returns the users of the JSON-lines file at path (created when
// missing), or an empty in-memory store when path is "". cost is the
// bcrypt cost of new hashes (bcrypt.DefaultCost when 0).
func Open(path string, cost int) (*Store, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	dummy, err := bcrypt.GenerateFromPassword(secret[:16], cost)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	s := &Store{cost: cost, dummy: dummy, users: map[string]*user{}}
	if path == "" {
		return s, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("USERS_PATH: %w", err)
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Username == "" {
			f.Close()
			return nil, fmt.Errorf("USERS_PATH %s line %d: want {\"username\",\"passwordHash\"}", path, n)
		}
		if _, err := bcrypt.Cost([]byte(l.PasswordHash)); err != nil {
			f.Close()
			return nil, fmt.Errorf("USERS_PATH %s line %d: passwordHash is not a bcrypt hash", path, n)
		}
		acct, err := identity.ParseAccount(l.Username)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("USERS_PATH %s line %d: %w", path, n, err)
		}
		s.users[acct] = &user{name: l.Username, hash: []byte(l.PasswordHash), confirmed: l.Confirmed == nil || *l.Confirmed}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, fmt.Errorf("USERS_PATH: %w", err)
	}
	s.file = f
	return s, nil
}

// Close closes the users file.
func (s *Store) Close() error {
	if s.file == nil {
		return nil
	}
	return s.file.Close()
}

// Add creates or replaces a confirmed user (seeding and tests).
func (s *Store) Add(username, password string) error {
	acct, err := identity.ParseAccount(username)
	if err != nil {
		return err
	}
	h, err := bcrypt.GenerateFromPassword(prepare(password), s.cost)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(acct, &user{name: username, hash: h, confirmed: true})
}

// put records a user; the caller holds the lock.
func (s *Store) put(acct string, u *user) error {
	if s.file != nil {
		confirmed := u.confirmed
		b, _ := json.Marshal(line{Username: u.name, PasswordHash: string(u.hash), Confirmed: &confirmed})
		if _, err := s.file.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("users: append: %w", err)
		}
	}
	s.users[acct] = u
	return nil
}

// Login implements api.Authenticator: only a confirmed user with the
// right password logs in; every other case costs a bcrypt comparison and
// answers ErrInvalidCredentials.
func (s *Store) Login(_ context.Context, l authn.Login) (authn.LoginResult, error) {
	s.mu.RLock()
	u, ok := s.users[l.Account]
	h := s.dummy
	if ok {
		h = u.hash
		ok = u.confirmed
	}
	s.mu.RUnlock()
	if err := bcrypt.CompareHashAndPassword(h, prepare(l.Password)); err != nil || !ok {
		return authn.LoginResult{}, authn.ErrInvalidCredentials
	}
	// only a confirmed account logs in: its address is its owner's
	return authn.LoginResult{Token: true, VerifiedEmail: u.name}, nil
}

// SignUp implements api.Authenticator: a new user is created
// unconfirmed; an unconfirmed one gets the new password; a confirmed one
// is left as it is. The caller sends the address a code (purpose signup)
// whose approval confirms it (Confirm).
func (s *Store) SignUp(_ context.Context, su authn.SignUp) error {
	acct, err := identity.ParseAccount(su.Email)
	if err != nil {
		return fmt.Errorf("%w: %w", authn.ErrRejected, err)
	}
	h, err := bcrypt.GenerateFromPassword(prepare(su.Password), s.cost)
	if err != nil {
		return fmt.Errorf("%w: %w", authn.ErrRejected, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, exists := s.users[acct]; exists && u.confirmed {
		return nil // the same answer, and the account keeps its password
	}
	if err := s.put(acct, &user{name: su.Email, hash: h}); err != nil {
		return errors.Join(authn.ErrUnavailable, err)
	}
	return nil
}

// Confirm marks the user of address confirmed: its signup code was
// approved. An unknown or confirmed user changes nothing.
func (s *Store) Confirm(_ context.Context, address string) error {
	acct, err := identity.ParseAccount(address)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[acct]
	if !ok || u.confirmed {
		return nil
	}
	return s.put(acct, &user{name: u.name, hash: u.hash, confirmed: true})
}

// prepare is what bcrypt hashes of a password: itself up to 72 bytes,
// else a NUL byte and its SHA-256 in base64: no password the API accepts
// holds a NUL, so a long password's stand-in can never be typed.
func prepare(password string) []byte {
	if len(password) <= 72 {
		return []byte(password)
	}
	sum := sha256.Sum256([]byte(password))
	return append([]byte{0}, base64.StdEncoding.EncodeToString(sum[:])...)
}
