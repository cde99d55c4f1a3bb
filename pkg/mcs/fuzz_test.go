package mcs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// parseRecords reads the FuzzMerge and FuzzSourceFromRecord input, one
// directive per line. A record is named by a token; the cluster ID is the
// token up to its first "/", so "c2/a" and "c2/b" are two records of c2.
// "-" is an empty field.
//
//	R <rec> <age> <type> <affinity> <timeout> <families> <itp> <td>
//	P <rec> <name> <protocol> <port> <appProtocol> [<globalIP> <globalPort>]
//	L <rec> <key> <value>          an exported label
//	A <rec> <key> <value>          an exported annotation
//	I <rec> <clusterIP>...
//	T <rec> <name> <port>          a target port of the record's endpoints
//	B <rec> <address> <globalIP> <flags>  a backend; flags: r ready, s serving, t terminating
//
// type: H is Headless, C ClusterSetIP, anything else is passed as is;
// affinity: C is ClientIP, N None, "-" empty; families: 4, 6, 46, 64 or
// "-". Numbers that do not parse are 0. A record named only by P, L, ...
// lines exists with zero values.
func parseRecords(spec string) []ExportRecord {
	byTok := map[string]*ExportRecord{}
	var order []string
	rec := func(tok string) *ExportRecord {
		if r, ok := byTok[tok]; ok {
			return r
		}
		id, _, _ := strings.Cut(tok, "/")
		byTok[tok] = &ExportRecord{ClusterID: id, ServiceNamespace: "ns", ServiceName: "svc",
			ExportCreationTimestamp: metav1.NewTime(t0), Type: mcsv1beta1.ClusterSetIP}
		order = append(order, tok)
		return byTok[tok]
	}
	opt := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	num := func(s string) int32 {
		n, _ := strconv.ParseInt(s, 10, 32)
		return int32(n)
	}
	for line := range strings.Lines(spec) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		r := rec(f[1])
		switch {
		case f[0] == "R" && len(f) >= 9:
			r.ExportCreationTimestamp = metav1.NewTime(t0.Add(time.Duration(num(f[2])%100000) * time.Second))
			switch f[3] {
			case "H":
				r.Type = mcsv1beta1.Headless
			case "C":
				r.Type = mcsv1beta1.ClusterSetIP
			default:
				r.Type = mcsv1beta1.ServiceImportType(opt(f[3]))
			}
			switch f[4] {
			case "C":
				r.SessionAffinity = corev1.ServiceAffinityClientIP
			case "N":
				r.SessionAffinity = corev1.ServiceAffinityNone
			default:
				r.SessionAffinity = corev1.ServiceAffinity(opt(f[4]))
			}
			if f[5] != "-" {
				t := num(f[5])
				r.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
			}
			r.IPFamilies = nil
			for _, c := range f[6] {
				switch c {
				case '4':
					r.IPFamilies = append(r.IPFamilies, corev1.IPv4Protocol)
				case '6':
					r.IPFamilies = append(r.IPFamilies, corev1.IPv6Protocol)
				}
			}
			if f[7] != "-" {
				r.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicy(f[7]))
			}
			if f[8] != "-" {
				r.TrafficDistribution = ptrTo(f[8])
			}
		case f[0] == "P" && len(f) >= 6:
			p := causewayv1alpha1.RecordPort{Name: opt(f[2]), Protocol: corev1.Protocol(f[3]), Port: num(f[4])}
			if f[5] != "-" {
				p.AppProtocol = ptrTo(f[5])
			}
			if len(f) >= 8 {
				p.Global = &causewayv1alpha1.GlobalAddress{IP: opt(f[6]), Port: num(f[7])}
			}
			r.Ports = append(r.Ports, p)
		case (f[0] == "L" || f[0] == "A") && len(f) >= 4:
			m := &r.ExportedLabels
			if f[0] == "A" {
				m = &r.ExportedAnnotations
			}
			if *m == nil {
				*m = map[string]string{}
			}
			(*m)[f[2]] = f[3]
		case f[0] == "I":
			r.ClusterIPs = append(r.ClusterIPs, f[2:]...)
		case f[0] == "T" && len(f) >= 4:
			g := endpointGroup(r)
			g.Ports = append(g.Ports, causewayv1alpha1.RecordEndpointPort{Name: opt(f[2]), Port: num(f[3])})
		case f[0] == "B" && len(f) >= 5:
			g := endpointGroup(r)
			g.Backends = append(g.Backends, causewayv1alpha1.RecordBackend{
				Address: opt(f[2]), GlobalIP: opt(f[3]), Hostname: "h" + strconv.Itoa(len(g.Backends)),
				Ready: strings.Contains(f[4], "r"), Serving: strings.Contains(f[4], "s"), Terminating: strings.Contains(f[4], "t"),
			})
		}
	}
	var out []ExportRecord
	for _, tok := range order {
		out = append(out, *byTok[tok])
	}
	return out
}

func endpointGroup(r *ExportRecord) *causewayv1alpha1.RecordEndpoints {
	if len(r.Endpoints) == 0 {
		r.Endpoints = []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4"}}
	}
	return &r.Endpoints[0]
}

// FuzzMerge checks, for any export records, that Merge does not panic,
// that its result does not depend on the order of the records, that the
// import's ports are distinct ports taken from the exports and every
// export port left out is reported as a PortConflict on its cluster, and
// that the statuses and conflicts are reported on exactly the exporting
// clusters. The seed corpus is in testdata/fuzz/FuzzMerge (run by a plain
// go test).
func FuzzMerge(f *testing.F) {
	f.Add("R c2 10 C N - 4 - -\nP c2 http TCP 80 -\nR c3 5 C C 30 4 - -\nP c3 http TCP 8080 -\n")
	f.Fuzz(func(t *testing.T, spec string) {
		records := parseRecords(spec)
		want := Merge(records)
		checkMerge(t, records, want)
		rng := rand.New(rand.NewPCG(uint64(len(spec)), 4))
		for range 4 {
			rs := slices.Clone(records)
			rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			if got := Merge(rs); !reflect.DeepEqual(got, want) {
				t.Fatalf("order changed the result:\n%+v\nwant\n%+v", got, want)
			}
		}
	})
}

func checkMerge(t *testing.T, records []ExportRecord, m MergeResult) {
	t.Helper()
	if len(records) == 0 {
		if !reflect.DeepEqual(m, MergeResult{}) {
			t.Fatalf("no records: %+v, want the zero MergeResult", m)
		}
		return
	}
	// The records Merge uses: the oldest of each cluster.
	used := map[string]ExportRecord{}
	for _, r := range sortedRecords(records) {
		used[r.ClusterID] = r
	}
	var ids []string
	for id := range used {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var got, statuses []string
	for _, e := range m.Exports {
		got = append(got, e.ClusterID)
		c := e.Conflict
		if c.Type != string(mcsv1beta1.ServiceExportConditionConflict) || c.Reason == "" ||
			(c.Status == metav1.ConditionTrue) == (c.Reason == string(mcsv1beta1.ServiceExportReasonNoConflicts)) {
			t.Fatalf("cluster %q: bad Conflict condition %+v", e.ClusterID, c)
		}
		if len(c.Message) > maxConditionMessage {
			t.Fatalf("cluster %q: message of %d bytes", e.ClusterID, len(c.Message))
		}
	}
	for _, c := range m.Clusters {
		statuses = append(statuses, c.Cluster)
	}
	if !slices.Equal(got, ids) || !slices.Equal(statuses, ids) {
		t.Fatalf("exports %q, clusters %q; want %q", got, statuses, ids)
	}
	if _, ok := used[m.Oldest]; !ok {
		t.Fatalf("oldest %q is not an exporting cluster", m.Oldest)
	}
	if m.Spec.Type != used[m.Oldest].Type {
		t.Fatalf("type %q, oldest export (%s) has %q", m.Spec.Type, m.Oldest, used[m.Oldest].Type)
	}
	// Ports: distinct by name and by protocol/port, each one an export's.
	names := map[string]bool{}
	numbers := map[string]bool{}
	for _, p := range m.Spec.Ports {
		n := string(p.Protocol) + "/" + strconv.Itoa(int(p.Port))
		if names[p.Name] || numbers[n] {
			t.Fatalf("import port %q %s twice: %+v", p.Name, n, m.Spec.Ports)
		}
		names[p.Name], numbers[n] = true, true
		found := false
		for _, r := range used {
			found = found || slices.ContainsFunc(r.Ports, func(q causewayv1alpha1.RecordPort) bool { return sameImportPort(p, q) })
		}
		if !found {
			t.Fatalf("import port %+v is no export's", p)
		}
	}
	// Every export port is in the import or a PortConflict of its cluster.
	for id, r := range used {
		for _, q := range r.Ports {
			if slices.ContainsFunc(m.Spec.Ports, func(p mcsv1beta1.ServicePort) bool { return sameImportPort(p, q) }) {
				continue
			}
			c, _ := m.Conflict(id)
			if c.Status != metav1.ConditionTrue || !strings.Contains(c.Reason, string(mcsv1beta1.ServiceExportReasonPortConflict)) {
				t.Fatalf("port %+v of %q left out without a PortConflict: %+v", q, id, c)
			}
		}
	}
}

func sameImportPort(p mcsv1beta1.ServicePort, q causewayv1alpha1.RecordPort) bool {
	return p.Name == q.Name && p.Protocol == q.Protocol && p.Port == q.Port && deref(p.AppProtocol) == deref(q.AppProtocol)
}

// FuzzSourceFromRecord checks, for any record, import type and side
// (local or remote), that SourceFromRecord does not panic, that every
// backend it returns has an address taken from the record — from its
// global addresses exactly when the record is remote and has some, else
// from its ClusterIPs (ClusterSetIP) or backend addresses (Headless) —
// that every address of the record that parses (and carries no zone) is
// used and the others are dropped, and that the EndpointSlices rendered
// from the result hold only addresses the EndpointSlice API accepts. The
// seed corpus is in testdata/fuzz/FuzzSourceFromRecord (run by a plain go
// test).
func FuzzSourceFromRecord(f *testing.F) {
	f.Add("P c2 http TCP 80 - 242.2.0.9 40000\nI c2 10.96.0.10 banana\nT c2 http 8080\nB c2 10.2.0.5 242.2.0.5 rs\n")
	f.Fuzz(func(t *testing.T, spec string) {
		records := parseRecords(spec)
		if len(records) == 0 {
			return
		}
		r := records[0]
		imp := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "ns"}}
		imp.Spec.Ports = Merge([]ExportRecord{r}).Spec.Ports
		for _, typ := range []mcsv1beta1.ServiceImportType{mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless} {
			for _, local := range []bool{false, true} {
				src := SourceFromRecord(r, typ, local)
				checkSource(t, r, typ, local, src)
				eps := RenderEndpointSlices(RenderInput{Import: imp, LocalClusterID: "c1", Sources: []SourceEndpoints{src}})
				checkSliceAddresses(t, eps)
			}
		}
	})
}

// usable parses a record address as SourceFromRecord should: an IP
// address without zone (a remote's interface names mean nothing here).
func usable(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	return a, err == nil && a.Zone() == ""
}

func checkSource(t *testing.T, r ExportRecord, typ mcsv1beta1.ServiceImportType, local bool, src SourceEndpoints) {
	t.Helper()
	viaGlobal := func(a netip.Addr) bool { return !local && addrpolicy.ReachedThroughGlobal(&r, a) }
	var want []netip.Addr
	if typ == mcsv1beta1.Headless {
		for _, g := range r.Endpoints {
			for _, b := range g.Backends {
				a, ok := usable(b.Address)
				if ok && viaGlobal(a) {
					a, ok = usable(b.GlobalIP)
				}
				if ok {
					want = append(want, a)
				}
			}
		}
	} else {
		for _, p := range r.Ports {
			if p.Global == nil || local {
				continue
			}
			if a, ok := usable(p.Global.IP); ok && !slices.Contains(want, a) {
				want = append(want, a)
			}
		}
		for _, s := range r.ClusterIPs {
			if a, ok := usable(s); ok && !viaGlobal(a) {
				want = append(want, a)
			}
		}
	}
	var got []netip.Addr
	for _, b := range src.Backends {
		got = append(got, b.Address)
	}
	if src.ClusterID != r.ClusterID || !slices.Equal(got, want) {
		t.Fatalf("%s local=%v: cluster %q backends %v, want %q %v", typ, local, src.ClusterID, got, r.ClusterID, want)
	}
}

// checkSliceAddresses applies the EndpointSlice API's address validation
// (an address of the slice's family, as net.ParseIP reads it).
func checkSliceAddresses(t *testing.T, eps []discoveryv1.EndpointSlice) {
	t.Helper()
	for _, s := range eps {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ip := net.ParseIP(a)
				ok := ip != nil && (s.AddressType == discoveryv1.AddressTypeIPv4) == (ip.To4() != nil)
				if !ok {
					t.Fatalf("slice %s (%s) holds address %q the API refuses", s.Name, s.AddressType, a)
				}
			}
		}
	}
}

// Found by FuzzSourceFromRecord (seeds flat_headless, remote_global,
// zoned_cluster_ip): a remote record's address with an IPv6 zone
// ("fe80::1%eth0") parsed, was kept, and ended in an EndpointSlice the API
// server refuses, so one member's record could block the import's slices.
func TestSourceFromRecordDropsZonedAddresses(t *testing.T) {
	r := rec("c2", 0, func(r *ExportRecord) {
		r.ClusterIPs = []string{"fe80::10%eth0", "10.96.0.10"}
		r.Endpoints = []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv6", Backends: []causewayv1alpha1.RecordBackend{
			{Address: "fe80::5%eth0", Ready: true}, {Address: "fd00::5", Ready: true}}}}
	})
	for typ, want := range map[mcsv1beta1.ServiceImportType]string{mcsv1beta1.ClusterSetIP: "10.96.0.10", mcsv1beta1.Headless: "fd00::5"} {
		src := SourceFromRecord(r, typ, false)
		if len(src.Backends) != 1 || src.Backends[0].Address.String() != want {
			t.Errorf("%s: backends %+v, want only %s", typ, src.Backends, want)
		}
	}
}

// FuzzJoinRecord checks record joining, what every importer does with a
// remote cluster's head and parts, against any set a member can write:
// groups is the record's layout (a group of b%50+1 backends per byte),
// maxItems where SplitRecord cuts it, and ops what the member then does to
// the objects, one op per byte (kind b%4 on part b/4 % parts): drop the
// part, give it another revision, give it another index, or add a stray
// object under a part name of another revision. JoinRecord never panics;
// it gives back the record when no part of the set was touched (its
// definition, and every backend in order with its group's address type
// and ports: a group cut over two objects comes back as two), and
// otherwise an *IncompleteRecordError naming the first touched part.
// The seed corpus is in testdata/fuzz/FuzzJoinRecord.
func FuzzJoinRecord(f *testing.F) {
	f.Add([]byte{200, 3, 120}, uint16(60), []byte{})
	f.Add([]byte{200, 3, 120}, uint16(60), []byte{4, 1, 14, 3})
	f.Fuzz(func(t *testing.T, groups []byte, maxItems uint16, ops []byte) {
		if len(groups) > 64 || len(ops) > 64 {
			return
		}
		var sizes []int
		for _, b := range groups {
			sizes = append(sizes, int(b)%50+1)
		}
		r := headlessRecord(sizes...)
		Aggregate(&r)
		objs := SplitRecord(r, int(maxItems)%400+2)
		head := objs[0]
		parts := byNameOrEmpty(objs)
		first := len(objs) // the first touched part, len(objs): none
		for _, b := range ops {
			if len(objs) < 2 {
				break
			}
			i := 1 + int(b/4)%(len(objs)-1)
			name := RecordPartName(r.ServiceNamespace, r.ServiceName, head.Part.Revision, i)
			p, ok := parts[name]
			switch b % 4 {
			case 0:
				delete(parts, name)
			case 1:
				if ok {
					p.Part = &causewayv1alpha1.RecordPart{Index: p.Part.Index, Count: p.Part.Count, Revision: "x" + p.Part.Revision}
					parts[name] = p
				}
			case 2:
				if ok {
					p.Part = &causewayv1alpha1.RecordPart{Index: p.Part.Index + 1, Count: p.Part.Count, Revision: p.Part.Revision}
					parts[name] = p
				}
			case 3:
				stray := p
				stray.Part = &causewayv1alpha1.RecordPart{Index: int32(i), Count: int32(len(objs)), Revision: "other"}
				parts[RecordPartName(r.ServiceNamespace, r.ServiceName, "other", i)] = stray
				continue // touches nothing of the set
			}
			first = min(first, i)
		}
		got, err := JoinRecord(head, parts)
		if first == len(objs) {
			want, gotDef := r, got
			want.Part, want.Endpoints, gotDef.Endpoints = nil, nil, nil
			if err != nil || !reflect.DeepEqual(gotDef, want) || !reflect.DeepEqual(flatBackends(got), flatBackends(r)) {
				t.Fatalf("untouched set of %d objects joined to %+v (%v), want the record", len(objs), got, err)
			}
			return
		}
		var inc *IncompleteRecordError
		if !errors.As(err, &inc) || inc.Missing != first || inc.Count != len(objs) || inc.Revision != head.Part.Revision {
			t.Fatalf("set of %d objects with part %d touched: %+v (%v), want it missing", len(objs), first, got, err)
		}
	})
}

// flatBackends lists a record's backends in order, each with its group's
// address type and ports.
func flatBackends(r ExportRecord) []string {
	var out []string
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			out = append(out, fmt.Sprintf("%s %v %+v", g.AddressType, g.Ports, b))
		}
	}
	return out
}

// byNameOrEmpty is byName, empty for a record of one object.
func byNameOrEmpty(objs []ExportRecord) map[string]ExportRecord {
	if len(objs) < 2 {
		return map[string]ExportRecord{}
	}
	return byName(objs)
}
