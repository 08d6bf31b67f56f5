package esdk_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sort"
	"testing"

	"github.com/otpguard/otpguard/guard/esdk"
)

// An encoder of the Encryption SDK's message format, written from the
// format's documentation for these tests: it makes valid messages of
// every suite the package reads, and crafted ones whose every tag and
// signature is valid but one property is wrong (a key commitment, the
// order of frames), so that the check of that property is the only thing
// that can refuse them. (Flipping bytes never reaches those checks: the
// header's tag fails first. The SDK's JavaScript release makes the
// messages of tests/lambda.)

const keyID = "arn:aws:kms:eu-west-1:111122223333:key/test"

type message struct {
	version   byte
	suite     uint16
	framed    bool
	frameLen  uint32
	context   map[string]string
	plaintext []byte
	keyID     string // the encrypted data key's provider info
	dataKey   []byte
	blob      []byte
	// crafted
	commitment []byte   // when set, this commitment instead of the right one (the header tag still valid)
	frameOrder []uint32 // when set, the regular frames in this order of sequence numbers (each tag valid)
	signer     *ecdsa.PrivateKey
	signed     int // after encode: the length of what the signature covers
	// header fields set wrong, the header's tag still valid
	msgType     byte // v1: 0x80 when 0
	reserved    []byte
	contentType byte // 1 or 2 (framed) when 0
	frameField  *uint32
	dupContext  bool
	noKeys      bool
	finalFull   bool // a plaintext of whole frames ends with a full final frame, not an empty one
}

func newMessage(version byte, suite uint16, framed bool) *message {
	dk := make([]byte, 32)
	_, _ = rand.Read(dk)
	return &message{version: version, suite: suite, framed: framed, frameLen: 4, context: map[string]string{"userpool-id": "eu-west-1_x"},
		plaintext: []byte("1234567890"), keyID: keyID, dataKey: dk, blob: []byte("blob-" + base64.StdEncoding.EncodeToString(dk[:6]))}
}

func u16(b []byte, v int) []byte    { return binary.BigEndian.AppendUint16(b, uint16(v)) }
func u32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func chunk(b, v []byte) []byte      { return append(u16(b, len(v)), v...) }

func (m *message) kdf() func() hash.Hash {
	switch m.suite {
	case 0x0178:
		return sha256.New
	case 0x0378:
		return sha512.New384
	}
	return nil
}

func (m *message) signs() bool { return m.suite == 0x0378 || m.suite == 0x0578 }

func (m *message) encode(t testing.TB) []byte {
	t.Helper()
	idLen := 16
	if m.version == 2 {
		idLen = 32
	}
	id := make([]byte, idLen)
	_, _ = rand.Read(id)
	if m.signs() && m.signer == nil {
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		m.signer = k
	}
	ctx := map[string]string{}
	for k, v := range m.context {
		ctx[k] = v
	}
	if m.signs() {
		ctx["aws-crypto-public-key"] = base64.StdEncoding.EncodeToString(elliptic.MarshalCompressed(elliptic.P384(), m.signer.X, m.signer.Y))
	}

	// the key, and (v2) its commitment
	var key, commitment []byte
	info := u16(nil, int(m.suite))
	var err error
	switch {
	case m.version == 2:
		if key, err = hkdf.Key(sha512.New, m.dataKey, id, string(append(info, "DERIVEKEY"...)), 32); err != nil {
			t.Fatal(err)
		}
		if commitment, err = hkdf.Key(sha512.New, m.dataKey, id, "COMMITKEY", 32); err != nil {
			t.Fatal(err)
		}
		if m.commitment != nil {
			commitment = m.commitment
		}
	case m.kdf() == nil:
		key = m.dataKey
	default:
		if key, err = hkdf.Key(m.kdf(), m.dataKey, nil, string(append(info, id...)), 32); err != nil {
			t.Fatal(err)
		}
	}
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCM(block)

	// the header
	h := []byte{m.version}
	if m.version == 1 {
		t := m.msgType
		if t == 0 {
			t = 0x80
		}
		h = append(h, t)
	}
	h = u16(h, int(m.suite))
	h = append(h, id...)
	var aad []byte
	if len(ctx) > 0 {
		keys := make([]string, 0, len(ctx))
		for k := range ctx {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := len(keys)
		if m.dupContext {
			n++
		}
		aad = u16(aad, n)
		for _, k := range keys {
			aad = chunk(chunk(aad, []byte(k)), []byte(ctx[k]))
		}
		if m.dupContext {
			aad = chunk(chunk(aad, []byte(keys[0])), []byte("again"))
		}
	}
	h = chunk(h, aad)
	if m.noKeys {
		h = u16(h, 0)
	} else {
		h = u16(h, 1)
		h = chunk(chunk(chunk(h, []byte("aws-kms")), []byte(m.keyID)), m.blob)
	}
	frameLen := uint32(0)
	ct := byte(1)
	if m.framed {
		ct, frameLen = 2, m.frameLen
	}
	if m.contentType != 0 {
		ct = m.contentType
	}
	h = append(h, ct)
	if m.version == 1 {
		r := m.reserved
		if r == nil {
			r = []byte{0, 0, 0, 0}
		}
		h = append(append(h, r...), 12)
	}
	if m.frameField != nil {
		frameLen = *m.frameField
	}
	h = u32(h, frameLen)
	if m.version == 2 {
		h = append(h, commitment...)
	}
	iv := make([]byte, 12)
	if m.version == 1 {
		_, _ = rand.Read(iv)
	}
	tag := gcm.Seal(nil, iv, nil, h)
	out := append([]byte(nil), h...)
	if m.version == 1 {
		out = append(out, iv...)
	}
	out = append(out, tag...)

	// the body
	seal := func(kind string, seq uint32, p []byte) (iv, ct []byte) {
		iv = make([]byte, 12)
		binary.BigEndian.PutUint32(iv[8:], seq)
		a := append(append(append([]byte(nil), id...), kind...), u32(nil, seq)...)
		a = binary.BigEndian.AppendUint64(a, uint64(len(p)))
		return iv, gcm.Seal(nil, iv, p, a)
	}
	if !m.framed {
		iv, ct := seal("AWSKMSEncryptionClient Single Block", 1, m.plaintext)
		out = append(out, iv...)
		out = binary.BigEndian.AppendUint64(out, uint64(len(m.plaintext)))
		out = append(out, ct...)
	} else {
		var frames [][]byte
		p := m.plaintext
		for uint32(len(p)) >= m.frameLen && !(m.finalFull && uint32(len(p)) == m.frameLen) {
			frames = append(frames, p[:m.frameLen])
			p = p[m.frameLen:]
		}
		order := m.frameOrder
		if order == nil {
			for i := range frames {
				order = append(order, uint32(i+1))
			}
		}
		for _, seq := range order {
			iv, ct := seal("AWSKMSEncryptionClient Frame", seq, frames[seq-1])
			out = append(u32(out, seq), iv...)
			out = append(out, ct...)
		}
		final := uint32(len(frames) + 1)
		iv, ct := seal("AWSKMSEncryptionClient Final Frame", final, p)
		out = append(u32(u32(out, 0xFFFFFFFF), final), iv...)
		out = append(u32(out, uint32(len(p))), ct...)
	}
	m.signed = len(out)
	if m.signs() {
		sum := sha512.Sum384(out)
		sig, err := ecdsa.SignASN1(rand.Reader, m.signer, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		out = chunk(out, sig)
	}
	return out
}

// kms decrypts the blobs it knows, and records what it was asked.
type kms struct {
	keys  map[string][]byte // blob -> data key
	asked []string
	ctx   map[string]string
}

func (k *kms) Decrypt(_ context.Context, id string, blob []byte, c map[string]string) ([]byte, error) {
	k.asked = append(k.asked, id)
	k.ctx = c
	if dk, ok := k.keys[string(blob)]; ok {
		return dk, nil
	}
	return nil, errors.New("kms: InvalidCiphertextException")
}

func kmsOf(ms ...*message) *kms {
	k := &kms{keys: map[string][]byte{}}
	for _, m := range ms {
		k.keys[string(m.blob)] = m.dataKey
	}
	return k
}

var suites = []struct {
	version byte
	suite   uint16
}{{1, 0x0078}, {1, 0x0178}, {1, 0x0378}, {2, 0x0478}, {2, 0x0578}}

func TestEverySuiteDecrypts(t *testing.T) {
	for _, s := range suites {
		for _, framed := range []bool{true, false} {
			for _, plain := range []string{"", "123", "12345678", "1234567890", "Temporary password: Zq9!x"} {
				t.Run(fmt.Sprintf("%#04x framed=%v %q", s.suite, framed, plain), func(t *testing.T) {
					m := newMessage(s.version, s.suite, framed)
					m.plaintext = []byte(plain)
					k := kmsOf(m)
					got, err := esdk.Decrypt(context.Background(), m.encode(t), k, keyID)
					if err != nil || string(got) != plain {
						t.Fatalf("got %q, %v; want %q", got, err, plain)
					}
					if len(k.asked) != 1 || k.asked[0] != keyID || k.ctx["userpool-id"] != "eu-west-1_x" {
						t.Fatalf("KMS asked %v with context %v", k.asked, k.ctx)
					}
				})
			}
		}
	}
}

func refused(t *testing.T, msg []byte, k esdk.KMS, why string) {
	t.Helper()
	got, err := esdk.Decrypt(context.Background(), msg, k, keyID)
	if !errors.Is(err, esdk.ErrMessage) || got != nil {
		t.Fatalf("%s: got %q, %v; want ErrMessage", why, got, err)
	}
}

// TestAWrongKeyCommitmentIsRefused: a v2 message whose header carries a
// commitment other than the data key's, its header tag valid, is refused
// (key commitment: one message cannot decrypt to two plaintexts under
// two keys).
func TestAWrongKeyCommitmentIsRefused(t *testing.T) {
	for _, s := range suites[3:] {
		m := newMessage(s.version, s.suite, true)
		m.commitment = bytes.Repeat([]byte{0x5a}, 32)
		refused(t, m.encode(t), kmsOf(m), fmt.Sprintf("%#04x with a wrong commitment", s.suite))
		// the same message with its right commitment decrypts: the
		// crafting is sound, only the commitment differs
		m.commitment = nil
		if _, err := esdk.Decrypt(context.Background(), m.encode(t), kmsOf(m), keyID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFramesOutOfOrderAreRefused: frames each valid under their own
// sequence number but sent out of order, or with one missing or
// repeated, are refused (the plaintext would come out reordered or cut).
func TestFramesOutOfOrderAreRefused(t *testing.T) {
	for _, s := range suites {
		for _, order := range [][]uint32{{2, 1}, {1}, {2}, {1, 1}, {1, 2, 2}} {
			m := newMessage(s.version, s.suite, true)
			m.plaintext = []byte("0123456789") // frames 1 and 2 of 4 bytes, a final one of 2
			m.frameOrder = order
			refused(t, m.encode(t), kmsOf(m), fmt.Sprintf("%#04x frames %v", s.suite, order))
		}
	}
}

// TestTamperingIsRefused: every single byte changed, every truncation,
// and bytes added, are refused, in every suite.
func TestTamperingIsRefused(t *testing.T) {
	for _, s := range suites {
		for _, framed := range []bool{true, false} {
			m := newMessage(s.version, s.suite, framed)
			msg := m.encode(t)
			k := kmsOf(m)
			for i := range msg {
				b := bytes.Clone(msg)
				b[i] ^= 0x01
				if got, err := esdk.Decrypt(context.Background(), b, k, keyID); err == nil {
					t.Fatalf("%#04x framed=%v: byte %d of %d flipped: decrypted %q", s.suite, framed, i, len(msg), got)
				}
			}
			for n := range len(msg) {
				if _, err := esdk.Decrypt(context.Background(), msg[:n], k, keyID); err == nil {
					t.Fatalf("%#04x framed=%v: truncated to %d of %d bytes: decrypted", s.suite, framed, n, len(msg))
				}
			}
			refused(t, append(bytes.Clone(msg), 0), k, "a byte added")
		}
	}
}

func TestTheDataKeyComesOnlyFromTheFunctionsKey(t *testing.T) {
	m := newMessage(2, 0x0578, true)
	m.keyID = "arn:aws:kms:eu-west-1:111122223333:key/other"
	k := kmsOf(m)
	refused(t, m.encode(t), k, "a data key under another key")
	if len(k.asked) != 0 {
		t.Fatalf("KMS was asked for another key's data key: %v", k.asked)
	}
	// KMS refuses: its error, not a message error
	m = newMessage(2, 0x0478, true)
	if _, err := esdk.Decrypt(context.Background(), m.encode(t), &kms{}, keyID); err == nil || errors.Is(err, esdk.ErrMessage) {
		t.Fatalf("KMS refused: %v", err)
	}
	// a data key that is not 256 bits
	m = newMessage(1, 0x0078, false)
	k = kmsOf(m)
	k.keys[string(m.blob)] = m.dataKey[:16]
	refused(t, m.encode(t), k, "a 128-bit data key")
}

func TestSignatures(t *testing.T) {
	for _, s := range []struct {
		version byte
		suite   uint16
	}{{1, 0x0378}, {2, 0x0578}} {
		m := newMessage(s.version, s.suite, true)
		msg := m.encode(t)
		body := msg[:m.signed]
		// signed by another key than the context's
		other, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		sum := sha512.Sum384(body)
		sig, _ := ecdsa.SignASN1(rand.Reader, other, sum[:])
		refused(t, chunk(bytes.Clone(body), sig), kmsOf(m), fmt.Sprintf("%#04x signed by another key", s.suite))
		// without its signature
		refused(t, bytes.Clone(body), kmsOf(m), fmt.Sprintf("%#04x without its signature", s.suite))
		// the right signature decrypts (the crafting is sound)
		sig, _ = ecdsa.SignASN1(rand.Reader, m.signer, sum[:])
		if _, err := esdk.Decrypt(context.Background(), chunk(bytes.Clone(body), sig), kmsOf(m), keyID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLimits(t *testing.T) {
	m := newMessage(1, 0x0178, true)
	m.frameLen = 4096
	m.plaintext = bytes.Repeat([]byte("x"), esdk.MaxPlaintext+1)
	refused(t, m.encode(t), kmsOf(m), "more than MaxPlaintext, framed")
	m = newMessage(2, 0x0478, false)
	m.plaintext = bytes.Repeat([]byte("x"), esdk.MaxPlaintext+1)
	refused(t, m.encode(t), kmsOf(m), "more than MaxPlaintext, unframed")
	m = newMessage(2, 0x0478, false)
	m.plaintext = bytes.Repeat([]byte("x"), esdk.MaxPlaintext)
	if got, err := esdk.Decrypt(context.Background(), m.encode(t), kmsOf(m), keyID); err != nil || len(got) != esdk.MaxPlaintext {
		t.Fatalf("MaxPlaintext exactly: %d bytes, %v", len(got), err)
	}
	// suites and versions that do not go together
	for _, c := range []struct {
		version byte
		suite   uint16
	}{{1, 0x0478}, {2, 0x0178}, {1, 0x0014}} {
		m := newMessage(c.version, c.suite, true)
		if c.suite == 0x0014 {
			m.suite = 0x0078
		}
		msg := m.encode(t)
		binary.BigEndian.PutUint16(msg[map[byte]int{1: 2, 2: 1}[c.version]:], c.suite)
		refused(t, msg, kmsOf(m), fmt.Sprintf("version %d with suite %#04x", c.version, c.suite))
	}
}

// TestHeaderFieldsAreCheckedNotOnlyAuthenticated: a header that is
// authentic (its tag valid under the data key) but not well-formed is
// refused: a wrong message type, an unknown suite, reserved bytes that
// are not zero, an unknown content type, a frame length that does not
// match the content type, an encryption context key twice.
func TestHeaderFieldsAreCheckedNotOnlyAuthenticated(t *testing.T) {
	zero, four := uint32(0), uint32(4)
	for name, craft := range map[string]func(m *message){
		"message type 0x81":           func(m *message) { m.msgType = 0x81 },
		"unknown suite 0x0014":        func(m *message) { m.suite = 0x0014 },
		"reserved bytes":              func(m *message) { m.reserved = []byte{0, 0, 0, 1} },
		"content type 3":              func(m *message) { m.contentType = 3 },
		"framed, frame length 0":      func(m *message) { m.frameField = &zero },
		"unframed, frame length 4":    func(m *message) { m.framed, m.frameField = false, &four },
		"an encryption context twice": func(m *message) { m.dupContext = true },
	} {
		m := newMessage(1, 0x0078, true)
		craft(m)
		k := kmsOf(m)
		got, err := esdk.Decrypt(context.Background(), m.encode(t), k, keyID)
		if err == nil || got != nil {
			t.Errorf("%s: decrypted %q", name, got)
		}
	}
	m := newMessage(2, 0x0478, true)
	m.noKeys = true
	refused(t, m.encode(t), kmsOf(m), "no encrypted data key")
}

// TestAFinalFrameMayBeFull: the final frame holds at most a frame, and
// exactly a frame is allowed (the SDK ends a plaintext of whole frames
// either way).
func TestAFinalFrameMayBeFull(t *testing.T) {
	for _, full := range []bool{false, true} {
		m := newMessage(2, 0x0578, true)
		m.plaintext, m.finalFull = []byte("01234567"), full
		if got, err := esdk.Decrypt(context.Background(), m.encode(t), kmsOf(m), keyID); err != nil || string(got) != "01234567" {
			t.Fatalf("a full final frame %v: %q, %v", full, got, err)
		}
	}
}
