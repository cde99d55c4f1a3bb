// Package nat allocates global addresses (pure logic) and renders and
// applies the netfilter rules globalnet needs, one transaction per sync.
//
// Three layers: NewLayout and Allocator decide which global addresses and
// ports exist and who holds them; Config is the desired translation and
// renders into one nftables table (TableName); Table applies a Config
// through a Runner (NewNftRunner execs nft, optionally inside a network
// namespace), a full transaction or only the changed map elements. See
// README.md for the contract with the node.
package nat
