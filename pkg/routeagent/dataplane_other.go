//go:build !linux

package routeagent

import "context"

// LinuxConfig configures the Linux dataplane (unused elsewhere).
type LinuxConfig struct {
	Netns  string
	Device string
	Table  int
}

// Linux is unavailable on this OS.
type Linux struct{}

// NewLinux fails on systems other than Linux.
func NewLinux(LinuxConfig) (*Linux, error) { return nil, ErrUnsupported }

// Set fails on systems other than Linux.
func (*Linux) Set(context.Context, DesiredState) (Report, error) { return Report{}, ErrUnsupported }

// Cleanup fails on systems other than Linux.
func (*Linux) Cleanup(context.Context) error { return ErrUnsupported }

// Close does nothing.
func (*Linux) Close() {}
