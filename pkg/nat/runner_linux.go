package nat

import (
	"context"
	"fmt"
	"sync"

	"sigs.k8s.io/knftables"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// NewNftRunner returns the Runner of the table TableName in the network
// namespace at netnsPath (the process's own if empty). Every call runs
// knftables, which execs nft, on an OS thread switched into that
// namespace (netnsx.Do): nft is forked from that thread and changes that
// namespace's ruleset. knftables.New, which checks that nft runs, is
// v1.0.1 or later and may write tables, runs at the first call, in the
// namespace too; if it fails, that call returns its error and the next
// call tries again (a gateway without globalnet never syncs and only
// ever deletes the table).
func NewNftRunner(netnsPath string) Runner { return &nftRunner{netns: netnsPath} }

type nftRunner struct {
	netns string

	mu  sync.Mutex
	nft knftables.Interface // nil until knftables.New succeeded
}

func (r *nftRunner) Run(ctx context.Context, fill func(tx *knftables.Transaction)) error {
	return r.in(func(nft knftables.Interface) error {
		tx := nft.NewTransaction()
		fill(tx)
		return nft.Run(ctx, tx)
	})
}

func (r *nftRunner) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	var els []*knftables.Element
	err := r.in(func(nft knftables.Interface) (err error) {
		els, err = nft.ListElements(ctx, objectType, name)
		return err
	})
	return els, err
}

// in runs fn with the knftables interface on a thread in the namespace.
func (r *nftRunner) in(fn func(knftables.Interface) error) error {
	return netnsx.Do(r.netns, func() error {
		nft, err := r.knftables()
		if err != nil {
			return err
		}
		return fn(nft)
	})
}

// knftables returns the interface, made by knftables.New on the calling
// thread (in the namespace) the first time.
func (r *nftRunner) knftables() (knftables.Interface, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nft == nil {
		nft, err := knftables.New(knftables.IPv4Family, TableName)
		if err != nil {
			return nil, fmt.Errorf("set up nftables for table ip %s in netns %q: %w", TableName, r.netns, err)
		}
		r.nft = nft
	}
	return r.nft, nil
}
