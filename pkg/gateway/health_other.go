//go:build !linux

package gateway

import (
	"errors"
	"log/slog"
	"net/netip"
	"time"
)

func newICMPProber(string, netip.Addr, time.Duration, *slog.Logger, func(string, time.Duration)) (prober, error) {
	return nil, errors.New("health checks need Linux")
}
