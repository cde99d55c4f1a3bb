package lab

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/causeway-net/causeway/lab/netlab"
)

// TestIPFamilyDual: --ip-family dual gives every cluster distinct IPv6
// pod and service CIDRs, dual-stack API servers and kube-proxies and a
// dual-stack demo Service; ipv4 (and the default) has no IPv6 anywhere.
func TestIPFamilyDual(t *testing.T) {
	for _, fam := range []string{"", IPFamilyIPv4, IPFamilyDual} {
		top, err := Config{Prefix: "cwl-", Clusters: 3, Nodes: 2, IPFamily: fam}.Topology()
		if err != nil {
			t.Fatalf("%q: %v", fam, err)
		}
		st := &State{Dir: t.TempDir(), Prefix: "cwl-", Topology: top, Demo: true}
		for i, c := range top.Clusters {
			if c.DualStack() != (fam == IPFamilyDual) {
				t.Fatalf("%q: cluster %s dual-stack %v", fam, c.Name, c.DualStack())
			}
			cfg, err := st.ControlPlaneConfig(c.Name)
			if err != nil {
				t.Fatal(err)
			}
			wantSvc := c.ServiceCIDR.String()
			if fam == IPFamilyDual {
				pod6, svc6 := netlab.IPv6CIDRs(i + 1)
				if c.PodCIDR6 != pod6 || c.ServiceCIDR6 != svc6 {
					t.Errorf("cluster %s IPv6 CIDRs %s %s", c.Name, c.PodCIDR6, c.ServiceCIDR6)
				}
				wantSvc += "," + svc6.String()
			}
			if cfg.ServiceCIDR != wantSvc {
				t.Errorf("%q: cluster %s service CIDR %q, want %q", fam, c.Name, cfg.ServiceCIDR, wantSvc)
			}
			for _, o := range st.DemoObjects(c.Name) {
				if svc, ok := o.(*corev1.Service); ok {
					dual := svc.Spec.IPFamilyPolicy != nil && *svc.Spec.IPFamilyPolicy == corev1.IPFamilyPolicyRequireDualStack
					if dual != (fam == IPFamilyDual) {
						t.Errorf("%q: cluster %s demo Service policy %v", fam, c.Name, svc.Spec.IPFamilyPolicy)
					}
				}
			}
		}
	}
	if _, err := (Config{Prefix: "cwl-", Clusters: 1, Nodes: 1, IPFamily: "ipv6"}).Topology(); err == nil || !strings.Contains(err.Error(), "--ip-family") {
		t.Errorf("--ip-family ipv6: %v", err)
	}
}
