package wireguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// KeyFile is the name of the private key file in the state directory.
const KeyFile = "wireguard.key"

// loadOrCreateKey reads the private key from dir, generating and storing
// one (mode 0600) if there is none.
func loadOrCreateKey(dir string) (wgtypes.Key, error) {
	path := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
		if err != nil {
			return wgtypes.Key{}, fmt.Errorf("parse private key %s: %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, fmt.Errorf("read private key: %w", err)
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("generate private key: %w", err)
	}
	if err := storeKey(dir, k); err != nil {
		return wgtypes.Key{}, err
	}
	return k, nil
}

// storeKey writes k atomically (temp file + rename) with mode 0600.
func storeKey(dir string, k wgtypes.Key) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, KeyFile+".tmp*")
	if err != nil {
		return fmt.Errorf("store private key: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("store private key: %w", err)
	}
	if _, err := f.WriteString(k.String() + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("store private key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("store private key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store private key: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, KeyFile)); err != nil {
		return fmt.Errorf("store private key: %w", err)
	}
	return nil
}
