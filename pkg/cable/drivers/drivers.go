// Package drivers builds the registry of the cable drivers this build
// supports. It exists apart from package cable so that cable does not
// import its own drivers.
package drivers

import (
	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/ipsec"
	"github.com/causeway-net/causeway/pkg/cable/vxlan"
	"github.com/causeway-net/causeway/pkg/cable/wireguard"
)

// Registry returns the drivers by their API names ("wireguard", "vxlan",
// "ipsec").
func Registry() cable.Registry {
	return cable.Registry{
		string(v1alpha1.CableWireGuard): {New: wireguard.New, RemoveStale: wireguard.RemoveStaleSocket, Keyed: true},
		string(v1alpha1.CableVXLAN):     {New: vxlan.New},
		string(v1alpha1.CableIPsec): {New: ipsec.New, Port: ipsec.IKEPort, Keyed: true,
			Device: func(string) string { return ipsec.TUNName }},
	}
}
