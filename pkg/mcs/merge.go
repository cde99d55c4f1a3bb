package mcs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// defaultClientIPTimeout is the Kubernetes default of
// sessionAffinityConfig.clientIP.timeoutSeconds.
const defaultClientIPTimeout int32 = 10800

// maxConditionMessage is the API limit of metav1.Condition.Message.
const maxConditionMessage = 32768

// MergeResult is the multi-cluster service derived from every cluster's
// export of one Service.
type MergeResult struct {
	// Spec is the ServiceImport spec; IPs is left empty (the clusterset
	// VIP comes from the VIP allocator).
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the oldest export's exportedLabels and
	// exportedAnnotations (nil when empty), for the ServiceImport's
	// metadata.
	Labels      map[string]string
	Annotations map[string]string
	// Clusters is the ServiceImport's status.clusters, sorted.
	Clusters []mcsv1beta1.ClusterStatus
	// Oldest is the cluster whose export won every contested property.
	Oldest string
	// Exports has one entry per exporting cluster, sorted by cluster ID.
	Exports []ExportStatus
}

// ExportStatus is the outcome of the merge for one cluster's export.
type ExportStatus struct {
	ClusterID string
	// Conflict is the ServiceExport's Conflict condition, without
	// LastTransitionTime and ObservedGeneration (the controller sets them).
	Conflict metav1.Condition
}

// Conflict returns the Conflict condition of clusterID's export.
func (m MergeResult) Conflict(clusterID string) (metav1.Condition, bool) {
	for _, e := range m.Exports {
		if e.ClusterID == clusterID {
			return e.Conflict, true
		}
	}
	return metav1.Condition{}, false
}

// reasonOrder is the order in which combined reasons are listed (the
// order mcs-api documents them in).
var reasonOrder = []mcsv1beta1.ServiceExportConditionReason{
	mcsv1beta1.ServiceExportReasonPortConflict,
	mcsv1beta1.ServiceExportReasonTypeConflict,
	mcsv1beta1.ServiceExportReasonSessionAffinityConflict,
	mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict,
	mcsv1beta1.ServiceExportReasonAnnotationsConflict,
	mcsv1beta1.ServiceExportReasonLabelsConflict,
	mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict,
	mcsv1beta1.ServiceExportReasonTrafficDistributionConflict,
	mcsv1beta1.ServiceExportReasonIPFamilyConflict,
}

// issue is one contested property: who is involved and what was decided.
type issue struct {
	reason   mcsv1beta1.ServiceExportConditionReason
	message  string
	involved map[string]bool
}

// Merge derives the ServiceImport of one Service from the records of all
// clusters exporting it, following KEP-1645:
//
//   - Precedence goes to the oldest export (ExportCreationTimestamp), ties
//     broken by the smaller cluster ID, so the result does not depend on
//     the order of records. Importers (pkg/mcs/controller) set it to the
//     broker's metadata.creationTimestamp of the record object, which the
//     broker API server assigns and no member can choose: a remote's own
//     exportCreationTimestamp is not trusted.
//   - Ports are the union of all exports' ports, matched first by name,
//     then by protocol and port. A port whose definition clashes with one
//     already taken from an older export is left out (PortConflict on the
//     exports defining it), and the losing export serves no traffic for
//     it (MergeResult.Source). Port sets that differ are a PortConflict
//     on every export.
//   - Type, session affinity (and its config), internal traffic policy,
//     traffic distribution and IP families come from the oldest export.
//     Session affinity, traffic policy and distribution are not compared
//     for a Headless import, which has no proxying.
//   - exportedLabels/exportedAnnotations are the oldest export's, whole;
//     another export's differing map is a conflict on every export.
//
// Every export involved in a conflict gets Conflict=True with the mcs-api
// reason(s) (comma-separated when several) and a message naming the
// clusters; all others get Conflict=False, reason NoConflicts. For a
// property every export has (type, affinity, labels, the port set, ...)
// all exports are involved; for one port's definition only the exports
// that define it.
//
// Records must come from distinct clusters; of duplicates, only the oldest
// is used. No records give the zero MergeResult.
func Merge(records []ExportRecord) MergeResult {
	recs := sortedRecords(records)
	if len(recs) == 0 {
		return MergeResult{}
	}
	oldest := recs[0]
	var issues []issue
	add := func(is *issue) {
		if is != nil {
			issues = append(issues, *is)
		}
	}

	spec := mcsv1beta1.ServiceImportSpec{
		Type:       oldest.Type,
		IPFamilies: slices.Clone(oldest.IPFamilies),
	}
	add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonTypeConflict, "type",
		func(r ExportRecord) string { return string(r.Type) }, nil))

	spec.SessionAffinity = corev1.ServiceAffinityNone
	if spec.Type == mcsv1beta1.ClusterSetIP {
		spec.SessionAffinity = affinity(oldest)
		if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			t := clientIPTimeout(oldest)
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
		}
		spec.InternalTrafficPolicy = clonePtr(oldest.InternalTrafficPolicy)
		spec.TrafficDistribution = clonePtr(oldest.TrafficDistribution)

		add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonSessionAffinityConflict, "sessionAffinity",
			func(r ExportRecord) string { return string(affinity(r)) }, nil))
		if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict, "sessionAffinityConfig.clientIP.timeoutSeconds",
				func(r ExportRecord) string { return fmt.Sprint(clientIPTimeout(r)) },
				func(r ExportRecord) bool { return affinity(r) == corev1.ServiceAffinityClientIP }))
		}
		add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, "internalTrafficPolicy",
			func(r ExportRecord) string {
				if r.InternalTrafficPolicy == nil {
					return string(corev1.ServiceInternalTrafficPolicyCluster)
				}
				return string(*r.InternalTrafficPolicy)
			}, nil))
		add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonTrafficDistributionConflict, "trafficDistribution",
			func(r ExportRecord) string {
				if r.TrafficDistribution == nil {
					return ""
				}
				return *r.TrafficDistribution
			}, nil))
	}
	add(ipFamilyConflict(recs))

	var portIssues []issue
	spec.Ports, portIssues = mergePorts(recs)
	issues = append(issues, portIssues...)

	res := MergeResult{Spec: spec, Oldest: oldest.ClusterID}
	res.Labels = cloneNonEmpty(oldest.ExportedLabels)
	add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonLabelsConflict, "exportedLabels",
		func(r ExportRecord) string { return labels.Set(r.ExportedLabels).String() }, nil))
	res.Annotations = cloneNonEmpty(oldest.ExportedAnnotations)
	add(scalarConflict(recs, mcsv1beta1.ServiceExportReasonAnnotationsConflict, "exportedAnnotations",
		func(r ExportRecord) string { return labels.Set(r.ExportedAnnotations).String() }, nil))

	byCluster := slices.Clone(recs)
	slices.SortFunc(byCluster, func(a, b ExportRecord) int { return cmp.Compare(a.ClusterID, b.ClusterID) })
	for _, r := range byCluster {
		res.Clusters = append(res.Clusters, mcsv1beta1.ClusterStatus{Cluster: r.ClusterID})
		res.Exports = append(res.Exports, ExportStatus{ClusterID: r.ClusterID, Conflict: conflictCondition(r.ClusterID, issues)})
	}
	return res
}

// sortedRecords returns the records oldest first (ties: smaller cluster
// ID), keeping only the oldest record of a cluster.
func sortedRecords(records []ExportRecord) []ExportRecord {
	recs := slices.Clone(records)
	slices.SortFunc(recs, func(a, b ExportRecord) int {
		if c := a.ExportCreationTimestamp.Time.Compare(b.ExportCreationTimestamp.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ClusterID, b.ClusterID); c != 0 {
			return c
		}
		// Same cluster and time: only one survives; make the choice
		// independent of input order.
		return cmp.Compare(canonical(a), canonical(b))
	})
	seen := map[string]bool{}
	out := recs[:0]
	for _, r := range recs {
		if seen[r.ClusterID] {
			continue
		}
		seen[r.ClusterID] = true
		out = append(out, r)
	}
	return out
}

// scalarConflict compares one property of every record (those for which
// applies returns true; all when applies is nil) with the oldest record's.
func scalarConflict(recs []ExportRecord, reason mcsv1beta1.ServiceExportConditionReason, field string,
	value func(ExportRecord) string, applies func(ExportRecord) bool) *issue {
	want := value(recs[0])
	involved := map[string]bool{recs[0].ClusterID: true}
	var disagree []string
	n := 1
	for _, r := range recs[1:] {
		if applies != nil && !applies(r) {
			continue
		}
		n++
		involved[r.ClusterID] = true
		if v := value(r); v != want {
			disagree = append(disagree, fmt.Sprintf("%s (%q)", r.ClusterID, v))
		}
	}
	if len(disagree) == 0 {
		return nil
	}
	return &issue{
		reason: reason,
		message: fmt.Sprintf("conflicting %s: using %q from the oldest export, in cluster %s; %d of %d clusters disagree: %s",
			field, want, recs[0].ClusterID, len(disagree), n, strings.Join(disagree, ", ")),
		involved: involved,
	}
}

// ipFamilyConflict flags exports that cannot serve every IP family of the
// oldest export: through them, traffic of the missing family would reach
// only some of the backends. Exports without IP families are not compared.
func ipFamilyConflict(recs []ExportRecord) *issue {
	want := recs[0].IPFamilies
	if len(want) == 0 {
		return nil
	}
	involved := map[string]bool{recs[0].ClusterID: true}
	var disagree []string
	for _, r := range recs[1:] {
		if len(r.IPFamilies) == 0 {
			continue
		}
		involved[r.ClusterID] = true
		for _, f := range want {
			if !slices.Contains(r.IPFamilies, f) {
				disagree = append(disagree, fmt.Sprintf("%s (%v)", r.ClusterID, r.IPFamilies))
				break
			}
		}
	}
	if len(disagree) == 0 {
		return nil
	}
	return &issue{
		reason: mcsv1beta1.ServiceExportReasonIPFamilyConflict,
		message: fmt.Sprintf("conflicting ipFamilies: using %v from the oldest export, in cluster %s; lacking one of them: %s",
			want, recs[0].ClusterID, strings.Join(disagree, ", ")),
		involved: involved,
	}
}

// mergedPort is a port of the import, the cluster it was taken from, and
// the other exports that define it the same (served) or differently
// (clashes, losers).
type mergedPort struct {
	port    causewayv1alpha1.RecordPort
	from    string
	served  []string // cluster IDs, from first
	clashes []string // "<cluster> (<definition>)"
	losers  []string // cluster IDs
}

// mergePorts returns the union of the records' ports (oldest first), one
// issue per port whose definition clashed, and one per port that some
// exports do not define at all (differing port sets: every export is
// involved).
func mergePorts(recs []ExportRecord) ([]mcsv1beta1.ServicePort, []issue) {
	var merged []*mergedPort
	for _, r := range recs {
		for _, p := range r.Ports {
			var hit *mergedPort
			for _, m := range merged {
				if m.port.Name == p.Name {
					hit = m
					break
				}
			}
			if hit == nil {
				for _, m := range merged {
					if m.port.Protocol == p.Protocol && m.port.Port == p.Port {
						hit = m
						break
					}
				}
			}
			switch {
			case hit == nil:
				merged = append(merged, &mergedPort{port: p, from: r.ClusterID, served: []string{r.ClusterID}})
			case samePort(hit.port, p):
				hit.served = append(hit.served, r.ClusterID)
			default:
				hit.clashes = append(hit.clashes, fmt.Sprintf("%s (%s)", r.ClusterID, portString(p)))
				hit.losers = append(hit.losers, r.ClusterID)
			}
		}
	}
	all := map[string]bool{}
	for _, r := range recs {
		all[r.ClusterID] = true
	}
	ports := make([]mcsv1beta1.ServicePort, 0, len(merged))
	var issues []issue
	for _, m := range merged {
		ports = append(ports, mcsv1beta1.ServicePort{
			Name:        m.port.Name,
			Protocol:    m.port.Protocol,
			Port:        m.port.Port,
			AppProtocol: clonePtr(m.port.AppProtocol),
		})
		if len(m.clashes) > 0 {
			involved := map[string]bool{m.from: true}
			for _, c := range m.losers {
				involved[c] = true
			}
			issues = append(issues, issue{
				reason: mcsv1beta1.ServiceExportReasonPortConflict,
				message: fmt.Sprintf("conflicting port %s: using it from the oldest export, in cluster %s; not served by: %s",
					portString(m.port), m.from, strings.Join(m.clashes, ", ")),
				involved: involved,
			})
		}
	}
	lacking := map[string][]string{} // cluster -> ports it does not export
	for _, m := range merged {
		for _, r := range recs {
			if !slices.Contains(m.served, r.ClusterID) && !slices.Contains(m.losers, r.ClusterID) {
				lacking[r.ClusterID] = append(lacking[r.ClusterID], portString(m.port))
			}
		}
	}
	if len(lacking) > 0 {
		var parts []string
		for _, r := range recs {
			if l := lacking[r.ClusterID]; l != nil {
				parts = append(parts, fmt.Sprintf("%s lacks %s", r.ClusterID, strings.Join(l, ", ")))
			}
		}
		issues = append(issues, issue{
			reason:   mcsv1beta1.ServiceExportReasonPortConflict,
			message:  "differing port sets: the import has the union, each port served only by the exports defining it; " + strings.Join(parts, "; "),
			involved: all,
		})
	}
	return ports, issues
}

func samePort(a, b causewayv1alpha1.RecordPort) bool {
	return a.Name == b.Name && a.Protocol == b.Protocol && a.Port == b.Port && deref(a.AppProtocol) == deref(b.AppProtocol)
}

func portString(p causewayv1alpha1.RecordPort) string {
	s := fmt.Sprintf("%q %s/%d", p.Name, p.Protocol, p.Port)
	if ap := deref(p.AppProtocol); ap != "" {
		s += " appProtocol " + ap
	}
	return s
}

// conflictCondition is the Conflict condition of one cluster's export.
func conflictCondition(clusterID string, issues []issue) metav1.Condition {
	has := map[mcsv1beta1.ServiceExportConditionReason]bool{}
	var msgs []string
	for _, is := range issues {
		if is.involved[clusterID] {
			has[is.reason] = true
			msgs = append(msgs, is.message)
		}
	}
	if len(msgs) == 0 {
		return metav1.Condition{
			Type:    string(mcsv1beta1.ServiceExportConditionConflict),
			Status:  metav1.ConditionFalse,
			Reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			Message: "no conflicting properties among the exports of this service",
		}
	}
	var reasons []string
	for _, r := range reasonOrder {
		if has[r] {
			reasons = append(reasons, string(r))
		}
	}
	msg := strings.Join(msgs, "; ")
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage-3] + "..."
	}
	return metav1.Condition{
		Type:    string(mcsv1beta1.ServiceExportConditionConflict),
		Status:  metav1.ConditionTrue,
		Reason:  strings.Join(reasons, ","),
		Message: msg,
	}
}

func affinity(r ExportRecord) corev1.ServiceAffinity {
	if r.SessionAffinity == "" {
		return corev1.ServiceAffinityNone
	}
	return r.SessionAffinity
}

func clientIPTimeout(r ExportRecord) int32 {
	if c := r.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		return *c.ClientIP.TimeoutSeconds
	}
	return defaultClientIPTimeout
}

// canonical is a deterministic encoding of v (no pointer addresses; map
// keys sorted).
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(err)
	}
	return string(b)
}

func cloneNonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
