//go:build ignore

// pktcount: an XDP program that parses Ethernet/IPv4, counts packets per IPv4
// protocol number and drops UDP datagrams to one configurable port. It is the
// smallest program that exercises the toolchain end to end (headers, bpf2go,
// maps, load-time constants, BPF_PROG_TEST_RUN); it is not part of the
// datapath.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* Fragment offset bits of iphdr.frag_off (the kernel's IP_OFFSET, not UAPI). */
#define IPV4_FRAG_OFFSET 0x1fff

/* Packets seen, indexed by the IPv4 protocol number (IPPROTO_*). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} proto_packets SEC(".maps");

/* UDP destination port, host byte order, whose datagrams are dropped; 0 drops
 * nothing. Set before loading. */
volatile const __u16 drop_udp_port = 0;

SEC("xdp")
int count_packets(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;

	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return XDP_DROP;

	__u32 proto = ip->protocol;
	__u64 *count = bpf_map_lookup_elem(&proto_packets, &proto);
	if (count)
		__sync_fetch_and_add(count, 1);

	if (proto != IPPROTO_UDP || drop_udp_port == 0)
		return XDP_PASS;
	/* Only the first fragment carries the UDP header. */
	if (ip->frag_off & bpf_htons(IPV4_FRAG_OFFSET))
		return XDP_PASS;

	struct udphdr *udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return XDP_DROP;
	if (udp->dest == bpf_htons(drop_udp_port))
		return XDP_DROP;
	return XDP_PASS;
}
