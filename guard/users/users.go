// Package users is the local authenticator of `make run` (AUTH=local):
// users in memory, or in a JSON-lines file of
//
//	{"username":"ann@example.com","passwordHash":"$2a$10$..."}
//
// with bcrypt hashes, which signup appends to. Usernames match as
// guard.ParseAccount normalizes them (trimmed, NFKC, case-folded).
//
// bcrypt reads at most 72 bytes: a longer password is first hashed with
// SHA-256 (base64, 44 bytes), so all of it counts. Shorter ones are
// hashed as they are, as other bcrypt tools do.
//
// A wrong password, an unknown user and a disabled one answer alike and
// in the same time: an unknown user costs a bcrypt comparison against a
// dummy hash of the same cost. A signup for a registered address changes
// nothing and takes the time of a new one (a hash is computed either way).
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

	"github.com/otpguard/otpguard/guard"
)

// Store is the local users. It is safe for concurrent use.
type Store struct {
	cost  int
	dummy []byte // a hash no password matches, for unknown users
	mu    sync.RWMutex
	users map[string][]byte // account → bcrypt hash
	file  *os.File          // nil: in memory only
}

type line struct {
	Username     string `json:"username"`
	PasswordHash string `json:"passwordHash"`
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
	s := &Store{cost: cost, dummy: dummy, users: map[string][]byte{}}
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
		acct, err := guard.ParseAccount(l.Username)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("USERS_PATH %s line %d: %w", path, n, err)
		}
		s.users[acct] = []byte(l.PasswordHash)
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

// Add creates or replaces a user (seeding and tests).
func (s *Store) Add(username, password string) error {
	acct, err := guard.ParseAccount(username)
	if err != nil {
		return err
	}
	h, err := bcrypt.GenerateFromPassword(prepare(password), s.cost)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(acct, username, h)
}

// put records a user; the caller holds the lock.
func (s *Store) put(acct, username string, hash []byte) error {
	if s.file != nil {
		b, _ := json.Marshal(line{Username: username, PasswordHash: string(hash)})
		if _, err := s.file.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("users: append: %w", err)
		}
	}
	s.users[acct] = hash
	return nil
}

// Login implements api.Authenticator.
func (s *Store) Login(_ context.Context, l guard.Login) (guard.LoginResult, error) {
	s.mu.RLock()
	h, ok := s.users[l.Account]
	s.mu.RUnlock()
	if !ok {
		h = s.dummy
	}
	if err := bcrypt.CompareHashAndPassword(h, prepare(l.Password)); err != nil || !ok {
		return guard.LoginResult{}, guard.ErrInvalidCredentials
	}
	return guard.LoginResult{Token: true}, nil
}

// SignUp implements api.Authenticator: the user is created, confirmed.
func (s *Store) SignUp(_ context.Context, su guard.SignUp) error {
	acct, err := guard.ParseAccount(su.Email)
	if err != nil {
		return fmt.Errorf("%w: %w", guard.ErrRejected, err)
	}
	h, err := bcrypt.GenerateFromPassword(prepare(su.Password), s.cost)
	if err != nil {
		return fmt.Errorf("%w: %w", guard.ErrRejected, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, exists := s.users[acct]; exists {
		return nil // the same answer, and the account keeps its password
	}
	if err := s.put(acct, su.Email, h); err != nil {
		return errors.Join(guard.ErrAuthUnavailable, err)
	}
	return nil
}

// prepare is what bcrypt hashes of a password: itself up to 72 bytes,
// else its SHA-256 in base64.
func prepare(password string) []byte {
	if len(password) <= 72 {
		return []byte(password)
	}
	sum := sha256.Sum256([]byte(password))
	return []byte(base64.StdEncoding.EncodeToString(sum[:]))
}
