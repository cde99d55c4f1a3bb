package broker

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// TunnelKeyName is the name of the TunnelKey that claims pubKey (the
// base64 text an Endpoint publishes): the lowercase hex SHA-256 of the
// key's bytes. Text that is not base64 yields "" (no TunnelKey names it).
func TunnelKeyName(pubKey string) string {
	b, err := base64.StdEncoding.DecodeString(pubKey)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// KeyOwners maps each public key claimed in keys to the cluster that
// claimed it (spec.clusterID). The admission cannot hash: a TunnelKey not
// named TunnelKeyName(spec.publicKey) claims nothing and is left out, as
// is one being deleted. Since names are unique, every key has at most one
// owner.
func KeyOwners(keys []v1alpha1.TunnelKey) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if k.DeletionTimestamp != nil || k.Name != TunnelKeyName(k.Spec.PublicKey) {
			continue
		}
		out[k.Spec.PublicKey] = k.Spec.ClusterID
	}
	return out
}
