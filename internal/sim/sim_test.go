package sim

import (
	"context"
	"testing"

	"github.com/otpguard/otpguard/config"
)

func run(t *testing.T, name, doc string, seed uint64) *Result {
	t.Helper()
	return runScaled(t, name, doc, seed, 0.5)
}

func runScaled(t *testing.T, name, doc string, seed uint64, scale float64) *Result {
	t.Helper()
	return runSized(t, name, doc, seed, 2000, scale)
}

func runSized(t *testing.T, name, doc string, seed uint64, users int, scale float64) *Result {
	t.Helper()
	cfg := config.Default()
	if doc != "" {
		var err error
		if cfg, err = config.Parse([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Run(context.Background(), name, cfg, Options{Seed: seed, Users: users, Scale: scale})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The same seed gives the same day, to the request.
func TestSameSeedSameTable(t *testing.T) {
	a, b := run(t, "default", "", 7), run(t, "default", "", 7)
	if ta, tb := Table([]*Result{a}), Table([]*Result{b}); ta != tb {
		t.Fatalf("two runs with seed 7:\n%s\n%s", ta, tb)
	}
	if c := run(t, "default", "", 8); Table([]*Result{c}) == Table([]*Result{a}) {
		t.Error("seeds 7 and 8 gave the same day: the seed is not used")
	}
}

// With no guard, every attack gets what it is after; the default rules
// cut them down, and the trusted devices get in through a lockout-DoS.
func TestEachAttackSucceedsWithoutAGuard(t *testing.T) {
	none := run(t, "no guard", "rules: []\n", 1)
	def := run(t, "default + ASN db", "network: {asnDatabase: simulated}\n", 1)
	// pumping through a user pool's custom SMS sender (no client address)
	// is held to what /v1/otp/send lets through
	if c, p := def.Attacks[PumpingCognito].Succeeded, def.Attacks[Pumping].Succeeded; c > p+p/10+1 {
		t.Errorf("pumping through Cognito's sign-up delivered %d SMS, through /v1/otp/send %d", c, p)
	}
	for _, a := range Attacks {
		s, d := none.Attacks[a], def.Attacks[a]
		if s.Attempts == 0 {
			t.Fatalf("%s: no attempts", a)
		}
		switch a {
		case Pumping, PumpingCognito, Bombing:
			if s.Succeeded != s.Attempts {
				t.Errorf("%s without a guard: %d of %d delivered", a, s.Succeeded, s.Attempts)
			}
			if d.Succeeded*10 > s.Succeeded {
				t.Errorf("%s: the default rules let %d of %d through", a, d.Succeeded, d.Attempts)
			}
		case BruteForce:
			// Six digits and five tries per code: a day of guessing
			// rarely finds one, with a guard or without. What a guard
			// changes is how many guesses are checked at all.
			if s.Admitted != s.Attempts || d.Admitted >= s.Admitted {
				t.Errorf("brute force: %d of %d checked without a guard, %d with", s.Admitted, s.Attempts, d.Admitted)
			}
		case LockoutDoS:
			if def.Victims == 0 || def.VictimsFirstTry != def.Victims {
				t.Errorf("lockout-DoS: %d of %d victims with a device token in at first try", def.VictimsFirstTry, def.Victims)
			}
			if def.VictimsNoToken == 0 || def.VictimsNoTokenIn*100 < def.VictimsNoToken*99 {
				t.Errorf("lockout-DoS: %d of %d victims without a device token, on a new network, in", def.VictimsNoTokenIn, def.VictimsNoToken)
			}
		case StuffAdapt, StuffRotate:
			if d.Succeeded*500 > d.Targets {
				t.Errorf("%s: the default rules let %d of %d accounts be taken", a, d.Succeeded, d.Targets)
			}
		default:
			if s.Succeeded == 0 {
				t.Errorf("%s without a guard took over no account (%d attempts)", a, s.Attempts)
			}
			if d.Succeeded*3 > s.Succeeded {
				t.Errorf("%s: the default rules let %d accounts be taken (%d without a guard)", a, d.Succeeded, s.Succeeded)
			}
		}
	}
	if none.Users == 0 || none.RefusedOnce != 0 {
		t.Errorf("without a guard, users: %d, refused %d", none.Users, none.RefusedOnce)
	}
}

// What the default rules may cost real users, with attacks in the
// proportion a day of 100,000 users meets them (the table's: make
// simulate): none refused on a quiet network, at most 0.1% refused at
// their first try, at most 2% of logins challenged.
func TestTheDefaultsSpareRealUsers(t *testing.T) {
	def := runSized(t, "default", "", 1, 10_000, 0.1)
	if def.QuietUsers == 0 || def.QuietRefused != 0 {
		t.Errorf("users of quiet networks: %d of %d refused", def.QuietRefused, def.QuietUsers)
	}
	if def.Logins == 0 || def.Challenged*50 > def.Logins {
		t.Errorf("legitimate logins challenged: %d of %d (%d of accounts under attack)", def.Challenged, def.Logins, def.ChallengedAttacked)
	}
	if def.RefusedFirst*1000 > def.Users {
		t.Errorf("users refused at their first try: %d of %d", def.RefusedFirst, def.Users)
	}
	t.Logf("%d users (%d on quiet networks, %d refused), %d of %d logins challenged, %d refused at their first try (by rule: %v)",
		def.Users, def.QuietUsers, def.QuietRefused, def.Challenged, def.Logins, def.RefusedFirst, def.RefusedBy)
}

// The retrying and the rotating attacker each find right passwords the
// step-up stops (what they retry); neither gets one account in.
func TestTheAdaptiveAttackersFindRightPasswordsAndTakeNothing(t *testing.T) {
	def := run(t, "default", "", 3)
	for _, a := range []string{StuffRetry, StuffRotate} {
		s := def.Attacks[a]
		if s.Challenged == 0 || s.Attempts <= s.Targets {
			t.Errorf("%s retried nothing: %d challenged, %d requests for %d pairs", a, s.Challenged, s.Attempts, s.Targets)
		}
		if s.Succeeded != 0 {
			t.Errorf("%s took %d accounts", a, s.Succeeded)
		}
	}
}
