package esdk

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
)

const (
	frameAAD  = "AWSKMSEncryptionClient Frame"
	finalAAD  = "AWSKMSEncryptionClient Final Frame"
	singleAAD = "AWSKMSEncryptionClient Single Block"
	finalSeq  = 0xFFFFFFFF
)

func bodyAAD(messageID []byte, kind string, seq uint32, n uint64) []byte {
	b := append(append([]byte(nil), messageID...), kind...)
	b = binary.BigEndian.AppendUint32(b, seq)
	return binary.BigEndian.AppendUint64(b, n)
}

// opener authenticates and decrypts a body's frames into plain, which
// may hold at most MaxPlaintext bytes.
type opener struct {
	gcm   cipher.AEAD
	plain []byte
}

// open authenticates and decrypts one frame (ct and its tag, under iv
// and aad) and appends it to plain.
func (o *opener) open(iv, ct, tag, aad []byte) error {
	if len(o.plain)+len(ct) > MaxPlaintext {
		return fmt.Errorf("%w: more than %d bytes", ErrMessage, MaxPlaintext)
	}
	p, err := o.gcm.Open(nil, iv, append(append([]byte(nil), ct...), tag...), aad)
	if err != nil {
		return fmt.Errorf("%w: a frame does not authenticate", ErrMessage)
	}
	o.plain = append(o.plain, p...)
	return nil
}

func readBody(r *reader, h *header, gcm cipher.AEAD) ([]byte, error) {
	o := &opener{gcm: gcm}
	if !h.framed {
		return readSingle(r, h, o)
	}
	return readFrames(r, h, o)
}

// readSingle reads a body that is not framed: one block.
func readSingle(r *reader, h *header, o *opener) ([]byte, error) {
	iv, err := r.bytes(12)
	if err != nil {
		return nil, err
	}
	n, err := r.u64()
	if err != nil {
		return nil, err
	}
	if n > MaxPlaintext {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrMessage, MaxPlaintext)
	}
	ct, err := r.bytes(int(n))
	if err != nil {
		return nil, err
	}
	tag, err := r.bytes(16)
	if err != nil {
		return nil, err
	}
	return o.plain, o.open(iv, ct, tag, bodyAAD(h.messageID, singleAAD, 1, n))
}

// readFrames reads a framed body: frames numbered from 1 in order, the
// last marked final and no longer than the others.
func readFrames(r *reader, h *header, o *opener) ([]byte, error) {
	for want := uint32(1); ; want++ {
		seq, err := r.u32()
		if err != nil {
			return nil, err
		}
		final := seq == finalSeq
		if final {
			if seq, err = r.u32(); err != nil {
				return nil, err
			}
		}
		if seq != want {
			return nil, fmt.Errorf("%w: frame %d out of order", ErrMessage, seq)
		}
		iv, err := r.bytes(12)
		if err != nil {
			return nil, err
		}
		n := h.frameLen
		if final {
			if n, err = r.u32(); err != nil {
				return nil, err
			}
			if n > h.frameLen {
				return nil, fmt.Errorf("%w: final frame longer than a frame", ErrMessage)
			}
		}
		ct, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		tag, err := r.bytes(16)
		if err != nil {
			return nil, err
		}
		kind := frameAAD
		if final {
			kind = finalAAD
		}
		if err := o.open(iv, ct, tag, bodyAAD(h.messageID, kind, seq, uint64(n))); err != nil {
			return nil, err
		}
		if final {
			return o.plain, nil
		}
	}
}
