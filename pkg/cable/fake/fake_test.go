package fake

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
)

func TestFake(t *testing.T) {
	ctx := context.Background()
	var created []*Driver
	reg := cable.Registry{"wireguard": Constructor("wireguard", cable.Requirements{PublicKey: true}, &created)}
	drv, err := reg.New(ctx, "wireguard", cable.LocalEndpoint{Interface: "cw-c1"})
	if err != nil {
		t.Fatal(err)
	}
	d := created[0]
	good := cable.Connection{ClusterID: "c2", Endpoint: netip.MustParseAddrPort("198.18.0.2:51820"), PublicKey: cable.Key{2},
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}}
	nokey := good
	nokey.ClusterID, nokey.PublicKey = "c3", cable.Key{}
	nokey.Subnets = []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}
	err = drv.Set(ctx, []cable.Connection{good, nokey})
	var ve *cable.ValidationError
	if !errors.As(err, &ve) || ve.ClusterID != "c3" {
		t.Fatalf("err %v, want ValidationError for c3", err)
	}
	if p := d.Programmed(); len(p) != 1 || p[0].ClusterID != "c2" {
		t.Fatalf("programmed %+v", p)
	}
	d.SetDown("c2", true)
	st, _ := drv.Connections(ctx)
	if len(st) != 1 || st[0].Connected {
		t.Fatalf("status %+v, want c2 down", st)
	}
	boom := errors.New("boom")
	d.FailSets(boom)
	if err := drv.Set(ctx, nil); !errors.Is(err, boom) || len(d.Programmed()) != 1 {
		t.Fatalf("failing set: %v, programmed %d", err, len(d.Programmed()))
	}
	if err := drv.Cleanup(ctx); err != nil || !d.CleanedUp() || len(d.Programmed()) != 0 {
		t.Fatal("cleanup did not clear")
	}
}
