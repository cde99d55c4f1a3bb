//go:build !linux

package nat

import (
	"context"
	"errors"
)

// NewNftRunner returns a Runner that fails: nftables exists on Linux only.
func NewNftRunner(netnsPath string) Runner { return noNft{} }

type noNft struct{}

func (noNft) Nft(context.Context, string, ...string) ([]byte, error) {
	return nil, errors.New("nftables needs Linux")
}
