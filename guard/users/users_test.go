package users

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/authn"
	"golang.org/x/crypto/bcrypt"
)

func login(s *Store, user, pass string) error {
	_, err := s.Login(context.Background(), authn.Login{Account: user, Password: pass})
	return err
}

// TestALongPasswordsStandInCannotBeTyped: a password over bcrypt's 72
// bytes is hashed first; the reviewed code hashed base64(sha256(P)), so
// typing that 44-character string logged in as P. The stand-in now holds
// a NUL, which no password can.
func TestALongPasswordsStandInCannotBeTyped(t *testing.T) {
	s, err := Open("", bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("correct horse battery staple ", 4) // 116 bytes
	if err := s.Add("long@example.com", long); err != nil {
		t.Fatal(err)
	}
	if err := login(s, "long@example.com", long); err != nil {
		t.Fatalf("the long password: %v", err)
	}
	sum := sha256.Sum256([]byte(long))
	if err := login(s, "long@example.com", base64.StdEncoding.EncodeToString(sum[:])); !errors.Is(err, authn.ErrInvalidCredentials) {
		t.Fatalf("base64(sha256(P)) logs in as P: %v", err)
	}
	if err := login(s, "long@example.com", long[:72]); !errors.Is(err, authn.ErrInvalidCredentials) {
		t.Fatalf("the first 72 bytes log in: %v", err)
	}
}

// TestNobodyTakesAnAddressWithoutItsMailbox: a signup creates an
// unconfirmed account that does not log in until its code is approved; a
// signup for an unconfirmed address replaces the pending password (the
// mailbox's owner confirms the signup whose code they enter); a confirmed
// account is never changed. The file keeps it all across a restart.
func TestNobodyTakesAnAddressWithoutItsMailbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.jsonl")
	s, err := Open(path, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	su := func(pass string) {
		if err := s.SignUp(ctx, authn.SignUp{Email: "victim@corp.example", Password: pass}); err != nil {
			t.Fatal(err)
		}
	}
	su("the stranger's password")
	if err := login(s, "victim@corp.example", "the stranger's password"); !errors.Is(err, authn.ErrInvalidCredentials) {
		t.Fatalf("an unconfirmed signup logs in: %v", err)
	}
	su("the owner's password")
	if err := s.Confirm(ctx, "Victim@corp.example"); err != nil {
		t.Fatal(err)
	}
	if err := login(s, "victim@corp.example", "the owner's password"); err != nil {
		t.Fatalf("the confirmed owner: %v", err)
	}
	if err := login(s, "victim@corp.example", "the stranger's password"); err == nil {
		t.Fatal("the stranger's password logs in")
	}
	su("a later stranger's password")
	if err := login(s, "victim@corp.example", "a later stranger's password"); err == nil {
		t.Fatal("a signup changed a confirmed account")
	}
	s.Close()
	again, err := Open(path, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := login(again, "victim@corp.example", "the owner's password"); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}
