//go:build !linux

package nat

import (
	"context"
	"errors"
	"net/netip"
)

// NewNftRunner returns a Runner that fails: nftables exists on Linux only.
func NewNftRunner(netnsPath string) Runner { return noNft{} }

type noNft struct{}

func (noNft) Nft(context.Context, string, ...string) ([]byte, error) {
	return nil, errors.New("nftables needs Linux")
}

// DeleteConntrack fails: conntrack exists on Linux only.
func DeleteConntrack(string, []netip.Prefix) (uint, error) {
	return 0, errors.New("conntrack needs Linux")
}
