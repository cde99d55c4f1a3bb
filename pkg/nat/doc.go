// Package nat builds and applies the netfilter rules globalnet needs,
// one nftables transaction per sync. It is mechanism only: which global
// addresses and ports exist and who holds them is decided by
// pkg/globalnet, which fills the Config.
//
// Config is the desired translation, validated and compiled into the
// elements of one nftables table (TableName); Table (Linux) builds the
// transactions with sigs.k8s.io/knftables — the whole table, or only the
// changed map elements — and applies them through a Runner (NewNftRunner
// runs knftables, which execs nft, optionally inside a network
// namespace). See README.md for the contract with the node and for what
// knftables does and what stays hand-written.
package nat
