//go:build !linux

package routeagent

import (
	"context"
	"net/netip"
)

// LinuxConfig configures the Linux dataplane (unused elsewhere).
type LinuxConfig struct {
	Netns     string
	Device    string
	Table     int
	IPTables  any
	IP6Tables any
	Logger    any
}

// Linux is unavailable on this OS.
type Linux struct{}

// NewLinux fails on systems other than Linux.
func NewLinux(LinuxConfig) (*Linux, error) { return nil, ErrUnsupported }

// Set fails on systems other than Linux.
func (*Linux) Set(context.Context, DesiredState) (Report, error) { return Report{}, ErrUnsupported }

// Cleanup fails on systems other than Linux.
func (*Linux) Cleanup(context.Context) error { return ErrUnsupported }

// ForgetFlows fails on systems other than Linux.
func (*Linux) ForgetFlows(context.Context, []netip.Prefix) (uint, error) { return 0, ErrUnsupported }

// Close does nothing.
func (*Linux) Close() {}

// NodeLinkMTU fails on systems other than Linux.
func NodeLinkMTU(netip.Addr) (int, error) { return 0, ErrUnsupported }

// ExecIPTables is unavailable on this OS.
type ExecIPTables struct{ SaveBin, RestoreBin, Netns string }
