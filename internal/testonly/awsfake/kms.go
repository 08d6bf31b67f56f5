package awsfake

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"net/http"
)

// AddKMSKey creates a symmetric KMS key named arn: GenerateDataKey,
// Encrypt and Decrypt answer for it (JSON 1.1, TrentService), binding each
// ciphertext to the key and to its encryption context as KMS does.
func (s *Server) AddKMSKey(arn string) {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	s.AddKMSKeyMaterial(arn, k)
}

// AddKMSKeyMaterial creates the KMS key arn with the given 32 bytes of
// key material: messages encrypted under it (the sample events') decrypt
// in every run.
func (s *Server) AddKMSKeyMaterial(arn string, k []byte) {
	s.mu.Lock()
	if s.kmsKeys == nil {
		s.kmsKeys = map[string][]byte{}
	}
	s.kmsKeys[arn] = k
	s.mu.Unlock()
}

// kms answers the KMS operations.
func (s *Server) kms(w http.ResponseWriter, op string, body []byte) {
	var in struct {
		KeyID             string `json:"KeyId"`
		CiphertextBlob    []byte
		Plaintext         []byte
		NumberOfBytes     int
		KeySpec           string
		EncryptionContext map[string]string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		jsonError(w, 400, "ValidationException", "malformed request")
		return
	}
	s.call("kms:" + op)
	if op == "Decrypt" && in.KeyID == "" {
		in.KeyID = blobKey(in.CiphertextBlob)
	}
	if s.refused(w, "kms:"+op, in.KeyID) {
		return
	}
	s.mu.Lock()
	master := s.kmsKeys[in.KeyID]
	s.mu.Unlock()
	if master == nil {
		jsonError(w, 400, "NotFoundException", "Key '"+in.KeyID+"' does not exist")
		return
	}
	gcm := func() cipher.AEAD { b, _ := aes.NewCipher(master); g, _ := cipher.NewGCM(b); return g }()
	aad, _ := json.Marshal(in.EncryptionContext) // maps marshal sorted: canonical
	seal := func(p []byte) []byte {
		blob := binary.BigEndian.AppendUint16(nil, uint16(len(in.KeyID)))
		blob = append(blob, in.KeyID...)
		nonce := make([]byte, 12)
		_, _ = rand.Read(nonce)
		blob = append(blob, nonce...)
		return gcm.Seal(blob, nonce, p, aad)
	}
	switch op {
	case "GenerateDataKey":
		p := make([]byte, dataKeySize(in.KeySpec, in.NumberOfBytes))
		_, _ = rand.Read(p)
		writeAmzJSON(w, map[string]any{"KeyId": in.KeyID, "Plaintext": p, "CiphertextBlob": seal(p)})
	case "Encrypt":
		writeAmzJSON(w, map[string]any{"KeyId": in.KeyID, "CiphertextBlob": seal(in.Plaintext), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"})
	case "Decrypt":
		kmsDecrypt(w, gcm, in.KeyID, in.CiphertextBlob, aad)
	default:
		jsonError(w, 400, "UnknownOperation", "awsfake: kms "+op)
	}
}

// dataKeySize is how many bytes GenerateDataKey makes for a key spec
// (AES_256 or AES_128) or, without one, for NumberOfBytes n (0: 32).
func dataKeySize(spec string, n int) int {
	switch {
	case spec == "AES_256" || n == 0:
		n = 32
	case spec == "AES_128":
		n = 16
	}
	return n
}

// kmsDecrypt answers Decrypt of blob under the key keyID (its material's
// gcm), bound to the encryption context aad.
func kmsDecrypt(w http.ResponseWriter, gcm cipher.AEAD, keyID string, blob, aad []byte) {
	b := blob
	if blobKey(b) != keyID {
		jsonError(w, 400, "IncorrectKeyException", "the ciphertext was not encrypted under the KMS key")
		return
	}
	b = b[2+len(keyID):]
	if len(b) < 12+16 {
		jsonError(w, 400, "InvalidCiphertextException", "")
		return
	}
	p, err := gcm.Open(nil, b[:12], b[12:], aad)
	if err != nil {
		jsonError(w, 400, "InvalidCiphertextException", "")
		return
	}
	writeAmzJSON(w, map[string]any{"KeyId": keyID, "Plaintext": p, "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"})
}

// blobKey is the key a fake ciphertext blob names.
func blobKey(b []byte) string {
	if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
		return ""
	}
	return string(b[2 : 2+int(binary.BigEndian.Uint16(b))])
}
