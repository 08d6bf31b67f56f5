package phonenumbers

import "regexp"

// otpguard's fork keeps only the national-number matching of this file;
// upstream's PhoneNumberMatcher and its Leniency checks are unfinished
// there (stubs that return nil or false) and nothing here calls them.

// Returns whether the given national number (a string containing only decimal digits) matches
// the national number pattern defined in the given PhoneNumberDesc message.
func MatchNationalNumber(number string, numberDesc *PhoneNumberDesc, allowPrefixMatch bool) bool {
	nationalNumberPattern := numberDesc.GetNationalNumberPattern()
	// We don't want to consider it a prefix match when matching non-empty input against an empty pattern.
	if len(nationalNumberPattern) == 0 {
		return false
	}
	regex := regexFor(nationalNumberPattern)
	return match(number, regex, allowPrefixMatch)
}

func match(number string, pattern *regexp.Regexp, allowPrefixMatch bool) bool {
	ind := pattern.FindStringIndex(number)
	if len(ind) == 0 || ind[0] != 0 {
		return false
	}
	patP := `^(?:` + pattern.String() + `)$` // Strictly match
	pat := regexFor(patP)
	return pat.MatchString(number) || allowPrefixMatch
}
