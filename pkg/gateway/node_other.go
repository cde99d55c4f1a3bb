//go:build !linux

package gateway

import (
	"errors"
	"net/netip"
)

var errNotLinux = errors.New("the gateway needs Linux")

func enableForwarding(string, bool) error               { return errNotLinux }
func ensureHealthAddr(string, string, netip.Addr) error { return errNotLinux }

func linkExists(string, string) (bool, error) { return false, errNotLinux }

func readDeviceCounters(string, string) (deviceCounters, error) { return deviceCounters{}, errNotLinux }

func nodeNetworks(string, ...netip.Addr) ([]netip.Prefix, error) { return nil, errNotLinux }
