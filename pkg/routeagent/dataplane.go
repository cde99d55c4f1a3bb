package routeagent

import (
	"context"
	"errors"
	"net/netip"
)

// Dataplane is the mechanism: it makes the node equal to a DesiredState.
type Dataplane interface {
	// Set diffs desired against what exists on the node (devices, FDB and
	// neighbour entries, owned routes, owned chains) and changes only what
	// differs; an equal state changes nothing.
	Set(ctx context.Context, desired DesiredState) (Report, error)
	// Cleanup removes everything the agent owns on the node.
	Cleanup(ctx context.Context) error
	// ForgetFlows deletes the node's conntrack entries of flows to or
	// from prefixes and returns how many it deleted.
	ForgetFlows(ctx context.Context, prefixes []netip.Prefix) (uint, error)
}

// Report says what a Set changed.
type Report struct {
	// Changes describes each change, e.g. "route 10.2.0.0/16 via 241.0.0.1 added".
	Changes []string
	// OutsideFlush: the canary chain was gone (something outside removed
	// our chains since the last Set); every owned object was rewritten.
	OutsideFlush bool
}

// ErrUnsupported is returned by the Dataplane on systems other than Linux.
var ErrUnsupported = errors.New("route agent dataplane: only Linux is supported")
