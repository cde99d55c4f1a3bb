//go:build !linux

package wireguard

import (
	"context"
	"errors"

	"github.com/causeway-net/causeway/pkg/cable"
)

// New reports that the driver needs Linux.
func New(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
	return nil, errors.ErrUnsupported
}

// RemoveStaleSocket reports that the driver needs Linux.
func RemoveStaleSocket(string) (bool, error) { return false, errors.ErrUnsupported }
