//
// Copyright (C) 2009 The Libphonenumber Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// Definition of protocol buffer for representing international telephone numbers.
// @author Shaopeng Jia

// otpguard's fork: the message types of phonenumber.proto as plain Go structs, written
// from the code protoc-gen-go generated for upstream, without the protobuf
// runtime (its reflection, registration and text format). The fields, their
// comments, the getters and the default values are upstream's; wire.go decodes
// the embedded metadata into them.

package phonenumbers

import "strconv"

// The source from which the country_code is derived. This is not set in the
// general parsing method, but in the method that parses and keeps raw_input.
// New fields could be added upon request.
type PhoneNumber_CountryCodeSource int32

const (
	// Default value returned if this is not set, because the phone number was
	// created using parse, not parseAndKeepRawInput. hasCountryCodeSource will
	// return false if this is the case.
	PhoneNumber_UNSPECIFIED PhoneNumber_CountryCodeSource = 0
	// The country_code is derived based on a phone number with a leading "+",
	// e.g. the French number "+33 1 42 68 53 00".
	PhoneNumber_FROM_NUMBER_WITH_PLUS_SIGN PhoneNumber_CountryCodeSource = 1
	// The country_code is derived based on a phone number with a leading IDD,
	// e.g. the French number "011 33 1 42 68 53 00", as it is dialled from US.
	PhoneNumber_FROM_NUMBER_WITH_IDD PhoneNumber_CountryCodeSource = 5
	// The country_code is derived based on a phone number without a leading
	// "+", e.g. the French number "33 1 42 68 53 00" when defaultCountry is
	// supplied as France.
	PhoneNumber_FROM_NUMBER_WITHOUT_PLUS_SIGN PhoneNumber_CountryCodeSource = 10
	// The country_code is derived NOT based on the phone number itself, but
	// from the defaultCountry parameter provided in the parsing function by the
	// clients. This happens mostly for numbers written in the national format
	// (without country code). For example, this would be set when parsing the
	// French number "01 42 68 53 00", when defaultCountry is supplied as
	// France.
	PhoneNumber_FROM_DEFAULT_COUNTRY PhoneNumber_CountryCodeSource = 20
)

// Enum value maps for PhoneNumber_CountryCodeSource.
var (
	PhoneNumber_CountryCodeSource_name = map[int32]string{
		0:  "UNSPECIFIED",
		1:  "FROM_NUMBER_WITH_PLUS_SIGN",
		5:  "FROM_NUMBER_WITH_IDD",
		10: "FROM_NUMBER_WITHOUT_PLUS_SIGN",
		20: "FROM_DEFAULT_COUNTRY",
	}
	PhoneNumber_CountryCodeSource_value = map[string]int32{
		"UNSPECIFIED":                   0,
		"FROM_NUMBER_WITH_PLUS_SIGN":    1,
		"FROM_NUMBER_WITH_IDD":          5,
		"FROM_NUMBER_WITHOUT_PLUS_SIGN": 10,
		"FROM_DEFAULT_COUNTRY":          20,
	}
)

func (x PhoneNumber_CountryCodeSource) Enum() *PhoneNumber_CountryCodeSource {
	p := new(PhoneNumber_CountryCodeSource)
	*p = x
	return p
}

// String returns the value's name in phonenumber.proto, or its number for a
// value the enum does not name (as the protobuf runtime does).
func (x PhoneNumber_CountryCodeSource) String() string {
	if name, ok := PhoneNumber_CountryCodeSource_name[int32(x)]; ok {
		return name
	}
	return strconv.Itoa(int(x))
}

type PhoneNumber struct {
	// The country calling code for this number, as defined by the International
	// Telecommunication Union (ITU). For example, this would be 1 for NANPA
	// countries, and 33 for France.
	CountryCode *int32 `protobuf:"varint,1,req,name=country_code,json=countryCode" json:"country_code,omitempty"`
	// The National (significant) Number, as defined in International
	// Telecommunication Union (ITU) Recommendation E.164, without any leading
	// zero. The leading-zero is stored separately if required, since this is an
	// uint64 and hence cannot store such information. Do not use this field
	// directly: if you want the national significant number, call the
	// getNationalSignificantNumber method of PhoneNumberUtil.
	//
	// For countries which have the concept of an "area code" or "national
	// destination code", this is included in the National (significant) Number.
	// Although the ITU says the maximum length should be 15, we have found longer
	// numbers in some countries e.g. Germany.
	// Note that the National (significant) Number does not contain the National
	// (trunk) prefix. Obviously, as a uint64, it will never contain any
	// formatting (hyphens, spaces, parentheses), nor any alphanumeric spellings.
	NationalNumber *uint64 `protobuf:"varint,2,req,name=national_number,json=nationalNumber" json:"national_number,omitempty"`
	// Extension is not standardized in ITU recommendations, except for being
	// defined as a series of numbers with a maximum length of 40 digits. It is
	// defined as a string here to accommodate for the possible use of a leading
	// zero in the extension (organizations have complete freedom to do so, as
	// there is no standard defined). Other than digits, some other dialling
	// characters such as "," (indicating a wait) may be stored here.
	Extension *string `protobuf:"bytes,3,opt,name=extension" json:"extension,omitempty"`
	// In some countries, the national (significant) number starts with one or
	// more "0"s without this being a national prefix or trunk code of some kind.
	// For example, the leading zero in the national (significant) number of an
	// Italian phone number indicates the number is a fixed-line number.  There
	// have been plans to migrate fixed-line numbers to start with the digit two
	// since December 2000, but it has not happened yet. See
	// http://en.wikipedia.org/wiki/%2B39 for more details.
	//
	// These fields can be safely ignored (there is no need to set them) for most
	// countries. Some limited number of countries behave like Italy - for these
	// cases, if the leading zero(s) of a number would be retained even when
	// dialling internationally, set this flag to true, and also set the number of
	// leading zeros.
	//
	// Clients who use the parsing functionality of the i18n phone
	// number libraries will have these fields set if necessary automatically.
	ItalianLeadingZero   *bool  `protobuf:"varint,4,opt,name=italian_leading_zero,json=italianLeadingZero" json:"italian_leading_zero,omitempty"`
	NumberOfLeadingZeros *int32 `protobuf:"varint,8,opt,name=number_of_leading_zeros,json=numberOfLeadingZeros,def=1" json:"number_of_leading_zeros,omitempty"`
	// This field is used to store the raw input string containing phone numbers
	// before it was canonicalized by the library. For example, it could be used
	// to store alphanumerical numbers such as "1-800-GOOG-411".
	RawInput *string `protobuf:"bytes,5,opt,name=raw_input,json=rawInput" json:"raw_input,omitempty"`
	// The source from which the country_code is derived.
	CountryCodeSource *PhoneNumber_CountryCodeSource `protobuf:"varint,6,opt,name=country_code_source,json=countryCodeSource,enum=phonenumbers.PhoneNumber_CountryCodeSource" json:"country_code_source,omitempty"`
	// The carrier selection code that is preferred when calling this phone number
	// domestically. This also includes codes that need to be dialed in some
	// countries when calling from landlines to mobiles or vice versa. For
	// example, in Columbia, a "3" needs to be dialed before the phone number
	// itself when calling from a mobile phone to a domestic landline phone and
	// vice versa.
	//
	// Note this is the "preferred" code, which means other codes may work as
	// well.
	PreferredDomesticCarrierCode *string `protobuf:"bytes,7,opt,name=preferred_domestic_carrier_code,json=preferredDomesticCarrierCode" json:"preferred_domestic_carrier_code,omitempty"`
}

// Default values for PhoneNumber fields.
const (
	Default_PhoneNumber_NumberOfLeadingZeros = int32(1)
)

// Reset clears every field.
func (x *PhoneNumber) Reset() {
	*x = PhoneNumber{}
}

func (x *PhoneNumber) GetCountryCode() int32 {
	if x != nil && x.CountryCode != nil {
		return *x.CountryCode
	}
	return 0
}

func (x *PhoneNumber) GetNationalNumber() uint64 {
	if x != nil && x.NationalNumber != nil {
		return *x.NationalNumber
	}
	return 0
}

func (x *PhoneNumber) GetExtension() string {
	if x != nil && x.Extension != nil {
		return *x.Extension
	}
	return ""
}

func (x *PhoneNumber) GetItalianLeadingZero() bool {
	if x != nil && x.ItalianLeadingZero != nil {
		return *x.ItalianLeadingZero
	}
	return false
}

func (x *PhoneNumber) GetNumberOfLeadingZeros() int32 {
	if x != nil && x.NumberOfLeadingZeros != nil {
		return *x.NumberOfLeadingZeros
	}
	return Default_PhoneNumber_NumberOfLeadingZeros
}

func (x *PhoneNumber) GetRawInput() string {
	if x != nil && x.RawInput != nil {
		return *x.RawInput
	}
	return ""
}

func (x *PhoneNumber) GetCountryCodeSource() PhoneNumber_CountryCodeSource {
	if x != nil && x.CountryCodeSource != nil {
		return *x.CountryCodeSource
	}
	return PhoneNumber_UNSPECIFIED
}

func (x *PhoneNumber) GetPreferredDomesticCarrierCode() string {
	if x != nil && x.PreferredDomesticCarrierCode != nil {
		return *x.PreferredDomesticCarrierCode
	}
	return ""
}
