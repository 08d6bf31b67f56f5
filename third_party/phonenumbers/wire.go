package phonenumbers

// otpguard's fork: a decoder of the protobuf wire format for the messages of
// phonemetadata.proto, in place of the protobuf runtime's proto.Unmarshal
// (which, with the generated code it needs, was 0.6 MB of every binary that
// links this package). It decodes as proto.Unmarshal does for these proto2
// messages: a scalar field seen twice keeps the last value; a message field
// seen twice is merged; a repeated field appends, and a repeated int32 may be
// packed or not; a field of unknown number, or of a known number but another
// wire type, is skipped (proto.Unmarshal keeps such fields as unknown fields,
// which nothing here reads, and the embedded metadata has none); strings are
// not checked for UTF-8, as proto2 does not; and the required fields
// (PhoneMetadata.id, NumberFormat.pattern and .format) must be set.
// upstream-tests.sh checks that it decodes the embedded metadata into values
// equal, field by field, to the ones proto.Unmarshal makes.

import (
	"errors"
	"fmt"
)

type wireType uint8

const (
	wireVarint     wireType = 0
	wireFixed64    wireType = 1
	wireBytes      wireType = 2
	wireStartGroup wireType = 3
	wireEndGroup   wireType = 4
	wireFixed32    wireType = 5

	maxFieldNumber = 1<<29 - 1
)

var errWireMalformed = errors.New("phonenumbers: malformed protobuf metadata")

// unmarshalMetadataCollection decodes a PhoneMetadataCollection.
func unmarshalMetadataCollection(b []byte) (*PhoneMetadataCollection, error) {
	coll := &PhoneMetadataCollection{}
	if err := coll.unmarshalWire(b); err != nil {
		return nil, err
	}
	if err := coll.checkRequired(); err != nil {
		return nil, err
	}
	return coll, nil
}

// consumeVarint decodes the varint at the start of b and returns it with its
// length, or a length of -1 if b holds no complete varint of at most 64 bits.
func consumeVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1 // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// consumeField decodes the field at the start of b: its number and wire type,
// its value (v for varint and fixed-width fields, p for length-delimited
// ones) and its length in b.
func consumeField(b []byte) (num int32, typ wireType, v uint64, p []byte, n int, err error) {
	tag, n := consumeVarint(b)
	if n < 0 {
		return 0, 0, 0, nil, 0, errWireMalformed
	}
	if tag>>3 < 1 || tag>>3 > maxFieldNumber {
		return 0, 0, 0, nil, 0, errWireMalformed
	}
	num, typ = int32(tag>>3), wireType(tag&7)
	rest := b[n:]
	switch typ {
	case wireVarint:
		var m int
		v, m = consumeVarint(rest)
		if m < 0 {
			return 0, 0, 0, nil, 0, errWireMalformed
		}
		n += m
	case wireFixed64:
		if len(rest) < 8 {
			return 0, 0, 0, nil, 0, errWireMalformed
		}
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(rest[i])
		}
		n += 8
	case wireFixed32:
		if len(rest) < 4 {
			return 0, 0, 0, nil, 0, errWireMalformed
		}
		for i := 3; i >= 0; i-- {
			v = v<<8 | uint64(rest[i])
		}
		n += 4
	case wireBytes:
		l, m := consumeVarint(rest)
		if m < 0 || l > uint64(len(rest)-m) {
			return 0, 0, 0, nil, 0, errWireMalformed
		}
		p = rest[m : m+int(l)]
		n += m + int(l)
	case wireStartGroup:
		// A group (of an unknown field: these messages have none) runs
		// to the end-group tag of its number.
		for {
			if len(rest) == 0 {
				return 0, 0, 0, nil, 0, errWireMalformed
			}
			inner, innerTyp, _, _, m, err := consumeField(rest)
			if err != nil && innerTyp != wireEndGroup {
				return 0, 0, 0, nil, 0, err
			}
			rest = rest[m:]
			n += m
			if innerTyp == wireEndGroup {
				if inner != num {
					return 0, 0, 0, nil, 0, errWireMalformed
				}
				break
			}
		}
	case wireEndGroup:
		// Ends the group that the caller is skipping; an error anywhere else.
		return num, typ, 0, nil, n, errWireMalformed
	default:
		return 0, 0, 0, nil, 0, errWireMalformed
	}
	return num, typ, v, p, n, nil
}

// decodeFields calls field for each field of the message encoded in b.
func decodeFields(b []byte, field func(num int32, typ wireType, v uint64, p []byte) error) error {
	for len(b) > 0 {
		num, typ, v, p, n, err := consumeField(b)
		if err != nil {
			return err
		}
		if err := field(num, typ, v, p); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func setString(dst **string, p []byte) {
	s := string(p)
	*dst = &s
}

func setBool(dst **bool, v uint64) {
	b := v != 0
	*dst = &b
}

// appendInt32s appends an element of a repeated int32 field: one varint, or
// a packed run of them.
func appendInt32s(dst *[]int32, typ wireType, v uint64, p []byte) error {
	if typ == wireVarint {
		*dst = append(*dst, int32(v))
		return nil
	}
	for len(p) > 0 {
		x, n := consumeVarint(p)
		if n < 0 {
			return errWireMalformed
		}
		*dst = append(*dst, int32(x))
		p = p[n:]
	}
	return nil
}

func (m *PhoneMetadataCollection) unmarshalWire(b []byte) error {
	return decodeFields(b, func(num int32, typ wireType, v uint64, p []byte) error {
		if num == 1 && typ == wireBytes {
			md := &PhoneMetadata{}
			if err := md.unmarshalWire(p); err != nil {
				return err
			}
			m.Metadata = append(m.Metadata, md)
		}
		return nil
	})
}

// descField is the PhoneNumberDesc field of number num, or nil.
func (m *PhoneMetadata) descField(num int32) **PhoneNumberDesc {
	switch num {
	case 1:
		return &m.GeneralDesc
	case 2:
		return &m.FixedLine
	case 3:
		return &m.Mobile
	case 4:
		return &m.TollFree
	case 5:
		return &m.PremiumRate
	case 6:
		return &m.SharedCost
	case 7:
		return &m.PersonalNumber
	case 8:
		return &m.Voip
	case 21:
		return &m.Pager
	case 24:
		return &m.NoInternationalDialling
	case 25:
		return &m.Uan
	case 27:
		return &m.Emergency
	case 28:
		return &m.Voicemail
	case 29:
		return &m.ShortCode
	case 30:
		return &m.StandardRate
	case 31:
		return &m.CarrierSpecific
	case 33:
		return &m.SmsServices
	}
	return nil
}

// stringField is the string field of number num, or nil.
func (m *PhoneMetadata) stringField(num int32) **string {
	switch num {
	case 9:
		return &m.Id
	case 11:
		return &m.InternationalPrefix
	case 12:
		return &m.NationalPrefix
	case 13:
		return &m.PreferredExtnPrefix
	case 15:
		return &m.NationalPrefixForParsing
	case 16:
		return &m.NationalPrefixTransformRule
	case 17:
		return &m.PreferredInternationalPrefix
	case 23:
		return &m.LeadingDigits
	}
	return nil
}

// boolField is the bool field of number num, or nil.
func (m *PhoneMetadata) boolField(num int32) **bool {
	switch num {
	case 18:
		return &m.SameMobileAndFixedLinePattern
	case 22:
		return &m.MainCountryForCode
	case 26:
		return &m.LeadingZeroPossible
	case 32:
		return &m.MobileNumberPortableRegion
	}
	return nil
}

func (m *PhoneMetadata) unmarshalWire(b []byte) error {
	return decodeFields(b, func(num int32, typ wireType, v uint64, p []byte) error {
		switch typ {
		case wireBytes:
			if d := m.descField(num); d != nil {
				if *d == nil {
					*d = &PhoneNumberDesc{}
				}
				return (*d).unmarshalWire(p)
			}
			if s := m.stringField(num); s != nil {
				setString(s, p)
				return nil
			}
			if num == 19 || num == 20 {
				nf := &NumberFormat{}
				if err := nf.unmarshalWire(p); err != nil {
					return err
				}
				if num == 19 {
					m.NumberFormat = append(m.NumberFormat, nf)
				} else {
					m.IntlNumberFormat = append(m.IntlNumberFormat, nf)
				}
			}
		case wireVarint:
			if f := m.boolField(num); f != nil {
				setBool(f, v)
			} else if num == 10 {
				cc := int32(v)
				m.CountryCode = &cc
			}
		}
		return nil
	})
}

func (m *PhoneNumberDesc) unmarshalWire(b []byte) error {
	return decodeFields(b, func(num int32, typ wireType, v uint64, p []byte) error {
		switch {
		case num == 2 && typ == wireBytes:
			setString(&m.NationalNumberPattern, p)
		case num == 6 && typ == wireBytes:
			setString(&m.ExampleNumber, p)
		case num == 9 && (typ == wireVarint || typ == wireBytes):
			return appendInt32s(&m.PossibleLength, typ, v, p)
		case num == 10 && (typ == wireVarint || typ == wireBytes):
			return appendInt32s(&m.PossibleLengthLocalOnly, typ, v, p)
		}
		return nil
	})
}

func (m *NumberFormat) unmarshalWire(b []byte) error {
	return decodeFields(b, func(num int32, typ wireType, v uint64, p []byte) error {
		switch {
		case num == 1 && typ == wireBytes:
			setString(&m.Pattern, p)
		case num == 2 && typ == wireBytes:
			setString(&m.Format, p)
		case num == 3 && typ == wireBytes:
			m.LeadingDigitsPattern = append(m.LeadingDigitsPattern, string(p))
		case num == 4 && typ == wireBytes:
			setString(&m.NationalPrefixFormattingRule, p)
		case num == 5 && typ == wireBytes:
			setString(&m.DomesticCarrierCodeFormattingRule, p)
		case num == 6 && typ == wireVarint:
			setBool(&m.NationalPrefixOptionalWhenFormatting, v)
		}
		return nil
	})
}

// checkRequired reports a required field that is not set, as proto.Unmarshal
// does after decoding.
func (m *PhoneMetadataCollection) checkRequired() error {
	for _, md := range m.Metadata {
		if md.Id == nil {
			return fmt.Errorf("%w: required field PhoneMetadata.id not set", errWireMalformed)
		}
		for _, formats := range [][]*NumberFormat{md.NumberFormat, md.IntlNumberFormat} {
			for _, nf := range formats {
				if nf.Pattern == nil || nf.Format == nil {
					return fmt.Errorf("%w: required field of NumberFormat not set in %s", errWireMalformed, *md.Id)
				}
			}
		}
	}
	return nil
}
