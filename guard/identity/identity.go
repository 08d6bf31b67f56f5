// Package identity reads what a request names (an email, a phone
// number, an account, an IP, an AS number, a dimension's value) into the
// guard's subject, normalized: variants of one identity (case, +tags, Gmail
// dots, full-width forms, national phone formats) become one key, and what
// cannot be one (hidden characters, numbers of types or countries not
// accepted) is refused with an error wrapping guard.ErrInvalidInput.
package identity

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
	"golang.org/x/net/idna"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", guard.ErrInvalidInput, fmt.Sprintf(format, args...))
}

// Email limits (RFC 5321 section 4.5.3.1).
const (
	maxLocalPart = 64
	maxEmail     = 254
)

// hasHidden reports whether s holds a control character, an invisible
// format character (zero-width, bidi controls, soft hyphen…) or a line or
// paragraph separator: characters that make two strings look the same.
func hasHidden(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) ||
			unicode.Is(unicode.Variation_Selector, r) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// atext is the set of characters of an unquoted local part (RFC 5322).
func isAtext(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("!#$%&'*+-/=?^_`{|}~", r))
}

var emailIDNA = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.ValidateForRegistration(), idna.Transitional(false))

// ParseEmail normalizes an email address (docs/contract.md §4). It accepts only
// an unquoted ASCII local part: after NFKC, fullwidth and other compatibility
// forms have become ASCII, and a non-ASCII local part is refused rather than
// counted apart from its look-alikes.
func ParseEmail(s string) (guard.Destination, error) {
	if !utf8.ValidString(s) {
		return guard.Destination{}, invalid("email is not valid UTF-8")
	}
	s = strings.TrimSpace(s)
	if hasHidden(s) {
		return guard.Destination{}, invalid("email contains control or invisible characters")
	}
	s = norm.NFKC.String(s)
	if len(s) > 4*maxEmail {
		return guard.Destination{}, invalid("email is longer than %d characters", maxEmail)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return guard.Destination{}, invalid("email has no @")
	}
	local, domain := s[:at], s[at+1:]
	if local == "" || len(local) > maxLocalPart {
		return guard.Destination{}, invalid("email local part must be 1 to %d characters", maxLocalPart)
	}
	for _, r := range local {
		if r != '.' && !isAtext(r) {
			return guard.Destination{}, invalid("email local part holds %q; only unquoted ASCII addresses are accepted", r)
		}
	}
	if local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return guard.Destination{}, invalid("email local part has a misplaced dot")
	}
	domain, err := emailIDNA.ToASCII(strings.ToLower(strings.TrimSuffix(domain, ".")))
	if err != nil || domain == "" {
		return guard.Destination{}, invalid("email domain is not a valid domain name")
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return guard.Destination{}, invalid("email domain must have at least two labels")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return guard.Destination{}, invalid("email domain is not a valid host name")
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return guard.Destination{}, invalid("email domain has a numeric top-level label")
	}
	addr := local + "@" + domain
	if len(addr) > maxEmail {
		return guard.Destination{}, invalid("email is longer than %d characters", maxEmail)
	}

	return guard.Destination{Channel: message.Email, Address: addr, Key: emailKey(local, domain)}, nil
}

// emailKey is the key an address counts under: the local part lowercased
// and without its +tag, and for Gmail without its dots (both of Gmail's
// domains are one).
func emailKey(local, domain string) string {
	key := strings.ToLower(local)
	if i := strings.IndexByte(key, '+'); i > 0 {
		key = key[:i] // a local part that is all tag ("+x") stays as it is
	}
	if domain == "gmail.com" || domain == "googlemail.com" {
		if k := strings.ReplaceAll(key, ".", ""); k != "" {
			key = k
		}
		domain = "gmail.com"
	}
	return key + "@" + domain
}

// PhonePolicy says which phone numbers are accepted (otp.sms; package
// config gives a document's with its SMSConfig.Policy).
type PhonePolicy struct {
	// DefaultRegion reads national-format numbers, such as "US".
	DefaultRegion string
	// AllowedCountries lists accepted regions; empty means all.
	AllowedCountries []string
	// AllowedTypes lists accepted number types by name, see [PhoneTypes].
	AllowedTypes []string
}

var phoneTypeByName = map[string]phonenumbers.PhoneNumberType{
	"fixed_line":           phonenumbers.FIXED_LINE,
	"mobile":               phonenumbers.MOBILE,
	"fixed_line_or_mobile": phonenumbers.FIXED_LINE_OR_MOBILE,
	"toll_free":            phonenumbers.TOLL_FREE,
	"premium_rate":         phonenumbers.PREMIUM_RATE,
	"shared_cost":          phonenumbers.SHARED_COST,
	"voip":                 phonenumbers.VOIP,
	"personal_number":      phonenumbers.PERSONAL_NUMBER,
	"pager":                phonenumbers.PAGER,
	"uan":                  phonenumbers.UAN,
	"voicemail":            phonenumbers.VOICEMAIL,
}

// PhoneTypes lists the number type names otp.sms.allowedTypes accepts.
func PhoneTypes() []string {
	names := make([]string, 0, len(phoneTypeByName))
	for n := range phoneTypeByName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func phoneTypeName(t phonenumbers.PhoneNumberType) string {
	for n, v := range phoneTypeByName {
		if v == t {
			return n
		}
	}
	return "unknown"
}

// maxPhoneInput bounds what is handed to the parser.
const maxPhoneInput = 64

// ParsePhone normalizes a phone number to E.164 and checks it against the
// policy: invalid numbers, numbers of other types (premium rate, toll free,
// shared cost…) and numbers of regions not allowed are all ErrInvalidInput.
func ParsePhone(s string, p PhonePolicy) (guard.Destination, error) {
	if !utf8.ValidString(s) {
		return guard.Destination{}, invalid("phone number is not valid UTF-8")
	}
	s = strings.TrimSpace(s)
	if hasHidden(s) {
		return guard.Destination{}, invalid("phone number contains control or invisible characters")
	}
	s = norm.NFKC.String(s)
	if s == "" || len(s) > maxPhoneInput {
		return guard.Destination{}, invalid("phone number must be 1 to %d characters", maxPhoneInput)
	}
	if strings.ContainsFunc(s, unicode.IsLetter) && !strings.HasPrefix(strings.ToLower(s), "tel:") {
		return guard.Destination{}, invalid("phone number holds letters")
	}
	num, err := phonenumbers.Parse(s, p.DefaultRegion)
	if err != nil || !phonenumbers.IsValidNumber(num) {
		return guard.Destination{}, invalid("not a valid phone number")
	}
	region := phonenumbers.GetRegionCodeForNumber(num)
	typ := phoneTypeName(phonenumbers.GetNumberType(num))
	if len(p.AllowedCountries) > 0 && !slices.Contains(p.AllowedCountries, region) {
		return guard.Destination{}, invalid("SMS to region %s is not allowed", region)
	}
	if !slices.Contains(p.AllowedTypes, typ) {
		return guard.Destination{}, invalid("SMS to %s numbers is not allowed", strings.ReplaceAll(typ, "_", " "))
	}
	e164 := phonenumbers.Format(num, phonenumbers.E164)
	return guard.Destination{
		Channel: message.SMS,
		Address: e164,
		Key:     e164,
		Country: region,
		Prefix:  e164[:len(e164)-4],
		Type:    typ,
	}, nil
}

// ParseDestination reads an email for the email channel and a phone number
// for the sms channel.
func ParseDestination(ch message.Channel, s string, p PhonePolicy) (guard.Destination, error) {
	switch ch {
	case message.Email:
		return ParseEmail(s)
	case message.SMS:
		return ParsePhone(s, p)
	}
	return guard.Destination{}, invalid("unknown channel %q", ch)
}

// GuessDestination reads s as an email when it holds an @, else as a phone
// number; for requests that name a destination without its channel.
func GuessDestination(s string, p PhonePolicy) (guard.Destination, error) {
	if strings.Contains(s, "@") {
		return ParseEmail(s)
	}
	return ParsePhone(s, p)
}

const maxAccount = 256

var foldCase = cases.Fold()

// ParseAccount normalizes a username: trimmed, NFKC, case-folded.
func ParseAccount(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", invalid("account is not valid UTF-8")
	}
	s = strings.TrimSpace(s)
	if hasHidden(s) {
		return "", invalid("account contains control or invisible characters")
	}
	s = norm.NFKC.String(foldCase.String(norm.NFKC.String(s)))
	if s == "" || len(s) > maxAccount {
		return "", invalid("account must be 1 to %d bytes", maxAccount)
	}
	return s, nil
}

// ParseIP reads a client address; IPv4-mapped IPv6 becomes IPv4.
func ParseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, invalid("not an IP address")
	}
	return a.Unmap(), nil
}

// ParseASN reads an autonomous system number: 13335 or AS13335.
func ParseASN(s string) (uint32, error) {
	v := strings.TrimSpace(s)
	if len(v) > 2 && strings.EqualFold(v[:2], "AS") {
		v = v[2:]
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return 0, invalid("%q is not an autonomous system number such as AS13335", s)
	}
	return uint32(n), nil
}

// ParseDimension reads one dimension's value as the subject that holds
// it: an email or phone number for destination, an address for the ip
// dimensions, an AS number for asn, a username for account, a region code for country, an E.164
// prefix for prefix; anything for global.
func ParseDimension(dim, value string, p PhonePolicy) (guard.Subject, error) {
	var s guard.Subject
	var err error
	switch dim {
	case "destination":
		s.Destination, err = GuessDestination(value, p)
	case "ip", "ip/56", "ip/48", "ip/24", "ip/16":
		s.IP, err = ParseIP(value)
	case "asn":
		s.ASN, err = ParseASN(value)
	case "device":
		return s, invalid("a device is named by its account's token, not in a path: unblock the account")
	case "account":
		s.Account, err = ParseAccount(value)
	case "country":
		r := strings.ToUpper(strings.TrimSpace(value))
		if _, ok := phonenumbers.GetSupportedRegions()[r]; !ok {
			return s, invalid("%q is not a supported ISO 3166 region code", value)
		}
		s.Destination.Country = r
	case "prefix":
		v := strings.TrimSpace(value)
		if len(v) < 2 || len(v) > 16 || v[0] != '+' || strings.Trim(v[1:], "0123456789") != "" {
			return s, invalid("a prefix is + and the digits of an E.164 number without its last 4")
		}
		s.Destination.Prefix = v
	case "global":
	default:
		return s, invalid("unknown dimension %q; one of %s", dim, strings.Join(guard.Dimensions, ", "))
	}
	return s, err
}
