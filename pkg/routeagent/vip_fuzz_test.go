package routeagent

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

// parseVIPInputs reads the FuzzVIPDesired input, one directive per line
// ("-" is an empty field, numbers that do not parse are 0):
//
//	L <services> <backends>                       the table's limits
//	I <ns> <name> <uid> <age> <type> <ip>...      a ServiceImport; type C ClusterSetIP, else Headless;
//	                                              it replaces an earlier one of the same name (the API holds one)
//	P <protocol> <port> <name>                    a port of the last import
//	A <affinity> <timeout> <itp> <td>             its affinity (C ClientIP) and traffic policy (L Local, P PreferClose)
//	S <ns> <svc> <cluster> <family> <manager> <owner uid> <ready-endpoints>  a slice; family 6 IPv6, else IPv4; manager m: the MCS controller's
//	Q <protocol> <port> <name>                    a port of the last slice
//	E <ready> <address>...                        an endpoint of the last slice; ready y, n or -
func parseVIPInputs(spec string) (vip.Limits, []*mcsv1beta1.ServiceImport, []*discoveryv1.EndpointSlice) {
	var lim vip.Limits
	var imports []*mcsv1beta1.ServiceImport
	var eps []*discoveryv1.EndpointSlice
	opt := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	num := func(s string) int64 {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	for _, line := range strings.Split(spec, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		arg := func(i int) string {
			if i < len(f) {
				return opt(f[i])
			}
			return ""
		}
		switch f[0] {
		case "L":
			lim = vip.Limits{Services: uint32(num(arg(1))), Backends: uint32(num(arg(2)))}
		case "I":
			si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: arg(1), Name: arg(2), UID: types.UID(arg(3)),
				CreationTimestamp: metav1.Unix(num(arg(4)), 0)}, Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless}}
			if arg(5) == "C" {
				si.Spec.Type = mcsv1beta1.ClusterSetIP
			}
			if len(f) > 6 {
				si.Spec.IPs = f[6:]
			}
			imports = slices.DeleteFunc(imports, func(o *mcsv1beta1.ServiceImport) bool { return o.Namespace == si.Namespace && o.Name == si.Name })
			imports = append(imports, si)
		case "P":
			if len(imports) > 0 {
				si := imports[len(imports)-1]
				si.Spec.Ports = append(si.Spec.Ports, mcsv1beta1.ServicePort{Protocol: corev1.Protocol(arg(1)), Port: int32(num(arg(2))), Name: arg(3)})
			}
		case "A":
			if len(imports) > 0 {
				si := imports[len(imports)-1]
				if arg(1) == "C" {
					si.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
					si.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(num(arg(2))))}}
				}
				if arg(3) == "L" {
					si.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				}
				if arg(4) == "P" {
					si.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
				}
			}
		case "S":
			s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: arg(1), Name: arg(2) + "-" + strconv.Itoa(len(eps)),
				Labels: map[string]string{LabelServiceName: arg(2), LabelSourceCluster: arg(3)}}, AddressType: discoveryv1.AddressTypeIPv4}
			if arg(4) == "6" {
				s.AddressType = discoveryv1.AddressTypeIPv6
			}
			if arg(5) == "m" {
				s.Labels[discoveryv1.LabelManagedBy] = mcs.ManagedBy
			}
			if arg(6) != "" {
				s.OwnerReferences = []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName,
					Name: arg(2), UID: types.UID(arg(6)), Controller: ptr.To(true)}}
			}
			if arg(7) != "" {
				s.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: arg(7)}
			}
			eps = append(eps, s)
		case "Q":
			if len(eps) > 0 {
				s := eps[len(eps)-1]
				s.Ports = append(s.Ports, discoveryv1.EndpointPort{Protocol: ptr.To(corev1.Protocol(arg(1))), Port: ptr.To(int32(num(arg(2)))), Name: ptr.To(arg(3))})
			}
		case "E":
			if len(eps) > 0 {
				s := eps[len(eps)-1]
				e := discoveryv1.Endpoint{Addresses: f[min(2, len(f)):]}
				switch arg(1) {
				case "y":
					e.Conditions.Ready = ptr.To(true)
				case "n":
					e.Conditions.Ready = ptr.To(false)
				}
				s.Endpoints = append(s.Endpoints, e)
			}
		}
	}
	return lim, imports, eps
}

// FuzzVIPDesired checks the route agent's VIP table, computed from what
// the cluster's API holds (ServiceImports, EndpointSlices, anyone with
// rights there may have written), for any input: VIPDesired does not
// panic; the table it gives is one the datapath takes (vip.Validate, with
// the table's limits, accepts it: Set never refuses the whole table); it does
// not depend on the order of the objects; every VIP lies in the ranges and
// belongs to one import, every backend is an address of a slice the MCS
// controller wrote for that import, and no import is both programmed and
// left out; a slice slimmed as the cache's initial list holds it parses
// as the slice itself. The seed corpus is in testdata/fuzz/FuzzVIPDesired.
func FuzzVIPDesired(f *testing.F) {
	f.Add("L 4 4\nI demo web u1 1 C 243.0.0.10\nP TCP 80 http\nS demo web c1 4 m u1 3\nQ TCP 8080 http\nE y 10.96.0.5\n" +
		"I demo db u2 2 C 243.0.0.11 10.96.0.1\nP UDP 53 dns\nS demo db c2 4 - u2 1\nQ UDP 53 dns\nE - 10.97.0.9\n")
	f.Fuzz(func(t *testing.T, spec string) {
		if len(spec) > 8192 {
			return
		}
		lim, imports, eps := parseVIPInputs(spec)
		cfg := vipConfig
		cfg.Limits = lim
		st := VIPDesired(cfg, imports, eps)
		if err := vip.Validate(st.Services, lim); err != nil {
			t.Fatalf("the table refuses what VIPDesired gives: %v", err)
		}
		// The cache keeps the same value of a slice from the initial list
		// (slimmed while the list arrives) and from a watch event.
		for _, s := range eps {
			slim, err := slimSlice(s)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ParseVIPSlice(slim.(*discoveryv1.EndpointSlice)), ParseVIPSlice(s); !reflect.DeepEqual(got, want) {
				t.Fatalf("slice %s/%s: slimmed it parses as %+v, not %+v", s.Namespace, s.Name, got, want)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(len(spec)), 9))
		for range 3 {
			is, ss := slices.Clone(imports), slices.Clone(eps)
			rng.Shuffle(len(is), func(i, j int) { is[i], is[j] = is[j], is[i] })
			rng.Shuffle(len(ss), func(i, j int) { ss[i], ss[j] = ss[j], ss[i] })
			if got := VIPDesired(cfg, is, ss); !reflect.DeepEqual(got.Services, st.Services) || !slices.Equal(got.LeftOut, st.LeftOut) || got.Ignored != st.Ignored {
				t.Fatalf("the order of the inputs changed the table:\n%+v\nwant\n%+v", got, st)
			}
		}
		owners := map[netip.Addr]*mcsv1beta1.ServiceImport{}
		for k, svc := range st.Services {
			if !slices.ContainsFunc(cfg.Ranges, func(r netip.Prefix) bool { return r.Contains(k.VIP) }) {
				t.Fatalf("VIP %s outside the ranges %v", k.VIP, cfg.Ranges)
			}
			var owner *mcsv1beta1.ServiceImport
			for _, si := range imports {
				if si.Spec.Type == mcsv1beta1.ClusterSetIP && slices.ContainsFunc(si.Spec.IPs, func(s string) bool { a, err := netip.ParseAddr(s); return err == nil && a == k.VIP }) &&
					(owner == nil || olderFirst(si, owner) < 0) {
					owner = si
				}
			}
			if owner == nil {
				t.Fatalf("VIP %s of no import", k.VIP)
			}
			if prev, ok := owners[k.VIP]; ok && prev != owner {
				t.Fatalf("VIP %s of two imports", k.VIP)
			}
			owners[k.VIP] = owner
			if slices.Contains(st.LeftOut, importName(owner)) {
				t.Fatalf("import %s both programmed and left out", importName(owner))
			}
			for _, b := range svc.Backends {
				if !slices.ContainsFunc(eps, func(s *discoveryv1.EndpointSlice) bool {
					return writtenFor(ParseVIPSlice(s), owner) && slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool {
						return slices.ContainsFunc(e.Addresses, func(a string) bool { addr, err := netip.ParseAddr(a); return err == nil && addr == b.Addr })
					})
				}) {
					t.Fatalf("backend %s of %s is in no slice the MCS controller wrote for %s", b, k, importName(owner))
				}
			}
		}
	})
}

func importName(si *mcsv1beta1.ServiceImport) string { return si.Namespace + "/" + si.Name }
