//go:build ignore

// vip: socket-level translation of ClusterSet VIPs (IPv4), attached to a
// cgroup v2 directory. Every socket address is in network byte order.
//
//   cgroup/connect4      connect() of TCP and UDP sockets: VIP:port → backend
//   cgroup/sendmsg4      sendto()/sendmsg() of unconnected UDP: same, and
//                        remembers (socket, backend) → VIP for the replies
//   cgroup/recvmsg4      recvfrom()/recvmsg() of UDP: backend → VIP as source
//   cgroup/getpeername4  getpeername() of connected sockets: backend → VIP
//
// Dual-stack (AF_INET6) sockets reach the same VIPs as ::ffff:<vip>; the
// IPv6 programs translate IPv4-mapped addresses with the same functions as
// the IPv4 ones (same maps, same pick) and leave plain IPv6 ones alone:
//
//   cgroup/connect6      ::ffff:VIP:port → ::ffff:backend
//   cgroup/recvmsg6      ::ffff:backend → ::ffff:VIP as source
//   cgroup/getpeername6  ::ffff:backend → ::ffff:VIP
//
// Their sendto() to ::ffff:<vip> runs cgroup/sendmsg4 (see vip_sendmsg4).
//
// Maps (see pkg/vip/README.md for the contract with the Go side):
//
//   vip_services  hash   struct svc_key {addr, port, proto}  → struct svc
//   vip_backends  hash   struct backend_key {id, slot}        → struct slot
//   vip_rev_nat   LRU    struct rnat_key {cookie, backend}    → struct addr4 (VIP)
//   vip_affinity  LRU    struct aff_key {netns cookie, svc_key} → struct aff
//   vip_peers     socket storage: struct peer {vip, backend} of a connected
//                 socket, freed with the socket
//   vip_gone      hash   struct peer {vip, backend}            → u8, pairs
//                 whose connected UDP sockets vip_destroy_udp terminates
//
// A service with count == 0 rejects connect()/sendmsg() with EHOSTUNREACH.
//
// Weights: the slots of a service are an alias table (Walker, Vose): slot i
// holds backend i and, for the share of the slot backend i does not fill, an
// alias backend. A pick is a uniform slot, then a uniform coin against the
// slot's threshold: two random numbers and one map lookup, whatever the
// number of services, backends or the weights.
//
// Session affinity (ClientIP): a service with affinity > 0 remembers, per
// client and service, the backend chosen and when it was last used; a
// connection within affinity seconds of the last use goes to the same
// backend while it is still the service's. The client is the socket's
// network namespace (bpf_get_netns_cookie): at connect()/sendmsg() the
// source address is not chosen yet, and one pod = one network namespace.

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* errno value the application sees for a VIP without backends. */
#define VIP_EHOSTUNREACH 113

/* An IPv4 address and port, network byte order; pad is zero. */
struct addr4 {
	__u32 addr;
	__u16 port;
	__u16 pad;
};

/* A service: VIP, port (network byte order) and IP protocol (IPPROTO_TCP or
 * IPPROTO_UDP); pad is zero. */
struct svc_key {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/* What a service maps to: count slots in vip_backends under {id, 0..count-1};
 * affinity is the ClientIP session affinity timeout in seconds (0: none). */
struct svc {
	__u32 count;
	__u32 id;
	__u32 affinity;
};

struct backend_key {
	__u32 id;
	__u32 slot;
};

/* One slot of a service's alias table. The slot gives backend when the coin
 * (31 random bits) is below threshold (0..2^31), alias otherwise; alias_slot
 * is the slot whose backend the alias is; weight is backend's weight, read
 * back by pkg/vip only. */
struct slot {
	struct addr4 backend;
	struct addr4 alias;
	__u32 threshold;
	__u32 weight;
	__u32 alias_slot;
	__u32 pad;
};

/* Session affinity key: the client's network namespace and the service. */
struct aff_key {
	__u64 netns;
	struct svc_key svc;
};

/* The backend a client was given (in slot of its service) and when it last
 * used it (bpf_ktime_get_ns). */
struct aff {
	struct addr4 backend;
	__u32 slot;
	__u32 pad;
	__u64 used;
};

/* Reverse NAT key of unconnected UDP: socket cookie and the backend it sent to. */
struct rnat_key {
	__u64 cookie;
	__u32 addr;
	__u16 port;
	__u16 pad;
};

/* The VIP a connected socket asked for and the backend it was given. */
struct peer {
	struct addr4 vip;
	struct addr4 backend;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536); /* set at load time */
	__type(key, struct svc_key);
	__type(value, struct svc);
} vip_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 262144); /* set at load time */
	__type(key, struct backend_key);
	__type(value, struct slot);
} vip_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144); /* set at load time */
	__type(key, struct rnat_key);
	__type(value, struct addr4);
} vip_rev_nat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144); /* set at load time */
	__type(key, struct aff_key);
	__type(value, struct aff);
} vip_affinity SEC(".maps");

/* The (VIP, backend) pairs a Set just removed, while pkg/vip runs
 * vip_destroy_udp; empty otherwise. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct peer);
	__type(value, __u8);
} vip_gone SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct peer);
} vip_peers SEC(".maps");

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) has these first three words. */
#define MAPPED_W2 bpf_htonl(0x0000ffff)

/* dst4 puts the IPv4 destination of ctx into *a: user_ip4 for an IPv4 hook
 * (v6 == 0), the low word of an IPv4-mapped user_ip6 for an IPv6 hook. It
 * returns 0, or -1 for a plain IPv6 address. v6 is a constant in every
 * caller, so each program only touches the fields of its own family. */
static __always_inline int user_addr4(struct bpf_sock_addr *ctx, int v6, struct addr4 *a)
{
	if (v6) {
		if (ctx->user_ip6[0] != 0 || ctx->user_ip6[1] != 0 || ctx->user_ip6[2] != MAPPED_W2)
			return -1;
		a->addr = ctx->user_ip6[3];
	} else {
		a->addr = ctx->user_ip4;
	}
	/* user_port holds the port in network byte order in its low two bytes. */
	a->port = (__u16)ctx->user_port;
	return 0;
}

/* set_dst4 writes a as ctx's address: user_ip4, or the low word of the
 * IPv4-mapped user_ip6 (whose prefix dst4 has checked). */
static __always_inline void set_user_addr4(struct bpf_sock_addr *ctx, int v6, const struct addr4 *a)
{
	if (v6)
		ctx->user_ip6[3] = a->addr;
	else
		ctx->user_ip4 = a->addr;
	ctx->user_port = a->port;
}

/* service_key is the service key of destination dst of ctx. */
static __always_inline struct svc_key service_key(struct bpf_sock_addr *ctx, const struct addr4 *dst)
{
	struct svc_key key = {
		.addr = dst->addr,
		.port = dst->port,
		.proto = (__u8)ctx->protocol,
	};
	return key;
}

/* mix64 spreads the bits of a 64-bit value (a finaliser in the style of
 * splitmix64), so that consecutive socket cookies pick different slots. */
static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* choose puts the backend of service svc (key) for this socket call into
 * *be: the one remembered for this client while its affinity holds, else
 * the one the random numbers pick (slot r_slot % count, then the coin
 * r_coin >> 1 against its threshold), remembered when the service has
 * affinity. It returns 0, or -1 when the service has no backends. */
static __always_inline int choose(struct bpf_sock_addr *ctx, struct svc_key *key, struct svc *svc,
				  __u32 r_slot, __u32 r_coin, struct addr4 *be)
{
	__u32 count = svc->count;
	if (count == 0)
		return -1;
	struct aff_key ak = {};
	__u64 now = 0;
	if (svc->affinity) {
		ak.netns = bpf_get_netns_cookie(ctx);
		ak.svc = *key;
		now = bpf_ktime_get_ns();
		struct aff *a = bpf_map_lookup_elem(&vip_affinity, &ak);
		if (a && now - a->used < (__u64)svc->affinity * 1000000000ULL && a->slot < count) {
			struct backend_key bk = {.id = svc->id, .slot = a->slot};
			struct slot *s = bpf_map_lookup_elem(&vip_backends, &bk);
			/* Still the service's backend: keep it. */
			if (s && s->backend.addr == a->backend.addr && s->backend.port == a->backend.port) {
				a->used = now;
				be->addr = a->backend.addr;
				be->port = a->backend.port;
				return 0;
			}
		}
	}
	struct backend_key bk = {
		.id = svc->id,
		.slot = r_slot % count,
	};
	struct slot *s = bpf_map_lookup_elem(&vip_backends, &bk);
	if (!s)
		return -1;
	__u32 chosen = bk.slot;
	if ((r_coin >> 1) < s->threshold) {
		be->addr = s->backend.addr;
		be->port = s->backend.port;
	} else {
		be->addr = s->alias.addr;
		be->port = s->alias.port;
		chosen = s->alias_slot;
	}
	if (svc->affinity) {
		struct aff v = {
			.backend = *be,
			.slot = chosen,
			.used = now,
		};
		bpf_map_update_elem(&vip_affinity, &ak, &v, BPF_ANY);
	}
	return 0;
}

/* reject fails the system call with EHOSTUNREACH (instead of the default
 * EPERM of a program returning 0). */
static __always_inline int reject(void)
{
	bpf_set_retval(-VIP_EHOSTUNREACH);
	return 0;
}

/* forget_peer drops the socket's vip_peers entry. */
static __always_inline void forget_peer(struct bpf_sock_addr *ctx)
{
	struct peer *old = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (old)
		bpf_sk_storage_delete(&vip_peers, ctx->sk);
}

/* connect_vip is connect4 (v6 == 0) and, for IPv4-mapped destinations of
 * dual-stack sockets, connect6. */
static __always_inline int connect_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct addr4 dst = {};
	struct svc_key key = {};
	struct svc *svc = 0;
	if (user_addr4(ctx, v6, &dst) == 0) {
		key = service_key(ctx, &dst);
		svc = bpf_map_lookup_elem(&vip_services, &key);
	}
	if (!svc) {
		/* Not a VIP (or plain IPv6): forget a VIP this socket may have
		 * connected to before, so getpeername() reports the real peer. */
		forget_peer(ctx);
		return 1;
	}
	struct addr4 be = {};
	if (choose(ctx, &key, svc, bpf_get_prandom_u32(), bpf_get_prandom_u32(), &be))
		return reject();

	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (p) {
		p->vip = dst;
		p->backend.addr = be.addr;
		p->backend.port = be.port;
	}
	set_user_addr4(ctx, v6, &be);
	return 1;
}

/* recvmsg_vip is recvmsg4 and recvmsg6: a reply from a backend (an
 * IPv4-mapped source on a dual-stack socket) gets the VIP as its source. */
static __always_inline int recvmsg_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct addr4 src = {};
	if (user_addr4(ctx, v6, &src))
		return 1;
	struct rnat_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = src.addr,
		.port = src.port,
	};
	struct addr4 *vip = bpf_map_lookup_elem(&vip_rev_nat, &key);
	if (vip) {
		set_user_addr4(ctx, v6, vip);
		return 1;
	}
	/* A connected UDP socket: its peer is in vip_peers. */
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && p->backend.addr == src.addr && p->backend.port == src.port)
		set_user_addr4(ctx, v6, &p->vip);
	return 1;
}

/* getpeername_vip is getpeername4 and getpeername6: a socket connected
 * through a VIP reports the VIP (IPv4-mapped on a dual-stack socket). */
static __always_inline int getpeername_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct addr4 peer = {};
	if (user_addr4(ctx, v6, &peer))
		return 1;
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && p->backend.addr == peer.addr && p->backend.port == peer.port)
		set_user_addr4(ctx, v6, &p->vip);
	return 1;
}

SEC("cgroup/connect4")
int vip_connect4(struct bpf_sock_addr *ctx)
{
	return connect_vip(ctx, 0);
}

SEC("cgroup/connect6")
int vip_connect6(struct bpf_sock_addr *ctx)
{
	return connect_vip(ctx, 1);
}

/* There is no sendmsg6 program: the kernel hands a sendto() of a dual-stack
 * socket to an IPv4-mapped address to the IPv4 path (udpv6_sendmsg calls
 * udp_sendmsg before its own hook), so vip_sendmsg4 translates it and the
 * reply comes back through vip_recvmsg6. */
SEC("cgroup/sendmsg4")
int vip_sendmsg4(struct bpf_sock_addr *ctx)
{
	struct addr4 vip = {};
	if (user_addr4(ctx, 0, &vip))
		return 1;
	struct svc_key key = service_key(ctx, &vip);
	struct svc *svc = bpf_map_lookup_elem(&vip_services, &key);
	if (!svc)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	/* The same socket keeps the same backend while the service's backends
	 * do not change, so a request/response exchange stays on one backend. */
	__u64 h = mix64(cookie ^ ((__u64)vip.addr << 16) ^ vip.port);
	struct addr4 be = {};
	if (choose(ctx, &key, svc, (__u32)h, (__u32)(h >> 32), &be))
		return reject();

	struct rnat_key rkey = {
		.cookie = cookie,
		.addr = be.addr,
		.port = be.port,
	};
	struct addr4 *old = bpf_map_lookup_elem(&vip_rev_nat, &rkey);
	if (!old || old->addr != vip.addr || old->port != vip.port)
		bpf_map_update_elem(&vip_rev_nat, &rkey, &vip, BPF_ANY);

	set_user_addr4(ctx, 0, &be);
	return 1;
}

SEC("cgroup/recvmsg4")
int vip_recvmsg4(struct bpf_sock_addr *ctx)
{
	return recvmsg_vip(ctx, 0);
}

SEC("cgroup/recvmsg6")
int vip_recvmsg6(struct bpf_sock_addr *ctx)
{
	return recvmsg_vip(ctx, 1);
}

SEC("cgroup/getpeername4")
int vip_getpeername4(struct bpf_sock_addr *ctx)
{
	return getpeername_vip(ctx, 0);
}

SEC("cgroup/getpeername6")
int vip_getpeername6(struct bpf_sock_addr *ctx)
{
	return getpeername_vip(ctx, 1);
}

/* Kernel types of the UDP socket iterator, relocated against the running
 * kernel's BTF (CO-RE): only the members used below. */
struct seq_file;
struct udp_sock;

struct sock_common {
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

/* vip_destroy_udp (iter/udp, run by pkg/vip in each network namespace of
 * the cgroup after a Set removed backends) terminates every UDP socket
 * connected through a VIP to a backend that left it (its vip_peers pair is
 * in vip_gone): the kernel aborts it with ECONNABORTED and disconnects it,
 * so the application notices and reconnects (and is translated anew)
 * instead of sending into a void. One byte of output per socket. */
SEC("iter/udp")
int vip_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp = ctx->udp_sk;
	if (!udp)
		return 0;
	struct peer *p = bpf_sk_storage_get(&vip_peers, udp, 0, 0);
	if (!p || !bpf_map_lookup_elem(&vip_gone, p))
		return 0;
	if (bpf_sock_destroy((struct sock_common *)udp) == 0) {
		char one = 1;
		bpf_seq_write(ctx->meta->seq, &one, sizeof(one));
	}
	return 0;
}
