package phonenumbers

// The fork's own checks of its metadata decoder, run with go test in this
// module. upstream-tests.sh compares the decoder, field by field, with the
// protobuf runtime (testdata/fork/protobuf_compare_test.go).

import (
	"slices"
	"testing"
)

func TestEmbeddedMetadataDecodes(t *testing.T) {
	coll, err := MetadataCollection()
	if err != nil {
		t.Fatal(err)
	}
	short, err := ShortNumberMetadataCollection()
	if err != nil {
		t.Fatal(err)
	}
	if len(coll.Metadata) != 254 || len(short.Metadata) != 241 {
		t.Fatalf("%d regions and %d with short numbers; want 254 and 241", len(coll.Metadata), len(short.Metadata))
	}
	var us *PhoneMetadata
	for _, md := range coll.Metadata {
		if md.GetId() == "US" {
			us = md
		}
	}
	if us == nil {
		t.Fatal("no US metadata")
	}
	if us.GetCountryCode() != 1 || us.GetInternationalPrefix() != "011" || us.GetNationalPrefix() != "1" ||
		!us.GetMainCountryForCode() || !us.GetMobileNumberPortableRegion() || len(us.GetNumberFormat()) == 0 ||
		!slices.Equal(us.GetGeneralDesc().GetPossibleLength(), []int32{10}) ||
		!slices.Equal(us.GetGeneralDesc().GetPossibleLengthLocalOnly(), []int32{7}) ||
		us.GetFixedLine().GetExampleNumber() == "" {
		t.Errorf("US metadata: %+v", us)
	}
}

func TestMalformedMetadataIsAnError(t *testing.T) {
	for _, b := range [][]byte{
		{0x0a},                   // truncated
		{0x0a, 0x02, 0x50, 0x01}, // a region without its (required) id
		{0x00, 0x01},             // field number 0
		{0x0c},                   // end of a group never started
		{0x0a, 0x03, 0x4a, 0x05}, // a length past the end
	} {
		if _, err := unmarshalMetadataCollection(b); err == nil {
			t.Errorf("% x: no error", b)
		}
	}
	coll, err := unmarshalMetadataCollection([]byte{0x0a, 0x04, 0x4a, 0x00, 0x08, 0x01, 0x10, 0x02})
	if err != nil || len(coll.Metadata) != 1 || coll.Metadata[0].Id == nil || *coll.Metadata[0].Id != "" {
		t.Errorf("a region with an empty id and unknown fields: %v, %v", coll, err)
	}
}
