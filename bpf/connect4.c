//go:build ignore

// connect4: a cgroup/connect4 program that rewrites the destination of
// connect() (and of unconnected UDP's implicit connect) from one IPv4
// address:port to another, looked up in a hash map. It proves the socket-level
// hook the VIP datapath is built on; the real VIP programs replace it.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* An IPv4 socket address, both fields in network byte order. */
struct endpoint4 {
	__u32 addr;
	__u16 port;
	__u16 pad; /* always zero */
};

/* Original destination -> destination the socket connects to instead. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct endpoint4);
	__type(value, struct endpoint4);
} connect4_rewrites SEC(".maps");

SEC("cgroup/connect4")
int rewrite_connect4(struct bpf_sock_addr *ctx)
{
	struct endpoint4 key = {
		.addr = ctx->user_ip4,
		/* user_port holds the port in network byte order in its first two bytes. */
		.port = (__u16)ctx->user_port,
	};

	struct endpoint4 *to = bpf_map_lookup_elem(&connect4_rewrites, &key);
	if (to) {
		ctx->user_ip4 = to->addr;
		ctx->user_port = to->port;
	}
	/* 1 lets connect() proceed; 0 would fail it with EPERM. */
	return 1;
}
