//go:build !linux

package nat

import (
	"errors"
	"net/netip"
)

// DeleteConntrack fails: conntrack exists on Linux only.
func DeleteConntrack(string, []netip.Prefix) (uint, error) {
	return 0, errors.New("conntrack needs Linux")
}
