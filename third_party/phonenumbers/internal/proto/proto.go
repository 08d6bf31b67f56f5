// Package proto stands in, in otpguard's fork of phonenumbers, for the
// helpers of google.golang.org/protobuf/proto that the library and its tests
// call on its message types, which are plain Go structs here: the pointer
// constructors (String, Int32, ...), Merge and Equal. Merge and Equal follow
// protobuf's rules for these proto2 messages, whose fields are pointers to
// scalars (set or not), pointers to messages, and slices (repeated fields).
package proto

import "reflect"

// Bool returns a pointer to v.
func Bool(v bool) *bool { return &v }

// Int32 returns a pointer to v.
func Int32(v int32) *int32 { return &v }

// Int64 returns a pointer to v.
func Int64(v int64) *int64 { return &v }

// Uint32 returns a pointer to v.
func Uint32(v uint32) *uint32 { return &v }

// Uint64 returns a pointer to v.
func Uint64(v uint64) *uint64 { return &v }

// String returns a pointer to v.
func String(v string) *string { return &v }

// Merge merges src into dst, as protobuf's proto.Merge: each field set in
// src is copied into dst, replacing a scalar, merging into a message (dst's
// own, or a new one), and appending copies of a repeated field's elements.
// dst shares no memory with src afterwards. A nil src merges nothing; a nil
// dst panics.
func Merge[M any](dst, src *M) {
	if dst == nil {
		panic("proto: Merge into a nil message")
	}
	if src == nil {
		return
	}
	mergeStruct(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem())
}

func mergeStruct(dst, src reflect.Value) {
	for i := range src.NumField() {
		s, d := src.Field(i), dst.Field(i)
		switch s.Kind() {
		case reflect.Pointer:
			if s.IsNil() {
				continue
			}
			if s.Elem().Kind() == reflect.Struct {
				if d.IsNil() {
					d.Set(reflect.New(s.Type().Elem()))
				}
				mergeStruct(d.Elem(), s.Elem())
				continue
			}
			p := reflect.New(s.Type().Elem())
			p.Elem().Set(s.Elem())
			d.Set(p)
		case reflect.Slice:
			for j := range s.Len() {
				d.Set(reflect.Append(d, cloneValue(s.Index(j))))
			}
		default:
			panic("proto: Merge of a field of kind " + s.Kind().String())
		}
	}
}

// cloneValue copies an element of a repeated field: a message deeply, a
// scalar as it is.
func cloneValue(v reflect.Value) reflect.Value {
	if v.Kind() != reflect.Pointer {
		return v
	}
	c := reflect.New(v.Type().Elem())
	if !v.IsNil() {
		mergeStruct(c.Elem(), v.Elem())
	}
	return c
}

// Equal reports whether a and b are equal, as protobuf's proto.Equal: both
// nil, or both set with the same fields set to the same values (a repeated
// field's elements in order; an empty one is the same as one not set).
func Equal[M any](a, b *M) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return equalStruct(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem())
}

func equalStruct(a, b reflect.Value) bool {
	for i := range a.NumField() {
		if !equalValue(a.Field(i), b.Field(i)) {
			return false
		}
	}
	return true
}

func equalValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() && b.IsNil()
		}
		if a.Elem().Kind() == reflect.Struct {
			return equalStruct(a.Elem(), b.Elem())
		}
		return a.Elem().Equal(b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for j := range a.Len() {
			if !equalValue(a.Index(j), b.Index(j)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}
