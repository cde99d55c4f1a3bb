//go:build !linux

package gateway

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

func newICMPProber(string, netip.Addr, time.Duration, *slog.Logger, func(string, time.Duration)) (prober, error) {
	return nil, errors.New("health checks need Linux")
}

func newUDPProber(string, netip.Addr, uint16, time.Duration, *slog.Logger, func(string, time.Duration)) (prober, error) {
	return nil, errors.New("candidate probes need Linux")
}

func listenUDP(string, netip.AddrPort) (net.PacketConn, error) {
	return nil, errors.New("candidate probes need Linux")
}
