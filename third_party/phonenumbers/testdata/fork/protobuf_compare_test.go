package phonenumbers

// upstream-tests.sh runs this file (it is not part of the package otherwise)
// with upstream's protobuf-generated types beside the fork, as package oldpb:
// it checks the fork's wire decoder and its proto.Merge and proto.Equal
// against the protobuf runtime's, on the embedded metadata.

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/nyaruka/phonenumbers/internal/proto"
	"github.com/nyaruka/phonenumbers/oldpb"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// sameFields reports the first difference between a fork value (got) and an
// upstream one (want): every exported field of each struct, matched by name,
// pointers by being set and by value, slices by being nil, length and
// elements.
func sameFields(path string, got, want reflect.Value) error {
	if got.Kind() != want.Kind() {
		return fmt.Errorf("%s: kind %s, upstream %s", path, got.Kind(), want.Kind())
	}
	switch got.Kind() {
	case reflect.Pointer:
		if got.IsNil() != want.IsNil() {
			return fmt.Errorf("%s: set %t, upstream %t", path, !got.IsNil(), !want.IsNil())
		}
		if got.IsNil() {
			return nil
		}
		return sameFields(path, got.Elem(), want.Elem())
	case reflect.Slice:
		if got.IsNil() != want.IsNil() || got.Len() != want.Len() {
			return fmt.Errorf("%s: %d elements (nil %t), upstream %d (nil %t)", path, got.Len(), got.IsNil(), want.Len(), want.IsNil())
		}
		for i := range got.Len() {
			if err := sameFields(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Struct:
		exported := 0
		for i := range want.NumField() {
			f := want.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			exported++
			g := got.FieldByName(f.Name)
			if !g.IsValid() {
				return fmt.Errorf("%s: no field %s", path, f.Name)
			}
			if err := sameFields(path+"."+f.Name, g, want.Field(i)); err != nil {
				return err
			}
		}
		if exported != got.NumField() {
			return fmt.Errorf("%s: %d fields, upstream %d", path, got.NumField(), exported)
		}
		return nil
	default:
		var same bool
		switch got.Kind() {
		case reflect.Int32:
			same = got.Int() == want.Int()
		case reflect.Uint64:
			same = got.Uint() == want.Uint()
		case reflect.String:
			same = got.String() == want.String()
		case reflect.Bool:
			same = got.Bool() == want.Bool()
		default:
			return fmt.Errorf("%s: unexpected kind %s", path, got.Kind())
		}
		if !same {
			return fmt.Errorf("%s: %v, upstream %v", path, got, want)
		}
		return nil
	}
}

// noUnknownFields fails if upstream's decoding kept a field it did not know
// (the fork's decoder skips them).
func noUnknownFields(t *testing.T, m protoreflect.Message) {
	t.Helper()
	if len(m.GetUnknown()) > 0 {
		t.Fatalf("%s has unknown fields", m.Descriptor().FullName())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				noUnknownFields(t, v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			noUnknownFields(t, v.Message())
		}
		return true
	})
}

func TestForkDecodesMetadataAsProtobuf(t *testing.T) {
	for name, data := range map[string][]byte{"metadata": numberData, "short-number metadata": shortNumberData} {
		raw, err := decodeUnzip(data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unmarshalMetadataCollection(raw)
		if err != nil {
			t.Fatalf("%s: fork: %v", name, err)
		}
		want := &oldpb.PhoneMetadataCollection{}
		if err := gproto.Unmarshal(raw, want); err != nil {
			t.Fatalf("%s: protobuf: %v", name, err)
		}
		noUnknownFields(t, want.ProtoReflect())
		if err := sameFields(name, reflect.ValueOf(got), reflect.ValueOf(want)); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d regions, every field as protobuf decodes it", name, len(got.Metadata))
	}
}

// wire builds encoded fields for the decoder cases.
type wire struct{}

func (wire) varint(v uint64) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (w wire) tag(num, typ int) []byte { return w.varint(uint64(num)<<3 | uint64(typ)) }

func (w wire) int(num int, v uint64) []byte { return append(w.tag(num, 0), w.varint(v)...) }

func (w wire) bytes(num int, parts ...[]byte) []byte {
	var p []byte
	for _, x := range parts {
		p = append(p, x...)
	}
	b := append(w.tag(num, 2), w.varint(uint64(len(p)))...)
	return append(b, p...)
}

func (w wire) str(num int, s string) []byte { return w.bytes(num, []byte(s)) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, x := range parts {
		b = append(b, x...)
	}
	return b
}

// TestForkDecoderAsProtobufOnEdgeCases decodes truncations of the metadata
// and hand-made encodings (fields repeated, merged, packed, of unknown
// numbers or wire types, groups, required fields missing, malformed input)
// with both decoders: both fail, or both give the same values.
func TestForkDecoderAsProtobufOnEdgeCases(t *testing.T) {
	raw, err := decodeUnzip(numberData)
	if err != nil {
		t.Fatal(err)
	}
	var w wire
	id := w.str(9, "A")
	region := func(parts ...[]byte) []byte { return w.bytes(1, parts...) }
	ff := func(n int) []byte { return []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}[:n] }
	cases := [][]byte{}
	for n := range 300 {
		cases = append(cases, raw[:n])
	}
	cases = append(cases,
		nil,
		region(id),
		region(id, w.int(10, 44), w.str(11, "00"), w.str(12, "0"), w.str(13, " ext "), w.str(15, "0"), w.str(16, "$1"), w.str(17, "00"), w.str(23, "1")),
		region(w.int(10, 44)),                               // no id
		region(id, w.str(9, "B")),                           // id twice: the last
		region(id, w.int(9, 5)),                             // id as a varint: unknown
		region(id, w.str(10, "x")),                          // country code as bytes: unknown
		region(id, w.int(10, 1<<40)),                        // int32 truncated
		region(id, w.int(10, 1<<63)),                        // int32 truncated
		region(id, w.tag(10, 0), ff(9), []byte{0x01}),       // ten-byte varint
		region(id, w.tag(10, 0), ff(9), []byte{0x02}),       // over 64 bits
		region(id, w.tag(10, 0), ff(9), []byte{0x81, 0x00}), // eleven bytes
		region(id, w.tag(10, 0), ff(3)),                     // truncated varint
		region(id, w.int(18, 2), w.int(22, 1), w.int(26, 0), w.int(32, 1<<40)),
		region(id, w.int(1, 1)),                // description as a varint: unknown
		region(id, w.bytes(19)),                // format without pattern and format
		region(id, w.bytes(19, w.str(1, "x"))), // format without format
		region(id, w.bytes(19, w.str(2, "x"))), // format without pattern
		region(id, w.bytes(20, w.str(1, "x"))), // intl format without format
		region(id, w.bytes(20, w.str(2, "x"))), // intl format without pattern
		region(id, w.bytes(19, w.str(1, "x"), w.str(2, "y")), w.bytes(20, w.str(1, "p"), w.str(2, "q"))),
		region(id, w.bytes(19, w.str(1, "x"), w.str(2, "y"), w.str(3, "a"), w.str(3, "b"), w.int(6, 1), w.str(4, "r"), w.str(5, "c"), w.str(1, "z"))),
		region(id, w.bytes(19, w.str(1, "x"), w.str(2, "y"), w.int(3, 1), w.str(6, "s"), w.int(4, 1))),  // wrong wire types: unknown
		region(id, w.bytes(1, w.str(2, `\d+`)), w.bytes(1, w.int(9, 3), w.int(10, 2), w.str(6, "123"))), // description merged
		region(id, w.bytes(2, w.int(9, 3), w.bytes(9, w.varint(4), w.varint(5)), w.int(9, 6))),          // packed and not
		region(id, w.bytes(3, w.bytes(10, w.varint(1<<35)), w.int(10, 0xffffffff))),                     // truncated lengths
		region(id, w.bytes(3, w.bytes(9, []byte{0x83}))),                                                // packed, truncated
		region(id, w.bytes(3, w.bytes(9))),                 // packed, empty
		region(id, w.bytes(3, w.int(2, 1), w.str(9, "x"))), // wrong wire types
		region(id, w.bytes(4), w.bytes(5), w.bytes(6), w.bytes(7), w.bytes(8), w.bytes(21), w.bytes(24), w.bytes(25), w.bytes(27), w.bytes(28), w.bytes(29), w.bytes(30), w.bytes(31), w.bytes(33)),
		region(id, w.tag(50, 3), w.int(1, 1), w.str(2, "x"), w.tag(50, 4)), // a group: skipped
		region(id, w.tag(50, 3), w.tag(51, 3), w.tag(51, 4), w.tag(50, 4)), // nested
		region(id, w.tag(50, 3), w.tag(51, 4)),                             // ended by another number
		region(id, w.tag(50, 3), w.int(1, 1)),                              // not ended
		region(id, w.tag(50, 4)),                                           // end without start
		region(id, w.tag(50, 5), []byte{1, 2, 3, 4}),                       // fixed32
		region(id, w.tag(50, 5), []byte{1, 2, 3}),
		region(id, w.tag(50, 1), []byte{1, 2, 3, 4, 5, 6, 7, 8}), // fixed64
		region(id, w.tag(50, 1), []byte{1, 2, 3, 4, 5, 6, 7}),
		region(id, w.tag(50, 6)), // wire types 6 and 7
		region(id, w.tag(50, 7)),
		region(id, w.int(0, 1)),                            // field number 0
		region(id, w.int(1<<29-1, 1)),                      // the largest
		region(id, w.int(1<<29, 1)),                        // too large
		region(id, w.int(1<<32, 1)),                        // too large
		region(id, w.str(50, "x")),                         // unknown field
		region(id, w.tag(50, 2), w.varint(5), []byte("x")), // length past the end
		cat(w.int(1, 1), region(id)),                       // a region as a varint: unknown
		cat(w.str(2, "x"), region(id), region(w.str(9, "B"))),
		[]byte{0x0a, 0x80}, // truncated length
	)
	for _, b := range cases {
		got, gotErr := unmarshalMetadataCollection(b)
		want := &oldpb.PhoneMetadataCollection{}
		wantErr := gproto.Unmarshal(b, want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("% x: fork error %v, protobuf error %v", b, gotErr, wantErr)
		}
		if gotErr == nil {
			if err := sameFields("collection", reflect.ValueOf(got), reflect.ValueOf(want)); err != nil {
				t.Fatalf("% x: %v", b, err)
			}
		}
	}
}

// TestForkMergeAndEqualAsProtobuf merges and compares the metadata's number
// formats and descriptions, and parsed numbers, with the fork's helpers and
// with protobuf's on the upstream types.
func TestForkMergeAndEqualAsProtobuf(t *testing.T) {
	raw, err := decodeUnzip(numberData)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := unmarshalMetadataCollection(raw)
	if err != nil {
		t.Fatal(err)
	}
	up := &oldpb.PhoneMetadataCollection{}
	if err := gproto.Unmarshal(raw, up); err != nil {
		t.Fatal(err)
	}
	var formats []*NumberFormat
	var upFormats []*oldpb.NumberFormat
	for i, md := range coll.Metadata {
		formats = append(formats, md.NumberFormat...)
		upFormats = append(upFormats, up.Metadata[i].NumberFormat...)
	}
	if len(formats) < 100 {
		t.Fatalf("only %d number formats", len(formats))
	}
	// Neighbours, and a few far apart.
	step := len(formats) / 40
	for i := range len(formats) - 1 {
		for _, j := range []int{i, i + 1, (i + step) % len(formats)} {
			a, b := formats[i], formats[j]
			ua, ub := upFormats[i], upFormats[j]
			if proto.Equal(a, b) != gproto.Equal(ua, ub) {
				t.Fatalf("Equal(format %d, format %d) = %t, protobuf %t", i, j, proto.Equal(a, b), gproto.Equal(ua, ub))
			}
			m := &NumberFormat{}
			um := &oldpb.NumberFormat{}
			proto.Merge(m, a)
			gproto.Merge(um, ua)
			proto.Merge(m, b)
			gproto.Merge(um, ub)
			if err := sameFields("merged", reflect.ValueOf(m), reflect.ValueOf(um)); err != nil {
				t.Fatalf("formats %d, %d: %v", i, j, err)
			}
			if len(m.LeadingDigitsPattern) > 0 && len(a.LeadingDigitsPattern) > 0 && &m.LeadingDigitsPattern[0] == &a.LeadingDigitsPattern[0] {
				t.Fatal("merged format shares its leading digits with the source")
			}
			if m.Pattern == a.Pattern || m.Pattern == b.Pattern {
				t.Fatal("merged format shares its pattern with a source")
			}
		}
	}
	// Repeated fields of other lengths; empty and nil.
	for i, a := range formats {
		ua := upFormats[i]
		m, um := &NumberFormat{}, &oldpb.NumberFormat{}
		proto.Merge(m, a)
		gproto.Merge(um, ua)
		m.LeadingDigitsPattern = append(m.LeadingDigitsPattern, "9")
		um.LeadingDigitsPattern = append(um.LeadingDigitsPattern, "9")
		if proto.Equal(m, a) != gproto.Equal(um, ua) || proto.Equal(a, m) != gproto.Equal(ua, um) {
			t.Fatalf("format %d: Equal with one more leading digits pattern differs", i)
		}
		m.LeadingDigitsPattern = m.LeadingDigitsPattern[:len(m.LeadingDigitsPattern)-1]
		um.LeadingDigitsPattern = um.LeadingDigitsPattern[:len(um.LeadingDigitsPattern)-1]
		if len(m.LeadingDigitsPattern) == 0 {
			m.LeadingDigitsPattern, um.LeadingDigitsPattern = []string{}, []string{}
		}
		if proto.Equal(m, a) != gproto.Equal(um, ua) || !proto.Equal(m, a) {
			t.Fatalf("format %d: Equal of a copy differs", i)
		}
		m.NationalPrefixOptionalWhenFormatting = nil
		um.NationalPrefixOptionalWhenFormatting = nil
		if proto.Equal(m, a) != gproto.Equal(um, ua) {
			t.Fatalf("format %d: Equal without national_prefix_optional_when_formatting differs", i)
		}
	}
	// Whole regions: nested messages, repeated messages.
	for i := range len(coll.Metadata) - 1 {
		m := &PhoneMetadata{}
		um := &oldpb.PhoneMetadata{}
		proto.Merge(m, coll.Metadata[i])
		gproto.Merge(um, up.Metadata[i])
		if !proto.Equal(m, coll.Metadata[i]) {
			t.Fatalf("region %d: a merged copy is not Equal to its source", i)
		}
		for k, nf := range m.NumberFormat {
			if nf == coll.Metadata[i].NumberFormat[k] {
				t.Fatalf("region %d: a merged copy shares a number format with its source", i)
			}
		}
		if m.GeneralDesc != nil && m.GeneralDesc == coll.Metadata[i].GeneralDesc {
			t.Fatalf("region %d: a merged copy shares its general description with its source", i)
		}
		proto.Merge(m, coll.Metadata[i+1])
		gproto.Merge(um, up.Metadata[i+1])
		if err := sameFields("merged", reflect.ValueOf(m), reflect.ValueOf(um)); err != nil {
			t.Fatalf("regions %d, %d: %v", i, i+1, err)
		}
		if proto.Equal(m, coll.Metadata[i]) != gproto.Equal(um, up.Metadata[i]) {
			t.Fatalf("regions %d: Equal differs", i)
		}
	}
	// Parsed numbers, with the fields Parse and ParseAndKeepRawInput set.
	inputs := []string{"+1 650 253 0000", "+44 20 7031 3000 ext. 123", "0800 123 4567", "+39 06 1234 5678", "+800 1234 5678", "011 44 20 7031 3000", "650 253 0000"}
	for _, s := range inputs {
		for _, keep := range []bool{false, true} {
			parse := Parse
			if keep {
				parse = ParseAndKeepRawInput
			}
			n, err := parse(s, "US")
			if err != nil {
				t.Fatal(err)
			}
			un := &oldpb.PhoneNumber{}
			if err := gproto.Unmarshal(marshalNumber(n), un); err != nil {
				t.Fatal(err)
			}
			if err := sameFields("number", reflect.ValueOf(n), reflect.ValueOf(un)); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			c := &PhoneNumber{}
			uc := &oldpb.PhoneNumber{}
			proto.Merge(c, n)
			gproto.Merge(uc, un)
			c.Extension = proto.String("9")
			uc.Extension = gproto.String("9")
			if proto.Equal(c, n) != gproto.Equal(uc, un) {
				t.Fatalf("%s: Equal differs after changing the extension", s)
			}
			c.Extension = n.Extension
			uc.Extension = un.Extension
			if proto.Equal(c, n) != gproto.Equal(uc, un) || !proto.Equal(c, n) {
				t.Fatalf("%s: Equal differs on a copy", s)
			}
		}
	}
	var nilNumber *PhoneNumber
	if proto.Equal(nilNumber, &PhoneNumber{}) != gproto.Equal((*oldpb.PhoneNumber)(nil), &oldpb.PhoneNumber{}) ||
		proto.Equal(nilNumber, nilNumber) != gproto.Equal((*oldpb.PhoneNumber)(nil), (*oldpb.PhoneNumber)(nil)) {
		t.Fatal("Equal of nil numbers differs")
	}
	for _, x := range []PhoneNumber_CountryCodeSource{0, 1, 5, 10, 20, 3} {
		if x.String() != oldpb.PhoneNumber_CountryCodeSource(x).String() {
			t.Fatalf("%d: String %q, protobuf %q", x, x.String(), oldpb.PhoneNumber_CountryCodeSource(x).String())
		}
	}
}

// marshalNumber encodes a PhoneNumber in the wire format (as a test-only
// bridge to upstream's type).
func marshalNumber(n *PhoneNumber) []byte {
	var b []byte
	varint := func(v uint64) {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		b = append(b, byte(v))
	}
	str := func(num int, s *string) {
		if s != nil {
			varint(uint64(num<<3 | 2))
			varint(uint64(len(*s)))
			b = append(b, *s...)
		}
	}
	if n.CountryCode != nil {
		varint(1 << 3)
		varint(uint64(int64(*n.CountryCode)))
	}
	if n.NationalNumber != nil {
		varint(2 << 3)
		varint(*n.NationalNumber)
	}
	str(3, n.Extension)
	if n.ItalianLeadingZero != nil {
		varint(4 << 3)
		if *n.ItalianLeadingZero {
			varint(1)
		} else {
			varint(0)
		}
	}
	str(5, n.RawInput)
	if n.CountryCodeSource != nil {
		varint(6 << 3)
		varint(uint64(int64(*n.CountryCodeSource)))
	}
	str(7, n.PreferredDomesticCarrierCode)
	if n.NumberOfLeadingZeros != nil {
		varint(8 << 3)
		varint(uint64(int64(*n.NumberOfLeadingZeros)))
	}
	return b
}
