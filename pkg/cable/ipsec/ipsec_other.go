//go:build !linux

package ipsec

import (
	"context"
	"errors"

	"github.com/causeway-net/causeway/pkg/cable"
)

// New reports that the driver needs Linux.
func New(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
	return nil, errors.ErrUnsupported
}
