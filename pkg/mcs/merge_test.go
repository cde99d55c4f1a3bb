package mcs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// rec builds a ClusterSetIP record exported age seconds after t0.
func rec(cluster string, age int, mods ...func(*ExportRecord)) ExportRecord {
	r := ExportRecord{
		ClusterID:               cluster,
		ServiceNamespace:        "kubecon",
		ServiceName:             "whereami",
		ExportCreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
		Type:                    mcsv1beta1.ClusterSetIP,
		Ports:                   []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		SessionAffinity:         corev1.ServiceAffinityNone,
		IPFamilies:              []corev1.IPFamily{corev1.IPv4Protocol},
	}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func ports(ps ...causewayv1alpha1.RecordPort) func(*ExportRecord) {
	return func(r *ExportRecord) { r.Ports = ps }
}

func port(name string, proto corev1.Protocol, n int32) causewayv1alpha1.RecordPort {
	return causewayv1alpha1.RecordPort{Name: name, Protocol: proto, Port: n}
}

func headless(r *ExportRecord) { r.Type = mcsv1beta1.Headless }

func clientIP(timeout *int32) func(*ExportRecord) {
	return func(r *ExportRecord) {
		r.SessionAffinity = corev1.ServiceAffinityClientIP
		if timeout != nil {
			r.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
}

func families(f ...corev1.IPFamily) func(*ExportRecord) {
	return func(r *ExportRecord) { r.IPFamilies = f }
}

func mergedPorts(ps []mcsv1beta1.ServicePort) []string {
	var out []string
	for _, p := range ps {
		s := fmt.Sprintf("%s %s/%d", p.Name, p.Protocol, p.Port)
		if p.AppProtocol != nil {
			s += " " + *p.AppProtocol
		}
		out = append(out, s)
	}
	return out
}

func TestMerge(t *testing.T) {
	const noConflict = "NoConflicts"
	tests := []struct {
		name      string
		records   []ExportRecord
		wantType  mcsv1beta1.ServiceImportType
		wantPorts []string
		// wantReason: cluster → Conflict reason ("NoConflicts" when False).
		wantReason map[string]string
		// wantMsg: cluster → substrings its Conflict message must contain.
		wantMsg map[string][]string
		check   func(t *testing.T, m MergeResult)
	}{
		{
			name:       "one export is copied",
			records:    []ExportRecord{rec("c1", 0)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict},
			check: func(t *testing.T, m MergeResult) {
				if m.Spec.SessionAffinity != corev1.ServiceAffinityNone || m.Spec.SessionAffinityConfig != nil {
					t.Errorf("affinity = %q %v, want None without config", m.Spec.SessionAffinity, m.Spec.SessionAffinityConfig)
				}
				if !reflect.DeepEqual(m.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
					t.Errorf("ipFamilies = %v", m.Spec.IPFamilies)
				}
				if len(m.Spec.IPs) != 0 {
					t.Errorf("ips = %v, want none (the allocator sets them)", m.Spec.IPs)
				}
			},
		},
		{
			name:       "identical exports do not conflict, clusters sorted",
			records:    []ExportRecord{rec("c2", 0), rec("c1", 5), rec("c3", 1)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict, "c3": noConflict},
			check: func(t *testing.T, m MergeResult) {
				want := []mcsv1beta1.ClusterStatus{{Cluster: "c1"}, {Cluster: "c2"}, {Cluster: "c3"}}
				if !reflect.DeepEqual(m.Clusters, want) {
					t.Errorf("clusters = %v, want %v", m.Clusters, want)
				}
				if m.Oldest != "c2" {
					t.Errorf("oldest = %q, want c2", m.Oldest)
				}
			},
		},
		{
			name: "differing port sets: the union, and a conflict on every export",
			records: []ExportRecord{
				rec("c1", 0, ports(port("http", "TCP", 80))),
				rec("c2", 1, ports(port("http", "TCP", 80), port("metrics", "TCP", 9090))),
				rec("c3", 2, ports(port("dns", "UDP", 53))),
				rec("c4", 3, ports(port("dns", "UDP", 53), port("http", "TCP", 80), port("metrics", "TCP", 9090))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80", "metrics TCP/9090", "dns UDP/53"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict", "c3": "PortConflict", "c4": "PortConflict"},
			wantMsg: map[string][]string{"c4": {"differing port sets",
				`c1 lacks "metrics" TCP/9090, "dns" UDP/53; c2 lacks "dns" UDP/53; c3 lacks "http" TCP/80, "metrics" TCP/9090`}},
			check: func(t *testing.T, m MergeResult) {
				if c, _ := m.Conflict("c4"); strings.Contains(c.Message, "c4 lacks") {
					t.Errorf("c4 exports every port: %s", c.Message)
				}
			},
		},
		{
			name: "same port sets in any order do not conflict",
			records: []ExportRecord{
				rec("c1", 0, ports(port("http", "TCP", 80), port("metrics", "TCP", 9090))),
				rec("c2", 1, ports(port("metrics", "TCP", 9090), port("http", "TCP", 80))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80", "metrics TCP/9090"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
		{
			name: "same name, other port: oldest wins",
			records: []ExportRecord{
				rec("c2", 1, ports(port("http", "TCP", 8080), port("grpc", "TCP", 9000))),
				rec("c1", 0, ports(port("http", "TCP", 80), port("grpc", "TCP", 9000))),
				rec("c3", 2, ports(port("http", "TCP", 80), port("grpc", "TCP", 9000))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80", "grpc TCP/9000"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict", "c3": noConflict},
			wantMsg: map[string][]string{
				"c1": {`"http" TCP/80`, "cluster c1", `c2 ("http" TCP/8080)`},
				"c2": {"cluster c1", "c2"},
			},
		},
		{
			name: "same name, other protocol: oldest wins",
			records: []ExportRecord{
				rec("c1", 0, ports(port("dns", "UDP", 53))),
				rec("c2", 1, ports(port("dns", "TCP", 53))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"dns UDP/53"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict"},
			wantMsg:    map[string][]string{"c2": {`c2 ("dns" TCP/53)`}},
		},
		{
			name: "same protocol and port, other name",
			records: []ExportRecord{
				rec("c1", 0, ports(port("http", "TCP", 80))),
				rec("c2", 1, ports(port("web", "TCP", 80))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict"},
			wantMsg:    map[string][]string{"c2": {`c2 ("web" TCP/80)`}},
		},
		{
			name: "same port number, other protocol and name is no clash",
			records: []ExportRecord{
				rec("c1", 0, ports(port("dns", "UDP", 53), port("dns-tcp", "TCP", 53))),
				rec("c2", 1, ports(port("dns-tcp", "TCP", 53), port("dns", "UDP", 53))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"dns UDP/53", "dns-tcp TCP/53"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
		{
			name: "unnamed ports clash on the empty name",
			records: []ExportRecord{
				rec("c1", 0, ports(port("", "TCP", 80))),
				rec("c2", 1, ports(port("", "TCP", 8080))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{" TCP/80"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict"},
		},
		{
			name: "appProtocol differs",
			records: []ExportRecord{
				rec("c1", 0, ports(causewayv1alpha1.RecordPort{Name: "web", Protocol: "TCP", Port: 443, AppProtocol: ptrTo("https")})),
				rec("c2", 1, ports(causewayv1alpha1.RecordPort{Name: "web", Protocol: "TCP", Port: 443, AppProtocol: ptrTo("kubernetes.io/h2c")})),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"web TCP/443 https"},
			wantReason: map[string]string{"c1": "PortConflict", "c2": "PortConflict"},
			wantMsg:    map[string][]string{"c2": {"kubernetes.io/h2c"}},
		},
		{
			name:       "type: oldest wins, every export is involved",
			records:    []ExportRecord{rec("c1", 0), rec("c2", 1, headless), rec("c3", 2)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "TypeConflict", "c2": "TypeConflict", "c3": "TypeConflict"},
			wantMsg:    map[string][]string{"c3": {`using "ClusterSetIP"`, "cluster c1", "1 of 3", `c2 ("Headless")`}},
		},
		{
			name:       "type: older headless export makes the import headless",
			records:    []ExportRecord{rec("c1", 3), rec("c2", 1, headless)},
			wantType:   mcsv1beta1.Headless,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "TypeConflict", "c2": "TypeConflict"},
		},
		{
			name:       "equal timestamps: smaller cluster ID wins",
			records:    []ExportRecord{rec("b", 0, headless), rec("a", 0)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"a": "TypeConflict", "b": "TypeConflict"},
			check: func(t *testing.T, m MergeResult) {
				if m.Oldest != "a" {
					t.Errorf("oldest = %q, want a", m.Oldest)
				}
			},
		},
		{
			name:       "session affinity",
			records:    []ExportRecord{rec("c1", 0, clientIP(nil)), rec("c2", 1)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "SessionAffinityConflict", "c2": "SessionAffinityConflict"},
			check: func(t *testing.T, m MergeResult) {
				if m.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
					t.Errorf("affinity = %q, want ClientIP", m.Spec.SessionAffinity)
				}
				if got := m.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; *got != 10800 {
					t.Errorf("timeout = %d, want the default 10800", *got)
				}
			},
		},
		{
			name:       "session affinity config: default equals explicit 10800",
			records:    []ExportRecord{rec("c1", 0, clientIP(nil)), rec("c2", 1, clientIP(ptrTo[int32](10800)))},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
		{
			name: "session affinity config differs; None export not involved",
			records: []ExportRecord{
				rec("c1", 0, clientIP(ptrTo[int32](60))),
				rec("c2", 1, clientIP(ptrTo[int32](3600))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "SessionAffinityConfigConflict", "c2": "SessionAffinityConfigConflict"},
			wantMsg:    map[string][]string{"c2": {`using "60"`, `c2 ("3600")`}},
			check: func(t *testing.T, m MergeResult) {
				if got := *m.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; got != 60 {
					t.Errorf("timeout = %d, want 60", got)
				}
			},
		},
		{
			name: "affinity and its config both conflicting",
			records: []ExportRecord{
				rec("c1", 0, clientIP(ptrTo[int32](60))),
				rec("c2", 1, clientIP(ptrTo[int32](3600))),
				rec("c3", 2),
			},
			wantType:  mcsv1beta1.ClusterSetIP,
			wantPorts: []string{"http TCP/80"},
			wantReason: map[string]string{
				"c1": "SessionAffinityConflict,SessionAffinityConfigConflict",
				"c2": "SessionAffinityConflict,SessionAffinityConfigConflict",
				"c3": "SessionAffinityConflict",
			},
		},
		{
			name:       "headless import ignores session affinity",
			records:    []ExportRecord{rec("c1", 0, headless, clientIP(nil)), rec("c2", 1, headless)},
			wantType:   mcsv1beta1.Headless,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
			check: func(t *testing.T, m MergeResult) {
				if m.Spec.SessionAffinity != corev1.ServiceAffinityNone || m.Spec.SessionAffinityConfig != nil {
					t.Errorf("headless affinity = %q %v, want None", m.Spec.SessionAffinity, m.Spec.SessionAffinityConfig)
				}
			},
		},
		{
			name: "internal traffic policy: unset equals Cluster",
			records: []ExportRecord{
				rec("c1", 0),
				rec("c2", 1, func(r *ExportRecord) { r.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyCluster) }),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
		{
			name: "internal traffic policy: Local conflicts",
			records: []ExportRecord{
				rec("c1", 0, func(r *ExportRecord) { r.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyLocal) }),
				rec("c2", 1),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "InternalTrafficPolicyConflict", "c2": "InternalTrafficPolicyConflict"},
			check: func(t *testing.T, m MergeResult) {
				if p := m.Spec.InternalTrafficPolicy; p == nil || *p != corev1.ServiceInternalTrafficPolicyLocal {
					t.Errorf("internalTrafficPolicy = %v, want Local", p)
				}
			},
		},
		{
			name: "traffic distribution",
			records: []ExportRecord{
				rec("c1", 0),
				rec("c2", 1, func(r *ExportRecord) { r.TrafficDistribution = ptrTo("PreferClose") }),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "TrafficDistributionConflict", "c2": "TrafficDistributionConflict"},
			check: func(t *testing.T, m MergeResult) {
				if m.Spec.TrafficDistribution != nil {
					t.Errorf("trafficDistribution = %q, want unset (oldest)", *m.Spec.TrafficDistribution)
				}
			},
		},
		{
			name:       "ip families: IPv4 vs IPv6",
			records:    []ExportRecord{rec("c1", 0), rec("c2", 1, families(corev1.IPv6Protocol))},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "IPFamilyConflict", "c2": "IPFamilyConflict"},
		},
		{
			name:       "ip families: dual-stack export serves an IPv4 import",
			records:    []ExportRecord{rec("c1", 0), rec("c2", 1, families(corev1.IPv6Protocol, corev1.IPv4Protocol))},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
		{
			name:       "ip families: IPv4-only export under a dual-stack import",
			records:    []ExportRecord{rec("c1", 0, families(corev1.IPv4Protocol, corev1.IPv6Protocol)), rec("c2", 1)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "IPFamilyConflict", "c2": "IPFamilyConflict"},
			check: func(t *testing.T, m MergeResult) {
				if len(m.Spec.IPFamilies) != 2 {
					t.Errorf("ipFamilies = %v, want the oldest's two", m.Spec.IPFamilies)
				}
			},
		},
		{
			name: "exported labels: the oldest export's, every export involved",
			records: []ExportRecord{
				rec("c1", 0, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web", "team": "a"} }),
				rec("c2", 1, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "api", "zone": "x"} }),
				rec("c3", 2, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"team": "a", "tier": "web"} }),
				rec("c4", 3, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"team": "a"} }),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "LabelsConflict", "c2": "LabelsConflict", "c3": "LabelsConflict", "c4": "LabelsConflict"},
			wantMsg: map[string][]string{"c3": {"conflicting exportedLabels", `using "team=a,tier=web"`, "cluster c1", "2 of 4",
				`c2 ("tier=api,zone=x")`, `c4 ("team=a")`}},
			check: func(t *testing.T, m MergeResult) {
				want := map[string]string{"tier": "web", "team": "a"}
				if !reflect.DeepEqual(m.Labels, want) {
					t.Errorf("labels = %v, want %v (the oldest's, no union)", m.Labels, want)
				}
			},
		},
		{
			name: "exported labels: equal maps, nil equals empty",
			records: []ExportRecord{
				rec("c1", 0, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web"} }),
				rec("c2", 1, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web"} }),
				rec("c3", 2, func(r *ExportRecord) {
					r.ExportedLabels = map[string]string{"tier": "web"}
					r.ExportedAnnotations = map[string]string{}
				}),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict, "c3": noConflict},
		},
		{
			name: "exported labels: an oldest export without labels gives none",
			records: []ExportRecord{
				rec("c1", 0),
				rec("c2", 1, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web"} }),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "LabelsConflict", "c2": "LabelsConflict"},
			check: func(t *testing.T, m MergeResult) {
				if m.Labels != nil {
					t.Errorf("labels = %v, want none", m.Labels)
				}
			},
		},
		{
			name: "exported annotations",
			records: []ExportRecord{
				rec("c1", 0, func(r *ExportRecord) { r.ExportedAnnotations = map[string]string{"owner": "x"} }),
				rec("c2", 1, func(r *ExportRecord) { r.ExportedAnnotations = map[string]string{"owner": "y", "extra": "z"} }),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "AnnotationsConflict", "c2": "AnnotationsConflict"},
			check: func(t *testing.T, m MergeResult) {
				if !reflect.DeepEqual(m.Annotations, map[string]string{"owner": "x"}) || m.Labels != nil {
					t.Errorf("annotations = %v labels = %v", m.Annotations, m.Labels)
				}
			},
		},
		{
			name: "several reasons are combined in mcs-api order",
			records: []ExportRecord{
				rec("c1", 0),
				rec("c2", 1, headless, ports(port("http", "TCP", 8080))),
			},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": "PortConflict,TypeConflict", "c2": "PortConflict,TypeConflict"},
			wantMsg:    map[string][]string{"c2": {"conflicting type", "conflicting port"}},
		},
		{
			name:       "duplicate records of one cluster: the oldest is used",
			records:    []ExportRecord{rec("c1", 5, headless), rec("c1", 0), rec("c2", 1)},
			wantType:   mcsv1beta1.ClusterSetIP,
			wantPorts:  []string{"http TCP/80"},
			wantReason: map[string]string{"c1": noConflict, "c2": noConflict},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Merge(tc.records)
			if m.Spec.Type != tc.wantType {
				t.Errorf("type = %q, want %q", m.Spec.Type, tc.wantType)
			}
			if got := mergedPorts(m.Spec.Ports); !reflect.DeepEqual(got, tc.wantPorts) {
				t.Errorf("ports = %q, want %q", got, tc.wantPorts)
			}
			if len(m.Exports) != len(tc.wantReason) {
				t.Errorf("%d export statuses, want %d", len(m.Exports), len(tc.wantReason))
			}
			for cluster, reason := range tc.wantReason {
				c, ok := m.Conflict(cluster)
				if !ok {
					t.Errorf("no Conflict condition for %s", cluster)
					continue
				}
				wantStatus := metav1.ConditionTrue
				if reason == noConflict {
					wantStatus = metav1.ConditionFalse
				}
				if c.Type != "Conflict" || c.Status != wantStatus || c.Reason != reason {
					t.Errorf("%s: condition %s=%s reason %q, want Conflict=%s reason %q (%s)",
						cluster, c.Type, c.Status, c.Reason, wantStatus, reason, c.Message)
				}
				for _, s := range tc.wantMsg[cluster] {
					if !strings.Contains(c.Message, s) {
						t.Errorf("%s: message %q lacks %q", cluster, c.Message, s)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, m)
			}
		})
	}
}

func TestMergeNoRecords(t *testing.T) {
	if m := Merge(nil); !reflect.DeepEqual(m, MergeResult{}) {
		t.Errorf("Merge(nil) = %+v, want zero", m)
	}
}

// TestMergeOrderIndependent replays the same records in many orders and
// requires the identical result.
func TestMergeOrderIndependent(t *testing.T) {
	records := []ExportRecord{
		rec("c1", 0, ports(port("http", "TCP", 80), port("metrics", "TCP", 9090)),
			func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web"} }),
		rec("c2", 0, headless, ports(port("http", "TCP", 8080), port("grpc", "TCP", 9000))),
		rec("c3", 4, clientIP(ptrTo[int32](60)), ports(port("web", "TCP", 80)),
			func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "api", "x": "y"} }),
		rec("c4", 2, families(corev1.IPv6Protocol), ports(port("dns", "UDP", 53))),
		rec("c5", 9, ports(port("dns", "UDP", 53), port("", "TCP", 1))),
		rec("c0", 9),
	}
	want := Merge(records)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		shuffled := append([]ExportRecord(nil), records...)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if got := Merge(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("permutation %d: result differs:\n got %+v\nwant %+v", i, got, want)
		}
	}
	// The input is not modified.
	if records[0].ClusterID != "c1" || records[5].ClusterID != "c0" {
		t.Errorf("Merge reordered its input")
	}
}

func TestNewExportRecord(t *testing.T) {
	created := metav1.NewTime(t0)
	export := &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami", CreationTimestamp: created},
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"a": "b"}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}},
		},
	}
	r, err := NewExportRecord("c1", export, svc)
	if err != nil {
		t.Fatal(err)
	}
	if r.ClusterID != "c1" || r.Type != mcsv1beta1.ClusterSetIP || !r.ExportCreationTimestamp.Equal(&created) ||
		!reflect.DeepEqual(r.ClusterIPs, []string{"10.96.0.10"}) || r.ExportedLabels["a"] != "b" {
		t.Errorf("record = %+v", r)
	}
	if r.Ports[0].Protocol != corev1.ProtocolTCP || r.Ports[1].Protocol != corev1.ProtocolUDP {
		t.Errorf("protocols = %v, want TCP default and UDP", r.Ports)
	}
	if RecordName(r.ServiceNamespace, r.ServiceName) != "kubecon.whereami" {
		t.Errorf("record name = %q", RecordName(r.ServiceNamespace, r.ServiceName))
	}

	hl := svc.DeepCopy()
	hl.Spec.ClusterIP, hl.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	if r, err := NewExportRecord("c1", export, hl); err != nil || r.Type != mcsv1beta1.Headless || r.ClusterIPs != nil {
		t.Errorf("headless: %+v, %v", r, err)
	}

	for name, tc := range map[string]struct {
		svc    *corev1.Service
		reason mcsv1beta1.ServiceExportConditionReason
	}{
		"no service":    {nil, mcsv1beta1.ServiceExportReasonNoService},
		"external name": {&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}, mcsv1beta1.ServiceExportReasonInvalidServiceType},
	} {
		_, err := NewExportRecord("c1", export, tc.svc)
		var inv *InvalidExportError
		if !errors.As(err, &inv) || inv.Reason != tc.reason {
			t.Errorf("%s: err = %v, want reason %s", name, err, tc.reason)
		}
	}
}

// TestMergeDuplicateClusterOrderIndependent: two records of one cluster
// with the same timestamp (a bug upstream, but possible) still give one
// result whatever the order.
func TestMergeDuplicateClusterOrderIndependent(t *testing.T) {
	a := rec("c1", 0, clientIP(ptrTo[int32](60)))
	b := rec("c1", 0, clientIP(ptrTo[int32](90)), func(r *ExportRecord) { r.TrafficDistribution = ptrTo("PreferClose") })
	want := Merge([]ExportRecord{a, b, rec("c2", 1)})
	for range 20 {
		if got := Merge([]ExportRecord{rec("c2", 1), b, a}); !reflect.DeepEqual(got, want) {
			t.Fatalf("result depends on order:\n got %+v\nwant %+v", got.Spec, want.Spec)
		}
	}
	if len(want.Exports) != 2 {
		t.Errorf("%d exports, want 2", len(want.Exports))
	}
}

func TestExportConditions(t *testing.T) {
	_, noSvc := NewExportRecord("c1", &mcsv1beta1.ServiceExport{}, nil)
	other := errors.New("broker unreachable")
	for _, tc := range []struct {
		got         metav1.Condition
		typ, reason string
		status      metav1.ConditionStatus
	}{
		{ValidCondition(nil), "Valid", "Valid", metav1.ConditionTrue},
		{ValidCondition(noSvc), "Valid", "NoService", metav1.ConditionFalse},
		{ValidCondition(other), "Valid", "Failed", metav1.ConditionFalse},
		{ReadyCondition(false, nil), "Ready", "Pending", metav1.ConditionUnknown},
		{ReadyCondition(true, nil), "Ready", "Exported", metav1.ConditionTrue},
		{ReadyCondition(false, other), "Ready", "Failed", metav1.ConditionFalse},
	} {
		if tc.got.Type != tc.typ || tc.got.Reason != tc.reason || tc.got.Status != tc.status || tc.got.Message == "" {
			t.Errorf("condition %+v, want %s=%s reason %s with a message", tc.got, tc.typ, tc.status, tc.reason)
		}
	}
}

// served is rec with a ClusterIP and one ready pod whose endpoint ports
// are the record's ports at target port +1000 (headless imports use them).
func served(cluster string, age int, mods ...func(*ExportRecord)) ExportRecord {
	r := rec(cluster, age, mods...)
	r.ClusterIPs = []string{"10.96.0." + cluster[1:]}
	g := causewayv1alpha1.RecordEndpoints{AddressType: "IPv4",
		Backends: []causewayv1alpha1.RecordBackend{{Address: "10.244.0." + cluster[1:], Ready: true, Serving: true}}}
	for _, p := range r.Ports {
		g.Ports = append(g.Ports, causewayv1alpha1.RecordEndpointPort{Name: p.Name, Port: p.Port + 1000})
	}
	r.Endpoints = []causewayv1alpha1.RecordEndpoints{g}
	return r
}

// renderedPorts merges records, renders the import's slices as seen from
// c1 and returns "<address> <port>/<protocol>/<number>,..." per endpoint,
// sorted.
func renderedPorts(records []ExportRecord) []string {
	m := Merge(records)
	imp := BuildServiceImport(m, "kubecon", "whereami", nil)
	var srcs []SourceEndpoints
	for _, r := range records {
		srcs = append(srcs, m.Source(r, r.ClusterID == "c1"))
	}
	var out []string
	for _, s := range RenderEndpointSlices(RenderInput{Import: imp, LocalClusterID: "c1", Sources: srcs}) {
		var ps []string
		for _, p := range s.Ports {
			ps = append(ps, fmt.Sprintf("%s/%s/%d", *p.Name, *p.Protocol, *p.Port))
		}
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses[0]+" "+strings.Join(ps, ","))
		}
	}
	slices.Sort(out)
	return out
}

// TestMergeLosersServeNoContestedPort: a cluster whose definition of a
// port lost the conflict gets none of the VIP's traffic for it — not at
// its own number, not through a same-named port — while the ports it
// does share are still served; a cluster that lost every port is not
// rendered at all.
func TestMergeLosersServeNoContestedPort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		records []ExportRecord
		want    []string
	}{
		{
			name: "same name, other number",
			records: []ExportRecord{
				served("c1", 0, ports(port("http", "TCP", 80), port("metrics", "TCP", 9090))),
				served("c2", 1, ports(port("http", "TCP", 8080), port("metrics", "TCP", 9090))),
			},
			want: []string{"10.96.0.1 http/TCP/80,metrics/TCP/9090", "10.96.0.2 metrics/TCP/9090"},
		},
		{
			name: "same name, other protocol",
			records: []ExportRecord{
				served("c1", 0, ports(port("dns", "UDP", 53))),
				served("c2", 1, ports(port("dns", "TCP", 53))),
			},
			want: []string{"10.96.0.1 dns/UDP/53"},
		},
		{
			name: "same number, other name",
			records: []ExportRecord{
				served("c1", 0, ports(port("http", "TCP", 80))),
				served("c2", 1, ports(port("web", "TCP", 80))),
			},
			want: []string{"10.96.0.1 http/TCP/80"},
		},
		{
			name: "other appProtocol",
			records: []ExportRecord{
				served("c1", 0, ports(causewayv1alpha1.RecordPort{Name: "web", Protocol: "TCP", Port: 443, AppProtocol: ptrTo("https")})),
				served("c2", 1, ports(causewayv1alpha1.RecordPort{Name: "web", Protocol: "TCP", Port: 443})),
			},
			want: []string{"10.96.0.1 web/TCP/443"},
		},
		{
			name: "differing port sets: each port by the exports defining it",
			records: []ExportRecord{
				served("c1", 0, ports(port("http", "TCP", 80))),
				served("c2", 1, ports(port("http", "TCP", 80), port("metrics", "TCP", 9090))),
			},
			want: []string{"10.96.0.1 http/TCP/80", "10.96.0.2 http/TCP/80,metrics/TCP/9090"},
		},
		{
			name: "headless: the loser's pods lack the port",
			records: []ExportRecord{
				served("c1", 0, headless, ports(port("http", "TCP", 80), port("grpc", "TCP", 9000))),
				served("c2", 1, headless, ports(port("http", "TCP", 8080), port("grpc", "TCP", 9000))),
			},
			want: []string{"10.244.0.1 http/TCP/1080,grpc/TCP/10000", "10.244.0.2 grpc/TCP/10000"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := renderedPorts(tc.records)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rendered\n got %q\nwant %q", got, tc.want)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range 20 {
				shuffled := slices.Clone(tc.records)
				rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
				if again := renderedPorts(shuffled); !reflect.DeepEqual(again, got) {
					t.Fatalf("permutation %d renders %q, want %q", i, again, got)
				}
			}
		})
	}
}
