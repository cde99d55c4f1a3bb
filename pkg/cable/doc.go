// Package cable is the tunnel layer between gateways: a Driver interface,
// a registry of drivers by name, and the drivers themselves (WireGuard,
// VXLAN, IPsec). A driver is handed the complete desired set of
// connections and converges to it.
package cable
