package queue

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/message"
)

// hostile are the characters a job's strings may hold that JSON writes
// otherwise: quotes, backslashes, control characters, HTML's <>&, DEL,
// the separators U+2028 and U+2029, a character beyond the BMP, and
// invalid UTF-8.
var hostile = []string{`"`, `\`, "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "<", ">", "&", "\x7f",
	"\u2028", "\u2029", "é", "😀", "\xff", "\xe2\x80", "/", "\\u00e9", "a"}

func randomString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(hostile[r.IntN(len(hostile))])
	}
	return b.String()
}

func randomJob(r *rand.Rand) Job {
	s := func() string { return randomString(r) }
	return Job{ID: s(), Key: s(), Expires: r.Int64() - math.MaxInt64/2, Message: message.Message{
		Channel: message.Channel(s()), To: s(), Purpose: s(), Locale: s(), Code: s(), Subject: s(), Text: s(), HTML: s(),
		Slot: s(), TTL: time.Duration(r.Int64() - math.MaxInt64/2), Receipt: s()}}
}

// encodingJSON is j as jobs were written before appendJob: json.Encoder
// without HTML escapes, its newline trimmed.
func encodingJSON(t testing.TB, j Job) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// TestAJobIsWrittenAsEncodingJSONWritesIt: appendJob's bytes are
// encoding/json's, for jobs whose strings hold every character JSON
// escapes (and invalid UTF-8), so a deliverer of an earlier version reads
// a job of this one as it read its own; readJob reads them back as
// encoding/json does, without handing them to it.
func TestAJobIsWrittenAsEncodingJSONWritesIt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		j := randomJob(r)
		if i == 0 {
			j = Job{} // every string empty, every number 0
		}
		want := encodingJSON(t, j)
		got := appendJob(nil, j)
		if !bytes.Equal(got, want) {
			t.Fatalf("job %d:\n got %q\nwant %q", i, got, want)
		}
		var viaJSON Job
		if err := json.Unmarshal(want, &viaJSON); err != nil {
			t.Fatal(err)
		}
		read, ok := readJob(got)
		if !ok {
			t.Fatalf("job %d: readJob declines appendJob's %q", i, got)
		}
		if !reflect.DeepEqual(read, viaJSON) {
			t.Fatalf("job %d: readJob %+v\nencoding/json %+v", i, read, viaJSON)
		}
	}
}

// TestAJobOfAnotherShapeIsReadByEncodingJSON: a job with spaces, its
// members in another order, one member less or more: readJob declines
// each, and decodeJob reads it as encoding/json does. A job json.Marshal
// wrote (its HTML escaped as \u003c) is read as it was written.
func TestAJobOfAnotherShapeIsReadByEncodingJSON(t *testing.T) {
	j := Job{ID: "id", Key: "key", Expires: 1893456000000, Message: message.Message{Channel: message.Email, To: "a@example.com",
		Subject: "Your code", Text: "Code: 123456\n", HTML: `<p class="x">123456 &amp; more</p>`, TTL: 10 * time.Minute, Receipt: "r"}}
	marshalled, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	ours := appendJob(nil, j)
	for name, body := range map[string][]byte{
		"spaced":           bytes.Replace(ours, []byte(`"i":`), []byte(`"i" : `), 1),
		"reordered":        bytes.Replace(ours, []byte(`{"i":"id","k":"key"`), []byte(`{"k":"key","i":"id"`), 1),
		"a member less":    bytes.Replace(ours, []byte(`,"Locale":""`), nil, 1),
		"a member more":    bytes.Replace(ours, []byte(`,"e":`), []byte(`,"x":1,"e":`), 1),
		"a trailing space": append(bytes.Clone(ours), ' '),
	} {
		if bytes.Equal(body, ours) {
			t.Fatalf("%s: the same bytes as appendJob's", name)
		}
		if _, ok := readJob(body); ok {
			t.Errorf("%s: readJob reads it: %s", name, body)
		}
		got, err := decodeJob(body)
		var want Job
		wantErr := json.Unmarshal(body, &want)
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decodeJob %+v %v, encoding/json %+v %v", name, got, err, want, wantErr)
		}
	}
	if got, err := decodeJob(marshalled); err != nil || !reflect.DeepEqual(got, j) {
		t.Errorf("json.Marshal's job: %+v %v", got, err)
	}
}

// FuzzReadJob: whatever the bytes, readJob reads nothing encoding/json
// would refuse or read otherwise. The seeds are appendJob's jobs of
// hostile strings, which the fuzzer cuts and changes.
func FuzzReadJob(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(appendJob(nil, randomJob(r)))
	}
	// what appendJob never writes, and readJob must decline or read as
	// encoding/json does: raw invalid UTF-8 (read as U+FFFD), a raw
	// control character and a number with a leading zero (not JSON), a
	// surrogate pair escaped, an escape it does not know
	plain := appendJob(nil, Job{ID: "id", Key: "key", Message: message.Message{Text: "x"}})
	for _, raw := range []string{"\xff", "\xe2\x80", "\n", "\x00", `\ud83d\ude00`, `\x41`, `\u00e9`, `\u00E9`} {
		f.Add(bytes.Replace(plain, []byte(`"Text":"x"`), []byte(`"Text":"`+raw+`"`), 1))
	}
	f.Add(bytes.Replace(plain, []byte(`"TTL":0`), []byte(`"TTL":01`), 1))
	f.Add(bytes.Replace(plain, []byte(`"TTL":0`), []byte(`"TTL":99999999999999999999`), 1))
	f.Add([]byte(`{"i":"\ud83d\ude00","k":"\u00E9","m":{"Channel":"","To":"","Purpose":"","Locale":"","Code":"","Subject":"","Text":"","HTML":"","Slot":"","TTL":-0,"Receipt":""},"e":01}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		got, ok := readJob(p)
		if !ok {
			return
		}
		var want Job
		if err := json.Unmarshal(p, &want); err != nil {
			t.Fatalf("readJob reads what encoding/json refuses (%v): %q", err, p)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nreadJob %+v\nencoding/json %+v", p, got, want)
		}
	})
}
