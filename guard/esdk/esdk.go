// Package esdk decrypts the messages of the AWS Encryption SDK that
// Cognito's custom sender triggers receive: the code (or temporary
// password) encrypted under the stack's KMS key.
//
// It reads the message format the SDK documents (versions 1 and 2,
// framed and unframed bodies) for the algorithm suites with a 256-bit
// AES-GCM key: 0x0078 (no key derivation), 0x0178 (HKDF-SHA256), 0x0378
// (HKDF-SHA384, ECDSA P-384 signature: what Cognito sends, the SDK 1.x
// default), 0x0478 and 0x0578 (HKDF-SHA512 with key commitment, without
// and with a signature: the SDK 2.x defaults). The data key is decrypted
// by KMS (kms:Decrypt on the one key the function is given, with the
// message's encryption context); the header is authenticated, every
// frame's tag checked in order, the key commitment and the signature
// verified, before a byte of plaintext is returned.
//
// Why not the SDK's own Go release: it is generated from Dafny and brings
// the Dafny runtime, the Material Providers Library and its own AWS
// client stack, several MiB in every binary that links it, to decrypt a
// six-digit code; this file uses the standard library and the KMS client
// the functions already carry. Its correctness is tested against
// messages made by the SDK's JavaScript release (tests/cognito), and
// against tampering of every part.
package esdk

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// KMS decrypts a data key: kms:Decrypt, with the key, the ciphertext
// blob and the encryption context of the message.
type KMS interface {
	Decrypt(ctx context.Context, keyID string, blob []byte, context map[string]string) ([]byte, error)
}

// ErrMessage is the error of a message that is not a well-formed,
// authentic message of a supported suite (never the cause in detail
// beyond the part that failed, and never a byte of the message).
var ErrMessage = errors.New("esdk: not an authentic message")

// MaxPlaintext bounds what Decrypt returns: Cognito's codes and temporary
// passwords are short.
const MaxPlaintext = 64 << 10

type suite struct {
	id        uint16
	kdf       func() hash.Hash // nil: the data key is the key
	commit    bool             // v2: HKDF-SHA512 with the message id as salt, and a commitment key
	signature bool             // ECDSA P-384 over SHA-384
}

var suites = map[uint16]suite{
	0x0078: {id: 0x0078},
	0x0178: {id: 0x0178, kdf: sha256.New},
	0x0378: {id: 0x0378, kdf: sha512.New384, signature: true},
	0x0478: {id: 0x0478, kdf: sha512.New, commit: true},
	0x0578: {id: 0x0578, kdf: sha512.New, commit: true, signature: true},
}

// publicKeyContext is the encryption context entry of a signing suite's
// verification key (base64 of the compressed point).
const publicKeyContext = "aws-crypto-public-key"

// Decrypt authenticates and decrypts message, asking kms to decrypt the
// data key encrypted under keyID (an encrypted data key under another
// key, or of another provider, is never sent to KMS).
func Decrypt(ctx context.Context, message []byte, kms KMS, keyID string) ([]byte, error) {
	r := &reader{b: message}
	h, err := readHeader(r)
	if err != nil {
		return nil, err
	}
	var dataKey []byte
	for _, k := range h.keys {
		if k.provider != "aws-kms" || k.info != keyID {
			continue
		}
		if dataKey, err = kms.Decrypt(ctx, keyID, k.blob, h.context); err != nil {
			return nil, fmt.Errorf("esdk: decrypt the data key: %w", err)
		}
		break
	}
	if dataKey == nil {
		return nil, fmt.Errorf("%w: no data key under the function's KMS key", ErrMessage)
	}
	if len(dataKey) != 32 {
		return nil, fmt.Errorf("%w: a data key of %d bytes", ErrMessage, len(dataKey))
	}
	key, err := deriveKey(h, dataKey)
	if err != nil {
		return nil, err
	}
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCM(block)
	// the header's authentication tag: an empty plaintext under the header
	if _, err := gcm.Open(nil, h.authIV, h.authTag, h.raw); err != nil {
		return nil, fmt.Errorf("%w: the header does not authenticate", ErrMessage)
	}
	plain, err := readBody(r, h, gcm)
	if err != nil {
		return nil, err
	}
	if h.suite.signature {
		signed := message[:r.off]
		n, err := r.u16()
		if err != nil {
			return nil, err
		}
		sig, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		if err := verify(h.context[publicKeyContext], signed, sig); err != nil {
			return nil, err
		}
	}
	if r.off != len(message) {
		return nil, fmt.Errorf("%w: trailing bytes", ErrMessage)
	}
	return plain, nil
}

type dataKey struct {
	provider, info string
	blob           []byte
}

type header struct {
	version    byte
	suite      suite
	messageID  []byte
	context    map[string]string
	keys       []dataKey
	framed     bool
	ivLen      int
	frameLen   uint32
	commitment []byte
	raw        []byte // the header's bytes, the header tag's AAD
	authIV     []byte
	authTag    []byte
}

func readHeader(r *reader) (*header, error) {
	h := &header{}
	var err error
	if err = h.readSuite(r); err != nil {
		return nil, err
	}
	idLen := 16
	if h.version == 2 {
		idLen = 32
	}
	if h.messageID, err = r.bytes(idLen); err != nil {
		return nil, err
	}
	if h.context, err = readContext(r); err != nil {
		return nil, err
	}
	if h.keys, err = readDataKeys(r); err != nil {
		return nil, err
	}
	if err = h.readContent(r); err != nil {
		return nil, err
	}
	if h.version == 2 {
		if h.commitment, err = r.bytes(32); err != nil {
			return nil, err
		}
	}
	h.raw = r.b[:r.off]
	if h.version == 1 {
		if h.authIV, err = r.bytes(12); err != nil {
			return nil, err
		}
	} else {
		h.authIV = make([]byte, 12)
	}
	if h.authTag, err = r.bytes(16); err != nil {
		return nil, err
	}
	return h, nil
}

// readSuite reads the header's version (and version 1's message type)
// and its algorithm suite, which must be one of suites that commits to
// its key if and only if the version is 2.
func (h *header) readSuite(r *reader) error {
	var err error
	if h.version, err = r.byte(); err != nil {
		return err
	}
	switch h.version {
	case 1:
		if t, err := r.byte(); err != nil || t != 0x80 {
			return fmt.Errorf("%w: message type", ErrMessage)
		}
	case 2:
	default:
		return fmt.Errorf("%w: version %d", ErrMessage, h.version)
	}
	id, err := r.u16()
	if err != nil {
		return err
	}
	s, ok := suites[id]
	if !ok || s.commit != (h.version == 2) {
		return fmt.Errorf("%w: algorithm suite %#04x", ErrMessage, id)
	}
	h.suite = s
	return nil
}

// readDataKeys reads the encrypted data keys: at least one.
func readDataKeys(r *reader) ([]dataKey, error) {
	n, err := r.u16()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no encrypted data key", ErrMessage)
	}
	var keys []dataKey
	for range n {
		var k dataKey
		var b []byte
		if b, err = r.chunk(); err != nil {
			return nil, err
		}
		k.provider = string(b)
		if b, err = r.chunk(); err != nil {
			return nil, err
		}
		k.info = string(b)
		if k.blob, err = r.chunk(); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// readContent reads how the content is laid out: framed or not, version
// 1's reserved bytes and IV length, and the frame length (zero if and
// only if not framed).
func (h *header) readContent(r *reader) error {
	ct, err := r.byte()
	if err != nil {
		return err
	}
	switch ct {
	case 1:
	case 2:
		h.framed = true
	default:
		return fmt.Errorf("%w: content type %d", ErrMessage, ct)
	}
	h.ivLen = 12
	if h.version == 1 {
		reserved, err := r.bytes(4)
		if err != nil {
			return err
		}
		if !bytes.Equal(reserved, []byte{0, 0, 0, 0}) {
			return fmt.Errorf("%w: reserved bytes", ErrMessage)
		}
		ivLen, err := r.byte()
		if err != nil {
			return err
		}
		if ivLen != 12 {
			return fmt.Errorf("%w: IV length %d", ErrMessage, ivLen)
		}
	}
	if h.frameLen, err = r.u32(); err != nil {
		return err
	}
	if h.framed == (h.frameLen == 0) {
		return fmt.Errorf("%w: frame length %d", ErrMessage, h.frameLen)
	}
	return nil
}

func readContext(r *reader) (map[string]string, error) {
	aadLen, err := r.u16()
	if err != nil {
		return nil, err
	}
	ctx := map[string]string{}
	if aadLen == 0 {
		return ctx, nil
	}
	aad, err := r.bytes(int(aadLen))
	if err != nil {
		return nil, err
	}
	c := &reader{b: aad}
	n, err := c.u16()
	if err != nil {
		return nil, err
	}
	for range n {
		k, err := c.chunk()
		if err != nil {
			return nil, err
		}
		v, err := c.chunk()
		if err != nil {
			return nil, err
		}
		if _, dup := ctx[string(k)]; dup {
			return nil, fmt.Errorf("%w: encryption context key twice", ErrMessage)
		}
		ctx[string(k)] = string(v)
	}
	if c.off != len(aad) {
		return nil, fmt.Errorf("%w: encryption context length", ErrMessage)
	}
	return ctx, nil
}

func deriveKey(h *header, dk []byte) ([]byte, error) {
	s := h.suite
	switch {
	case s.kdf == nil:
		return dk, nil
	case s.commit:
		info := binary.BigEndian.AppendUint16(nil, s.id)
		key, err := hkdf.Key(sha512.New, dk, h.messageID, string(append(info, "DERIVEKEY"...)), 32)
		if err != nil {
			return nil, err
		}
		commit, err := hkdf.Key(sha512.New, dk, h.messageID, "COMMITKEY", 32)
		if err != nil {
			return nil, err
		}
		if subtle.ConstantTimeCompare(commit, h.commitment) != 1 {
			return nil, fmt.Errorf("%w: the key commitment does not match", ErrMessage)
		}
		return key, nil
	default:
		info := binary.BigEndian.AppendUint16(nil, s.id)
		return hkdf.Key(s.kdf, dk, nil, string(append(info, h.messageID...)), 32)
	}
}

// verify checks the footer's ECDSA P-384 signature over SHA-384 of the
// header and body, against the key the encryption context carries.
func verify(encoded string, signed, sig []byte) error {
	point, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || encoded == "" {
		return fmt.Errorf("%w: no verification key", ErrMessage)
	}
	x, y := elliptic.UnmarshalCompressed(elliptic.P384(), point)
	if x == nil {
		return fmt.Errorf("%w: verification key", ErrMessage)
	}
	raw := make([]byte, 97)
	raw[0] = 4
	x.FillBytes(raw[1:49])
	y.FillBytes(raw[49:])
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P384(), raw)
	if err != nil {
		return fmt.Errorf("%w: verification key", ErrMessage)
	}
	sum := sha512.Sum384(signed)
	if !ecdsa.VerifyASN1(pub, sum[:], sig) {
		return fmt.Errorf("%w: the signature does not verify", ErrMessage)
	}
	return nil
}
