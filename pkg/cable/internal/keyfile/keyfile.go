// Package keyfile keeps a gateway's X25519 private key (the WireGuard
// driver's, the ipsec driver's) in a file of its state directory: base64,
// mode 0600, written atomically (temp file + rename). The key never leaves
// the node.
package keyfile

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/causeway-net/causeway/pkg/cable"
)

// LoadOrCreate reads the private key at path, generating and storing one
// if there is none.
func LoadOrCreate(path string) (cable.Key, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := cable.ParseKey(strings.TrimSpace(string(b)))
		if err != nil {
			return cable.Key{}, fmt.Errorf("private key %s: %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return cable.Key{}, fmt.Errorf("read private key: %w", err)
	}
	k, err := Generate()
	if err != nil {
		return cable.Key{}, err
	}
	if err := Store(path, k); err != nil {
		return cable.Key{}, err
	}
	return k, nil
}

// Generate returns a new X25519 private key.
func Generate() (cable.Key, error) {
	p, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return cable.Key{}, fmt.Errorf("generate private key: %w", err)
	}
	return cable.Key(p.Bytes()), nil
}

// Store writes k to path atomically with mode 0600, creating its
// directory (mode 0700) if needed.
func Store(path string, k cable.Key) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("store private key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(k.String() + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("store private key: %w", err)
	}
	return nil
}
