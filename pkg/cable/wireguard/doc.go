// Package wireguard is the encrypted cable driver. It uses the kernel's
// WireGuard when `ip link add type wireguard` works in the target
// namespace, and otherwise an embedded wireguard-go device over a TUN in
// this process. Both are configured through wgctrl; routes for the
// remote subnets point into the device.
package wireguard
