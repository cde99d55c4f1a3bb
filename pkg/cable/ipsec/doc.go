// Package ipsec is the IKEv2/IPsec cable driver. It runs one strongSwan
// charon daemon per gateway (per network namespace), configured only
// through charon's VICI socket (github.com/strongswan/govici): one IKE
// connection per remote gateway, authenticated with a pre-shared key that
// only the two gateways of the pair can derive (DerivePSK: X25519 of the
// local private key, kept in the state directory, and the remote's
// published public key),
// tunnel-mode CHILD_SAs whose traffic selectors are the local subnets and
// the peer's validated subnets, IPv4 and IPv6 alike. ESP is done by
// charon's kernel-libipsec plugin (userspace ESP over a TUN device) so
// that it works on kernels without ESP; the driver owns the routes to the
// remote subnets through that TUN (TUNName: kernel-libipsec's name, it
// cannot be renamed, so LocalEndpoint.Interface is not used).
package ipsec
