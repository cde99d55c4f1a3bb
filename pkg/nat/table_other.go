//go:build !linux

package nat

import (
	"context"
	"errors"
)

var errNoNft = errors.New("nftables needs Linux")

// Runner stands for the nftables access Table has on Linux.
type Runner struct{}

// NewNftRunner returns a Runner; nftables exists on Linux only.
func NewNftRunner(netnsPath string) Runner { return Runner{} }

// Table fails every call but RequestFull: nftables exists on Linux only.
type Table struct{}

// NewTable returns a Table that fails.
func NewTable(Runner, *Metrics) *Table { return &Table{} }

// RequestFull does nothing.
func (*Table) RequestFull() {}

// Sync fails.
func (*Table) Sync(context.Context, Config) (SyncResult, error) { return SyncResult{}, errNoNft }

// Cleanup fails.
func (*Table) Cleanup(context.Context) error { return errNoNft }

// Present reports false.
func (*Table) Present(context.Context) bool { return false }

// Counts fails.
func (*Table) Counts(context.Context) (map[string]int, error) { return nil, errNoNft }
