// Package vxlan is the unencrypted cable driver: one kernel VXLAN device
// per gateway with static unicast FDB and neighbour entries per remote
// gateway, and routes for the remote subnets (IPv4 and IPv6, over an
// IPv4 underlay) through it. No multicast, no learning, no flooding.
package vxlan
