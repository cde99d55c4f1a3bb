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
	_, err := r.New(context.Background(), "gre", cable.LocalEndpoint{})
	if !errors.Is(err, cable.ErrUnknownDriver) {
		t.Fatalf("gre: err %v, want ErrUnknownDriver", err)
	}
}
