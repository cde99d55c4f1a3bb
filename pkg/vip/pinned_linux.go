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

// Service returns what key is translated to, backends in slot order with
// their weights, as the programs see it now, and whether key is a service
// at all. A read that races a Set (a slot deleted between reading the
// service and its slots) is retried, so the answer is one the maps really
// held.
func (p *Pinned) Service(key ServiceKey) (Service, bool, error) {
	for attempt := 0; attempt < 10; attempt++ {
		svc, ok, err := p.read(key)
		if !errors.Is(err, errChanged) {
			return svc, ok, err
		}
	}
	return Service{}, false, fmt.Errorf("read service %s: %w (10 attempts)", key, errChanged)
}

// Services returns every service the maps hold (each read as Service does).
func (p *Pinned) Services() (map[ServiceKey]Service, error) {
	var keys []ServiceKey
	var k bpf.VipSvcKey
	var v bpf.VipSvc
	it := p.services.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, fromSvcKey(k))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", pinServices, err)
	}
	out := make(map[ServiceKey]Service, len(keys))
	for _, key := range keys {
		svc, ok, err := p.Service(key)
		if err != nil {
			return nil, err
		}
		if ok { // else deleted since the iteration
			out[key] = svc
		}
	}
	return out, nil
}

func (p *Pinned) read(key ServiceKey) (Service, bool, error) {
	var sv bpf.VipSvc
	if err := p.services.Lookup(toSvcKey(key), &sv); errors.Is(err, ebpf.ErrKeyNotExist) {
		return Service{}, false, nil
	} else if err != nil {
		return Service{}, false, fmt.Errorf("read service %s: %w", key, err)
	}
	out := Service{AffinitySeconds: sv.Affinity}
	for i := uint32(0); i < sv.Count; i++ {
		var v bpf.VipSlot
		err := p.backends.Lookup(bpf.VipBackendKey{Id: sv.Id, Slot: i}, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Service{}, false, errChanged
		} else if err != nil {
			return Service{}, false, fmt.Errorf("read service %s slot %d: %w", key, i, err)
		}
		out.Backends = append(out.Backends, fromSlot(v).Backend)
	}
	// The slots read must belong to the service as it is now: a Set may
	// have reused the ID or changed the count in between.
	var now bpf.VipSvc
	if err := p.services.Lookup(toSvcKey(key), &now); err != nil || now != sv {
		return Service{}, false, errChanged
	}
	return out, true, nil
}

// Close releases the maps (the pins stay).
func (p *Pinned) Close() error {
	return errors.Join(p.services.Close(), p.backends.Close())
}
