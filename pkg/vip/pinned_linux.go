package vip

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/causeway-net/causeway/bpf"
)

// Pinned reads the service and backend maps a Kernel pinned under a
// directory, read-only, without loading programs or taking the maps over:
// for tools and benchmarks that watch what a running route agent has
// programmed.
type Pinned struct {
	services, backends *ebpf.Map
}

// OpenPinned opens the vip_services and vip_backends pins under pinDir
// read-only.
func OpenPinned(pinDir string) (*Pinned, error) {
	ro := &ebpf.LoadPinOptions{ReadOnly: true}
	s, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, pinServices), ro)
	if err != nil {
		return nil, fmt.Errorf("open pinned %s: %w", pinServices, err)
	}
	b, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, pinBackends), ro)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open pinned %s: %w", pinBackends, err)
	}
	return &Pinned{services: s, backends: b}, nil
}

// errChanged means the maps changed while a service was being read.
var errChanged = errors.New("service changed while reading it")

// Backends returns the backends of key in slot order, as the programs see
// them now, and whether key is a service at all. A read that races a Set
// (a slot deleted between reading the service and its slots) is retried,
// so the answer is one the maps really held.
func (p *Pinned) Backends(key ServiceKey) ([]Backend, bool, error) {
	for attempt := 0; attempt < 10; attempt++ {
		bes, ok, err := p.read(key)
		if !errors.Is(err, errChanged) {
			return bes, ok, err
		}
	}
	return nil, false, fmt.Errorf("read service %s: %w (10 attempts)", key, errChanged)
}

func (p *Pinned) read(key ServiceKey) ([]Backend, bool, error) {
	var sv bpf.VipSvc
	if err := p.services.Lookup(toSvcKey(key), &sv); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("read service %s: %w", key, err)
	}
	out := make([]Backend, 0, sv.Count)
	for slot := uint32(0); slot < sv.Count; slot++ {
		var v bpf.VipAddr4
		err := p.backends.Lookup(bpf.VipBackendKey{Id: sv.Id, Slot: slot}, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, false, errChanged
		} else if err != nil {
			return nil, false, fmt.Errorf("read service %s slot %d: %w", key, slot, err)
		}
		addr, port := fromAddr4(v)
		out = append(out, Backend{Addr: addr, Port: port})
	}
	// The slots read must belong to the service as it is now: a Set may
	// have reused the ID or changed the count in between.
	var now bpf.VipSvc
	if err := p.services.Lookup(toSvcKey(key), &now); err != nil || now != sv {
		return nil, false, errChanged
	}
	return out, true, nil
}

// Close releases the maps (the pins stay).
func (p *Pinned) Close() error {
	return errors.Join(p.services.Close(), p.backends.Close())
}
