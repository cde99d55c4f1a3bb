package drivers

import (
	"context"
	"errors"
	"testing"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
)

func TestRegistry(t *testing.T) {
	r := Registry()
	for _, name := range []v1alpha1.CableDriver{v1alpha1.CableWireGuard, v1alpha1.CableVXLAN, v1alpha1.CableIPsec} {
		if r[string(name)].New == nil {
			t.Errorf("driver %q missing", name)
		}
	}
	// A driver that authenticates peers by key claims it in the broker.
	for name, keyed := range map[v1alpha1.CableDriver]bool{v1alpha1.CableWireGuard: true, v1alpha1.CableVXLAN: false, v1alpha1.CableIPsec: true} {
		if r[string(name)].Keyed != keyed {
			t.Errorf("driver %q: Keyed = %v, want %v", name, r[string(name)].Keyed, keyed)
		}
	}
	_, err := r.New(context.Background(), "gre", cable.LocalEndpoint{})
	if !errors.Is(err, cable.ErrUnknownDriver) {
		t.Fatalf("gre: err %v, want ErrUnknownDriver", err)
	}
}
