// Package nat allocates global addresses (pure logic) and renders and
// applies the netfilter rules globalnet needs, one transaction per sync.
package nat
