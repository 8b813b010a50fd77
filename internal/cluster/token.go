package cluster

import (
	"crypto/rand"
	"encoding/base64"
	"os"
)

// WriteToken writes a new random coordinator token (32 bytes, standard
// base64) to path, readable by its owner only: what shards started on this
// machine share (--coordinator-token-file).
func WriteToken(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600)
}
