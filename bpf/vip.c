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
// Maps (see pkg/vip/README.md for the contract with the Go side):
//
//   vip_services  hash   struct svc_key {addr, port, proto}  → struct svc
//   vip_backends  hash   struct backend_key {id, slot}        → struct slot
//   vip_rev_nat   LRU    struct rnat_key {cookie, backend}    → struct addr4 (VIP)
//   vip_affinity  LRU    struct aff_key {netns cookie, svc_key} → struct aff
//   vip_peers     socket storage: struct peer {vip, backend} of a connected
//                 socket, freed with the socket
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

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct peer);
} vip_peers SEC(".maps");

/* service_key is the service key of ctx's destination. */
static __always_inline struct svc_key service_key(struct bpf_sock_addr *ctx)
{
	struct svc_key key = {
		.addr = ctx->user_ip4,
		/* user_port holds the port in network byte order in its low two bytes. */
		.port = (__u16)ctx->user_port,
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

SEC("cgroup/connect4")
int vip_connect4(struct bpf_sock_addr *ctx)
{
	struct svc_key key = service_key(ctx);
	struct svc *svc = bpf_map_lookup_elem(&vip_services, &key);
	if (!svc) {
		/* Not a VIP: forget a VIP this socket may have connected to before,
		 * so getpeername() reports the real peer. */
		struct peer *old = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
		if (old)
			bpf_sk_storage_delete(&vip_peers, ctx->sk);
		return 1;
	}
	struct addr4 be = {};
	if (choose(ctx, &key, svc, bpf_get_prandom_u32(), bpf_get_prandom_u32(), &be))
		return reject();

	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (p) {
		p->vip.addr = ctx->user_ip4;
		p->vip.port = (__u16)ctx->user_port;
		p->backend.addr = be.addr;
		p->backend.port = be.port;
	}
	ctx->user_ip4 = be.addr;
	ctx->user_port = be.port;
	return 1;
}

SEC("cgroup/sendmsg4")
int vip_sendmsg4(struct bpf_sock_addr *ctx)
{
	struct svc_key key = service_key(ctx);
	struct svc *svc = bpf_map_lookup_elem(&vip_services, &key);
	if (!svc)
		return 1;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	/* The same socket keeps the same backend while the service's backends
	 * do not change, so a request/response exchange stays on one backend. */
	__u64 h = mix64(cookie ^ ((__u64)ctx->user_ip4 << 16) ^ (__u16)ctx->user_port);
	struct addr4 be = {};
	if (choose(ctx, &key, svc, (__u32)h, (__u32)(h >> 32), &be))
		return reject();

	struct rnat_key rkey = {
		.cookie = cookie,
		.addr = be.addr,
		.port = be.port,
	};
	struct addr4 vip = {
		.addr = ctx->user_ip4,
		.port = (__u16)ctx->user_port,
	};
	struct addr4 *old = bpf_map_lookup_elem(&vip_rev_nat, &rkey);
	if (!old || old->addr != vip.addr || old->port != vip.port)
		bpf_map_update_elem(&vip_rev_nat, &rkey, &vip, BPF_ANY);

	ctx->user_ip4 = be.addr;
	ctx->user_port = be.port;
	return 1;
}

SEC("cgroup/recvmsg4")
int vip_recvmsg4(struct bpf_sock_addr *ctx)
{
	struct rnat_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = ctx->user_ip4,
		.port = (__u16)ctx->user_port,
	};
	struct addr4 *vip = bpf_map_lookup_elem(&vip_rev_nat, &key);
	if (vip) {
		ctx->user_ip4 = vip->addr;
		ctx->user_port = vip->port;
		return 1;
	}
	/* A connected UDP socket: its peer is in vip_peers. */
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && p->backend.addr == ctx->user_ip4 && p->backend.port == (__u16)ctx->user_port) {
		ctx->user_ip4 = p->vip.addr;
		ctx->user_port = p->vip.port;
	}
	return 1;
}

SEC("cgroup/getpeername4")
int vip_getpeername4(struct bpf_sock_addr *ctx)
{
	struct peer *p = bpf_sk_storage_get(&vip_peers, ctx->sk, 0, 0);
	if (p && p->backend.addr == ctx->user_ip4 && p->backend.port == (__u16)ctx->user_port) {
		ctx->user_ip4 = p->vip.addr;
		ctx->user_port = p->vip.port;
	}
	return 1;
}
