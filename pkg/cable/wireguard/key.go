package wireguard

import (
	"path/filepath"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/keyfile"
)

// KeyFile is the name of the private key file in the state directory.
const KeyFile = "wireguard.key"

// loadOrCreateKey reads the private key from dir, generating and storing
// one (mode 0600) if there is none.
func loadOrCreateKey(dir string) (wgtypes.Key, error) {
	k, err := keyfile.LoadOrCreate(filepath.Join(dir, KeyFile))
	return wgtypes.Key(k), err
}

// storeKey writes k atomically with mode 0600.
func storeKey(dir string, k wgtypes.Key) error {
	return keyfile.Store(filepath.Join(dir, KeyFile), cable.Key(k))
}
