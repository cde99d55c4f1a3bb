// Package fake is an in-memory cable.Driver for unit tests of callers
// (the gateway engine): it validates like a real driver, keeps the
// programmed connections, counts calls and can be told to fail or to
// report connections down.
package fake

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/causeway-net/causeway/pkg/cable"
)

// Driver is a fake cable.Driver. The zero value is not usable; use New.
type Driver struct {
	name  string
	local cable.LocalEndpoint
	req   cable.Requirements
	now   func() time.Time

	mu       sync.Mutex
	key      cable.Key
	conns    []cable.Connection
	down     map[string]bool
	setErr   error
	sets     int
	closed   bool
	cleaned  bool
	rotation byte
}

var (
	_ cable.Driver     = (*Driver)(nil)
	_ cable.KeyRotator = (*Driver)(nil)
)

// New returns a fake driver named name that validates with req; now is
// the clock for handshake times (time.Now if nil).
func New(name string, local cable.LocalEndpoint, req cable.Requirements, now func() time.Time) *Driver {
	if now == nil {
		now = time.Now
	}
	return &Driver{name: name, local: local, req: req, now: now, key: cable.Key{0xfa, 0x4e}, down: map[string]bool{}}
}

// Constructor returns a cable.Constructor that records every driver it
// creates in *created.
func Constructor(name string, req cable.Requirements, created *[]*Driver) cable.Constructor {
	return func(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
		d := New(name, local, req, nil)
		*created = append(*created, d)
		return d, nil
	}
}

// Name implements cable.Driver.
func (d *Driver) Name() string { return d.name }

// Local returns the endpoint the driver was created for.
func (d *Driver) Local() cable.LocalEndpoint { return d.local }

// PublicKey implements cable.Driver.
func (d *Driver) PublicKey() cable.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.key
}

// RotateKey implements cable.KeyRotator.
func (d *Driver) RotateKey(ctx context.Context) (cable.Key, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rotation++
	d.key = cable.Key{0xfa, 0x4e, d.rotation}
	return d.key, nil
}

// FailSets makes every following Set return err without programming
// anything (nil restores normal behaviour).
func (d *Driver) FailSets(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setErr = err
}

// SetDown marks the connection to clusterID as not connected.
func (d *Driver) SetDown(clusterID string, down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down[clusterID] = down
}

// Set implements cable.Driver.
func (d *Driver) Set(ctx context.Context, conns []cable.Connection) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("fake: driver closed")
	}
	d.sets++
	if d.setErr != nil {
		return d.setErr
	}
	valid, err := cable.Validate(conns, d.req)
	d.conns = valid
	return err
}

// Programmed returns the connections of the last successful Set.
func (d *Driver) Programmed() []cable.Connection {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.conns)
}

// Sets counts Set calls.
func (d *Driver) Sets() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sets
}

// Connections implements cable.Driver.
func (d *Driver) Connections(ctx context.Context) ([]cable.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("fake: driver closed")
	}
	var out []cable.Status
	for _, c := range d.conns {
		st := cable.Status{ClusterID: c.ClusterID, Endpoint: c.Endpoint, Subnets: c.Subnets, Connected: !d.down[c.ClusterID], RxBytes: -1, TxBytes: -1}
		if st.Connected {
			st.LastHandshake = d.now()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cable.Status) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return out, nil
}

// Close implements cable.Driver.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

// Cleanup implements cable.Driver.
func (d *Driver) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns = nil
	d.cleaned = true
	d.closed = true
	return nil
}

// CleanedUp reports whether Cleanup was called.
func (d *Driver) CleanedUp() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cleaned
}
