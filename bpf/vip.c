//go:build ignore

// vip: socket-level translation of ClusterSet VIPs, IPv4 and IPv6, attached
// to a cgroup v2 directory. Every socket address is in network byte order.
//
//   cgroup/connect4      connect() of TCP and UDP sockets: VIP:port → backend
//   cgroup/sendmsg4      sendto()/sendmsg() of unconnected UDP: same, and
//                        remembers (socket, backend) → VIP for the replies
//   cgroup/recvmsg4      recvfrom()/recvmsg() of UDP: backend → VIP as source
//   cgroup/getpeername4  getpeername() of connected sockets: backend → VIP
//   cgroup/connect6, cgroup/sendmsg6, cgroup/recvmsg6, cgroup/getpeername6
//                        the same for AF_INET6 sockets: [IPv6 VIP]:port →
//                        [IPv6 backend], and, on dual-stack sockets,
//                        ::ffff:<IPv4 VIP> → ::ffff:<IPv4 backend>
//
// Addresses are 16 bytes in every map: an IPv4 address is stored
// IPv4-mapped (::ffff:a.b.c.d), so one service entry serves an IPv4 VIP to
// IPv4 sockets and to dual-stack sockets alike, and an IPv6 VIP (never
// IPv4-mapped) can only be reached by the IPv6 programs. A VIP's backends
// are of the VIP's family (pkg/vip checks it), so every rewrite stays in
// the socket's family. Each pair of programs is one C function taking the
// family as a constant. A dual-stack socket's sendto() to ::ffff:<vip>
// runs cgroup/sendmsg4 (see vip_sendmsg4).
//
// Maps (see pkg/vip/README.md for the contract with the Go side):
//
//   vip_services  hash   struct svc_key {addr, port, proto}  → struct svc
//   vip_backends  hash   struct backend_key {id, slot}        → struct slot
//   vip_rev_nat   LRU    struct rnat_key {cookie, backend}    → struct endpoint (VIP)
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

/* An address and port, network byte order: addr is an IPv6 address, or an
 * IPv4 one mapped (::ffff:a.b.c.d); pad is zero. */
struct endpoint {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

/* A service: VIP (as in struct endpoint), port (network byte order) and IP
 * protocol (IPPROTO_TCP or IPPROTO_UDP); pad is zero. */
struct svc_key {
	__u32 addr[4];
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
	struct endpoint backend;
	struct endpoint alias;
	__u32 threshold;
	__u32 weight;
	__u32 alias_slot;
	__u32 pad;
};

/* Session affinity key: the client's network namespace and the service;
 * pad is zero. */
struct aff_key {
	__u64 netns;
	struct svc_key svc;
	__u32 pad;
};

/* The backend a client was given (in slot of its service) and when it last
 * used it (bpf_ktime_get_ns). */
struct aff {
	struct endpoint backend;
	__u32 slot;
	__u64 used;
};

/* Reverse NAT key of unconnected UDP: socket cookie and the backend it sent
 * to; pad is zero. */
struct rnat_key {
	__u64 cookie;
	struct endpoint backend;
	__u32 pad;
};

/* The VIP a connected socket asked for and the backend it was given. */
struct peer {
	struct endpoint vip;
	struct endpoint backend;
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
	__type(value, struct endpoint);
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

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) has this third word. */
#define MAPPED_W2 bpf_htonl(0x0000ffff)

/* user_addr puts the address and port of ctx into *a: user_ip4 mapped for
 * an IPv4 hook (v6 == 0), user_ip6 for an IPv6 hook. v6 is a constant in
 * every caller, so each program only touches the fields of its own
 * family. */
static __always_inline void user_addr(struct bpf_sock_addr *ctx, int v6, struct endpoint *a)
{
	if (v6) {
		a->addr[0] = ctx->user_ip6[0];
		a->addr[1] = ctx->user_ip6[1];
		a->addr[2] = ctx->user_ip6[2];
		a->addr[3] = ctx->user_ip6[3];
	} else {
		a->addr[0] = 0;
		a->addr[1] = 0;
		a->addr[2] = MAPPED_W2;
		a->addr[3] = ctx->user_ip4;
	}
	/* user_port holds the port in network byte order in its low two bytes. */
	a->port = (__u16)ctx->user_port;
}

/* set_user_addr writes a as ctx's address and port: user_ip6 whole, or
 * user_ip4 (a is then IPv4-mapped: the maps give an IPv4 VIP only IPv4
 * backends). */
static __always_inline void set_user_addr(struct bpf_sock_addr *ctx, int v6, const struct endpoint *a)
{
	if (v6) {
		ctx->user_ip6[0] = a->addr[0];
		ctx->user_ip6[1] = a->addr[1];
		ctx->user_ip6[2] = a->addr[2];
		ctx->user_ip6[3] = a->addr[3];
	} else {
		ctx->user_ip4 = a->addr[3];
	}
	ctx->user_port = a->port;
}

/* same_endpoint compares address and port. */
static __always_inline int same_endpoint(const struct endpoint *a, const struct endpoint *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3] && a->port == b->port;
}

/* copy_endpoint copies address and port, leaving dst's pad zero. */
static __always_inline void copy_endpoint(struct endpoint *dst, const struct endpoint *src)
{
	dst->addr[0] = src->addr[0];
	dst->addr[1] = src->addr[1];
	dst->addr[2] = src->addr[2];
	dst->addr[3] = src->addr[3];
	dst->port = src->port;
}

/* service_key is the service key of destination dst of ctx. */
static __always_inline void service_key(struct bpf_sock_addr *ctx, const struct endpoint *dst, struct svc_key *key)
{
	key->addr[0] = dst->addr[0];
	key->addr[1] = dst->addr[1];
	key->addr[2] = dst->addr[2];
	key->addr[3] = dst->addr[3];
	key->port = dst->port;
	key->proto = (__u8)ctx->protocol;
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
				  __u32 r_slot, __u32 r_coin, struct endpoint *be)
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
			if (s && same_endpoint(&s->backend, &a->backend)) {
				a->used = now;
				copy_endpoint(be, &a->backend);
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
		copy_endpoint(be, &s->backend);
	} else {
		copy_endpoint(be, &s->alias);
		chosen = s->alias_slot;
	}
	if (svc->affinity) {
		struct aff v = {
			.slot = chosen,
			.used = now,
		};
		copy_endpoint(&v.backend, be);
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

/* connect_vip is connect4 (v6 == 0) and connect6. */
static __always_inline int connect_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct endpoint dst = {};
	struct svc_key key = {};
	user_addr(ctx, v6, &dst);
	service_key(ctx, &dst, &key);
	struct svc *svc = bpf_map_lookup_elem(&vip_services, &key);
	if (!svc) {
		/* Not a VIP: forget a VIP this socket may have connected to
		 * before, so getpeername() reports the real peer. */
		forget_peer(ctx);
		return 1;
	}
	struct endpoint be = {};
	if (choose(ctx, &key, svc, bpf_get_prandom_u32(), bpf_get_prandom_u32(), &be))
		return reject();

	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (p) {
		copy_endpoint(&p->vip, &dst);
		copy_endpoint(&p->backend, &be);
	}
	set_user_addr(ctx, v6, &be);
	return 1;
}

/* sendmsg_vip is sendmsg4 and sendmsg6 (unconnected UDP). */
static __always_inline int sendmsg_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct endpoint vip = {};
	struct svc_key key = {};
	user_addr(ctx, v6, &vip);
	service_key(ctx, &vip, &key);
	struct svc *svc = bpf_map_lookup_elem(&vip_services, &key);
	if (!svc)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	/* The same socket keeps the same backend while the service's backends
	 * do not change, so a request/response exchange stays on one backend. */
	__u64 h = mix64(cookie ^ ((__u64)(vip.addr[3] ^ vip.addr[2] ^ vip.addr[1] ^ vip.addr[0]) << 16) ^ vip.port);
	struct endpoint be = {};
	if (choose(ctx, &key, svc, (__u32)h, (__u32)(h >> 32), &be))
		return reject();

	struct rnat_key rkey = {.cookie = cookie};
	copy_endpoint(&rkey.backend, &be);
	struct endpoint *old = bpf_map_lookup_elem(&vip_rev_nat, &rkey);
	if (!old || !same_endpoint(old, &vip))
		bpf_map_update_elem(&vip_rev_nat, &rkey, &vip, BPF_ANY);

	set_user_addr(ctx, v6, &be);
	return 1;
}

/* recvmsg_vip is recvmsg4 and recvmsg6: a reply from a backend gets the VIP
 * as its source. */
static __always_inline int recvmsg_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct rnat_key key = {.cookie = bpf_get_socket_cookie(ctx)};
	user_addr(ctx, v6, &key.backend);
	struct endpoint *vip = bpf_map_lookup_elem(&vip_rev_nat, &key);
	if (vip) {
		set_user_addr(ctx, v6, vip);
		return 1;
	}
	/* A connected UDP socket: its peer is in vip_peers. */
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && same_endpoint(&p->backend, &key.backend))
		set_user_addr(ctx, v6, &p->vip);
	return 1;
}

/* getpeername_vip is getpeername4 and getpeername6: a socket connected
 * through a VIP reports the VIP. */
static __always_inline int getpeername_vip(struct bpf_sock_addr *ctx, int v6)
{
	struct endpoint peer = {};
	user_addr(ctx, v6, &peer);
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && same_endpoint(&p->backend, &peer))
		set_user_addr(ctx, v6, &p->vip);
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

/* The kernel hands a sendto() of a dual-stack socket to an IPv4-mapped
 * address to the IPv4 path (udpv6_sendmsg calls udp_sendmsg before its own
 * hook), so vip_sendmsg4 translates it and the reply comes back through
 * vip_recvmsg6; vip_sendmsg6 sees IPv6 destinations. */
SEC("cgroup/sendmsg4")
int vip_sendmsg4(struct bpf_sock_addr *ctx)
{
	return sendmsg_vip(ctx, 0);
}

SEC("cgroup/sendmsg6")
int vip_sendmsg6(struct bpf_sock_addr *ctx)
{
	return sendmsg_vip(ctx, 1);
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
