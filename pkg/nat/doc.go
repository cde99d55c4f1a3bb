// Package nat allocates global addresses (pure logic) and builds and
// applies the netfilter rules globalnet needs, one transaction per sync.
//
// Three layers: NewLayout and Allocator decide which global addresses and
// ports exist and who holds them; Config is the desired translation,
// validated and compiled into the elements of one nftables table
// (TableName); Table (Linux) builds the transactions with
// sigs.k8s.io/knftables — the whole table, or only the changed map
// elements — and applies them through a Runner (NewNftRunner runs
// knftables, which execs nft, optionally inside a network namespace).
// See README.md for the contract with the node and for what knftables
// does and what stays hand-written.
package nat
