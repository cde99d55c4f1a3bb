package vip

import (
	"reflect"
	"testing"
)

// TestPinnedReadsWhatSetWrote reads a Kernel's pinned maps from the
// outside, as a benchmark watching a route agent does, through a sequence
// of Sets: services with backends, without backends, a removed backend,
// a removed service.
func TestPinnedReadsWhatSetWrote(t *testing.T) {
	requireRoot(t)
	cfg := Config{PinDir: newBPFFS(t), CgroupPath: newCgroup(t), MaxServices: 1024, MaxBackends: 4096, MaxReverseNAT: 1024}
	k, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = k.Cleanup() })
	p, err := OpenPinned(cfg.PinDir)
	if err != nil {
		t.Fatalf("open pinned: %v", err)
	}
	defer p.Close()

	a := ServiceKey{vipA, 80, TCP}
	b := ServiceKey{vipA, 81, TCP}
	u := ServiceKey{vipA, 80, UDP}
	type want struct {
		bes []Backend
		ok  bool
	}
	for i, step := range []struct {
		desired map[ServiceKey]Service
		want    map[ServiceKey]want
	}{
		{
			desired: map[ServiceKey]Service{a: on(be2, be1), b: {}},
			want:    map[ServiceKey]want{a: {[]Backend{be1, be2}, true}, b: {nil, true}, u: {nil, false}},
		},
		{
			desired: map[ServiceKey]Service{a: on(be2), b: on(be1), u: on(be1u)},
			want:    map[ServiceKey]want{a: {[]Backend{be2}, true}, b: {[]Backend{be1}, true}, u: {[]Backend{be1u}, true}},
		},
		{
			desired: map[ServiceKey]Service{u: on(be1u, be2u)},
			want:    map[ServiceKey]want{a: {nil, false}, b: {nil, false}, u: {[]Backend{be1u, be2u}, true}},
		},
	} {
		mustSet(t, k, step.desired)
		for key, w := range step.want {
			svc, ok, err := p.Service(key)
			bes := svc.Backends
			if err != nil {
				t.Fatalf("step %d: %s: %v", i, key, err)
			}
			if ok != w.ok || !reflect.DeepEqual(bes, w.bes) {
				t.Errorf("step %d: %s: got %v (service %v), want %v (service %v)", i, key, bes, ok, w.bes, w.ok)
			}
		}
	}
}
