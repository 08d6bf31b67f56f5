package proto

import "testing"

type desc struct {
	Pattern *string
	Lengths []int32
}

type message struct {
	ID      *string
	Code    *int32
	Flag    *bool
	Desc    *desc
	Formats []*desc
	Names   []string
}

func TestMerge(t *testing.T) {
	dst := &message{ID: String("a"), Code: Int32(1), Desc: &desc{Lengths: []int32{1}}, Names: []string{"x"}}
	src := &message{Code: Int32(2), Flag: Bool(false), Desc: &desc{Pattern: String("p"), Lengths: []int32{2}},
		Formats: []*desc{{Pattern: String("f")}}, Names: []string{"y"}}
	Merge(dst, src)
	want := &message{ID: String("a"), Code: Int32(2), Flag: Bool(false), Desc: &desc{Pattern: String("p"), Lengths: []int32{1, 2}},
		Formats: []*desc{{Pattern: String("f")}}, Names: []string{"x", "y"}}
	if !Equal(dst, want) {
		t.Fatalf("merged: %+v", dst)
	}
	if dst.Code == src.Code || dst.Desc.Pattern == src.Desc.Pattern || dst.Formats[0] == src.Formats[0] {
		t.Fatal("the merged message shares memory with its source")
	}
	Merge(dst, nil)
	if !Equal(dst, want) {
		t.Fatal("merging nil changed the message")
	}
}

func TestEqual(t *testing.T) {
	var none *message
	for _, c := range []struct {
		a, b *message
		want bool
	}{
		{none, none, true},
		{none, &message{}, false},
		{&message{}, &message{Names: []string{}}, true},
		{&message{}, &message{Desc: &desc{}}, false},
		{&message{Flag: Bool(false)}, &message{}, false},
		{&message{Flag: Bool(false)}, &message{Flag: Bool(false)}, true},
		{&message{Names: []string{"a"}}, &message{Names: []string{"a", "b"}}, false},
		{&message{Formats: []*desc{{Lengths: []int32{1}}}}, &message{Formats: []*desc{{Lengths: []int32{1}}}}, true},
		{&message{Formats: []*desc{{Lengths: []int32{1}}}}, &message{Formats: []*desc{{Lengths: []int32{2}}}}, false},
	} {
		if Equal(c.a, c.b) != c.want || Equal(c.b, c.a) != c.want {
			t.Errorf("Equal(%+v, %+v) != %t", c.a, c.b, c.want)
		}
	}
}
