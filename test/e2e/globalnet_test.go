package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/pkg/nat"
)

// globalCIDR is cluster's global CIDR as its gateway announced it (the
// own Cluster object it mirrors into the cluster).
func (l *Lab) globalCIDR(ctx context.Context, cluster string) netip.Prefix {
	l.t.Helper()
	var p netip.Prefix
	waitFor(l.t, cluster+"'s global CIDR", func() error {
		cl := &v1alpha1.Cluster{}
		if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: cluster}, cl); err != nil {
			return err
		}
		if len(cl.Spec.GlobalCIDRs) != 1 {
			return fmt.Errorf("globalCIDRs %v", cl.Spec.GlobalCIDRs)
		}
		var err error
		p, err = netip.ParsePrefix(cl.Spec.GlobalCIDRs[0])
		return err
	})
	return p
}

// checkGlobalTraffic is issue 8's first promise: with whereami exported
// from the overlapping clusters c1 and c2, 20 curls of the VIP and 20 of
// the clusterset name from c3 and from c2 all succeed, both clusters
// answer, and a remote backend sees the client's global address (inside
// the client cluster's global CIDR), not an overlapping pod IP.
func (l *Lab) checkGlobalTraffic(ctx context.Context, vip string) {
	l.t.Helper()
	global := map[string]netip.Prefix{}
	for _, c := range []string{"c1", "c2", "c3"} {
		global[c] = l.globalCIDR(ctx, c)
	}
	if global["c1"] == global["c2"] || global["c1"] == global["c3"] || global["c2"] == global["c3"] {
		l.t.Fatalf("global CIDRs not distinct: %v", global)
	}
	for _, c := range []string{"c1", "c2"} {
		waitFor(l.t, c+"'s GlobalIngress for demo/whereami", func() error {
			gi := &v1alpha1.GlobalIngress{}
			if err := l.Client(c).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, gi); err != nil {
				return err
			}
			ip, err := netip.ParseAddr(gi.Spec.IP)
			if err != nil || !global[c].Contains(ip) || len(gi.Spec.Ports) == 0 {
				return fmt.Errorf("spec %+v: want its ports on an IP of %s", gi.Spec, global[c])
			}
			return nil
		})
	}
	for _, from := range []string{"c3", "c2"} {
		pod := from + "/demo/client"
		for _, url := range []string{"http://" + vip, "http://whereami.demo.svc.clusterset.local"} {
			// Wait until both clusters answer (convergence), then
			// count 20 in a row.
			waitFor(l.t, url+" from "+from+" answered by c1 and c2", func() error {
				seen := map[string]bool{}
				for range 12 {
					id, err := l.whereami(pod, url)
					if err != nil {
						return err
					}
					seen[id.Cluster] = true
				}
				if !seen["c1"] || !seen["c2"] {
					return fmt.Errorf("answers from %v", seen)
				}
				return nil
			})
			seen := map[string]int{}
			for i := range 20 {
				id, err := l.whereami(pod, url)
				if err != nil {
					l.t.Errorf("curl %d of 20 of %s from %s: %v", i+1, url, from, err)
					continue
				}
				seen[id.Cluster]++
				if id.Cluster == from {
					continue // the local backend: the pod's own address
				}
				host, _, _ := strings.Cut(id.Client, ":")
				if a, err := netip.ParseAddr(host); err != nil || !global[from].Contains(a) {
					l.t.Errorf("%s answered %s's client from %s, want an address of %s's global CIDR %s", id.Cluster, from, id.Client, from, global[from])
				}
			}
			l.t.Logf("20 curls of %s from %s: answers by cluster %v", url, from, seen)
			if seen["c1"] == 0 || seen["c2"] == 0 {
				l.t.Errorf("20 curls of %s from %s: answers by cluster %v, want c1 and c2", url, from, seen)
			}
		}
	}
}

// whereami curls url once from pod and decodes the answer.
func (l *Lab) whereami(pod, url string) (apps.Identity, error) {
	var id apps.Identity
	out, err := l.Exec(pod, "curl", "-s", "-m", "3", url)
	if err != nil {
		return id, fmt.Errorf("%v: %s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &id); err != nil {
		return id, fmt.Errorf("not whereami JSON: %q", out)
	}
	return id, nil
}

// checkGlobalUnexport unexports whereami from c1 (c2 still exports it):
// c1's answers stop from c3, c1's GlobalIngress is released and its pair
// leaves the active gateway's nftables maps.
func (l *Lab) checkGlobalUnexport(ctx context.Context) {
	l.t.Helper()
	gi := &v1alpha1.GlobalIngress{}
	if err := l.Client("c1").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, gi); err != nil {
		l.t.Fatal(err)
	}
	pair := fmt.Sprintf("%s . %d", gi.Spec.IP, gi.Spec.Ports[0].GlobalPort)
	if !strings.Contains(l.nftMaps("c1"), pair) {
		l.t.Fatalf("c1's gateway does not translate %s:\n%s", pair, l.nftMaps("c1"))
	}
	start := time.Now()
	if out, err := l.causewayctl("unexport", "demo/whereami", "--cluster", "c1"); err != nil {
		l.t.Fatalf("unexport from c1: %v\n%s", err, out)
	}
	// Bounded wait, not a speed assertion (the propagation benchmark
	// measures): ten answers in a row from c2 only.
	waitFor(l.t, "c3's answers from c2 only", func() error {
		for range 10 {
			id, err := l.whereami("c3/demo/client", "http://whereami.demo.svc.clusterset.local")
			if err != nil {
				return err
			}
			if id.Cluster != "c2" {
				return fmt.Errorf("answered by %s", id.Cluster)
			}
		}
		return nil
	})
	l.t.Logf("c1 unexported: c3 reached only c2 after %.2fs", time.Since(start).Seconds())
	waitFor(l.t, "c1's GlobalIngress released and its pair gone from the gateway's maps", func() error {
		got := &v1alpha1.GlobalIngress{}
		err := l.Client("c1").Get(ctx, client.ObjectKeyFromObject(gi), got)
		if err == nil && got.Spec.ReleasedAt == nil {
			return fmt.Errorf("GlobalIngress not released: %+v", got.Spec)
		}
		if maps := l.nftMaps("c1"); strings.Contains(maps, pair) {
			return fmt.Errorf("%s still translated", pair)
		}
		return nil
	})
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c1"); err != nil {
		l.t.Fatalf("re-export from c1: %v\n%s", err, out)
	}
	waitFor(l.t, "c1 answering c3 again after the re-export", func() error {
		for range 12 {
			if id, err := l.whereami("c3/demo/client", "http://whereami.demo.svc.clusterset.local"); err == nil && id.Cluster == "c1" {
				return nil
			}
		}
		return fmt.Errorf("no answer from c1")
	})
	again := &v1alpha1.GlobalIngress{}
	if err := l.Client("c1").Get(ctx, client.ObjectKeyFromObject(gi), again); err != nil {
		l.t.Fatal(err)
	}
	if again.Spec.ReleasedAt != nil || len(again.Spec.Ports) == 0 {
		l.t.Errorf("re-exported GlobalIngress %+v, want allocated ports and no release", again.Spec)
	}
}

// nftMaps is the globalnet table of cluster's active gateway (n0) as nft
// lists it.
func (l *Lab) nftMaps(cluster string) string {
	l.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", l.Prefix+cluster+".n0", "nft", "list", "table", "ip", nat.TableName).CombinedOutput()
	if err != nil {
		l.t.Fatalf("nft list table in %s/n0: %v\n%s", cluster, err, out)
	}
	return string(out)
}

// globalPodIPs waits until the GlobalIngress of a headless Service of
// cluster gives every pod in podIPs a global IP, and returns them in the
// order of podIPs.
func (l *Lab) globalPodIPs(ctx context.Context, cluster, namespace, name string, podIPs []string) []string {
	l.t.Helper()
	var out []string
	waitFor(l.t, fmt.Sprintf("global IPs of %s/%s's pods in %s", namespace, name, cluster), func() error {
		gi := &v1alpha1.GlobalIngress{}
		if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, gi); err != nil {
			return err
		}
		byPod := map[string]string{}
		for _, p := range gi.Spec.Pods {
			byPod[p.PodIP] = p.GlobalIP
		}
		out = out[:0]
		for _, ip := range podIPs {
			g, ok := byPod[ip]
			if !ok {
				return fmt.Errorf("pod %s has no global IP in %+v", ip, gi.Spec.Pods)
			}
			out = append(out, g)
		}
		return nil
	})
	return out
}
