package addrpolicy

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parseSpec reads the fuzz input, one directive per line:
//
//	L <cidr>...           local pod/service CIDRs
//	G <cidr>...           local global CIDRs
//	K <id> <cidr>...      a broker claim (any K line turns globalnet on)
//	P <id> <age> <cidr>...  the broker's CIDR claims of a cluster (any P
//	                        line turns them on: Config.CIDRClaims)
//	C <id> <age> <cidr>...  the Cluster's pod CIDRs
//	X <id> <age> <cidr>...  the Cluster's global CIDRs
//	E <id> <age> <cidr>...  the Endpoint's subnets
//	T <key> <id>          a broker claim on a tunnel key (any T line turns key claims on)
//	W <id> <key>          the Endpoint's public key
//
// Unparseable configuration CIDRs are dropped; remote CIDRs are passed as
// text, garbage included.
func parseSpec(spec string) (Config, []Remote) {
	var cfg Config
	byID := map[string]*Remote{}
	var order []string
	prefixes := func(ss []string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
			}
		}
		return out
	}
	remote := func(id string) *Remote {
		if r, ok := byID[id]; ok {
			return r
		}
		byID[id] = &Remote{ClusterID: id}
		order = append(order, id)
		return byID[id]
	}
	for line := range strings.Lines(spec) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "L":
			cfg.LocalCIDRs = append(cfg.LocalCIDRs, prefixes(f[1:])...)
		case f[0] == "G":
			cfg.GlobalCIDRs = append(cfg.GlobalCIDRs, prefixes(f[1:])...)
		case f[0] == "K" && len(f) >= 2:
			if cfg.Claims == nil {
				cfg.Claims = map[string][]netip.Prefix{}
			}
			cfg.Claims[f[1]] = append(cfg.Claims[f[1]], prefixes(f[2:])...)
		case f[0] == "P" && len(f) >= 3:
			age, _ := strconv.Atoi(f[2])
			if cfg.CIDRClaims == nil {
				cfg.CIDRClaims = map[string]map[netip.Prefix]time.Time{}
			}
			if cfg.CIDRClaims[f[1]] == nil {
				cfg.CIDRClaims[f[1]] = map[netip.Prefix]time.Time{}
			}
			for _, p := range prefixes(f[3:]) {
				cfg.CIDRClaims[f[1]][p] = t0.Add(time.Duration(age%10000) * time.Minute)
			}
		case f[0] == "T" && len(f) >= 3:
			if cfg.KeyOwners == nil {
				cfg.KeyOwners = map[string]string{}
			}
			cfg.KeyOwners[f[1]] = f[2]
		case f[0] == "W" && len(f) >= 3:
			r := remote(f[1])
			if r.Endpoint == nil {
				r.Endpoint = &Endpoint{Created: t0}
			}
			r.Endpoint.PublicKey = f[2]
		case (f[0] == "C" || f[0] == "X" || f[0] == "E") && len(f) >= 3:
			age, _ := strconv.Atoi(f[2])
			at := t0.Add(time.Duration(age%10000) * time.Minute)
			r := remote(f[1])
			if f[0] == "E" {
				if r.Endpoint == nil {
					r.Endpoint = &Endpoint{Created: at}
				}
				r.Endpoint.Subnets = append(r.Endpoint.Subnets, f[3:]...)
				continue
			}
			if r.Cluster == nil {
				r.Cluster = &Cluster{Created: at}
			}
			if f[0] == "C" {
				r.Cluster.PodCIDRs = append(r.Cluster.PodCIDRs, f[3:]...)
			} else {
				r.Cluster.GlobalCIDRs = append(r.Cluster.GlobalCIDRs, f[3:]...)
			}
		}
	}
	var rs []Remote
	for _, id := range order {
		rs = append(rs, *byID[id])
	}
	return cfg, rs
}

// FuzzDecide checks, for any input, that Decide does not panic, that what
// it accepts is routable (no overlaps between clusters or with local
// space, nothing reserved, Endpoints inside their Clusters) and that the
// decisions do not depend on the order of the input. The seed corpus is
// in testdata/fuzz/FuzzDecide (run by a plain go test).
func FuzzDecide(f *testing.F) {
	f.Add("L 10.244.0.0/16 10.96.0.0/16\nC c2 0 10.2.0.0/16\nE c2 0 10.2.0.0/16\n")
	f.Fuzz(func(t *testing.T, spec string) {
		cfg, remotes := parseSpec(spec)
		want := Decide(cfg, remotes)
		checkInvariants(t, cfg, remotes, want)
		rng := rand.New(rand.NewPCG(uint64(len(spec)), 1))
		for range 4 {
			if got := Decide(cfg, shuffled(rng, remotes)); !reflect.DeepEqual(got, want) {
				t.Fatalf("order changed the decisions:\n%s\nwant\n%s", render(got), render(want))
			}
		}
	})
}
