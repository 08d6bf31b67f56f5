package guard_test

import (
	"fmt"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/identity"
)

// Variants of one mailbox are counted as one; mail still goes to the
// address as typed, with its domain normalized.
func ExampleParseEmail() {
	for _, s := range []string{"Victim+promo@GoogleMail.com", "v.i.c.t.i.m@gmail.com", "ｖｉｃｔｉｍ@bücher.de"} {
		d, err := identity.ParseEmail(s)
		fmt.Println(d.Address, d.Key, err)
	}
	_, err := identity.ParseEmail("vic\u200btim@gmail.com")
	fmt.Println(err)
	// Output:
	// Victim+promo@googlemail.com victim@gmail.com <nil>
	// v.i.c.t.i.m@gmail.com victim@gmail.com <nil>
	// victim@xn--bcher-kva.de victim@xn--bcher-kva.de <nil>
	// invalid input: email contains control or invisible characters
}

func ExampleParsePhone() {
	cfg := config.Default()
	policy := cfg.OTP.SMS.Policy()
	for _, s := range []string{"(201) 555-0123", "+44 7400 123456", "+1 900 555 0123"} {
		d, err := identity.ParsePhone(s, policy)
		fmt.Println(d.Address, d.Country, d.Prefix, err)
	}
	// Output:
	// +12015550123 US +1201555 <nil>
	// +447400123456 GB +44740012 <nil>
	//    invalid input: SMS to premium rate numbers is not allowed
}
