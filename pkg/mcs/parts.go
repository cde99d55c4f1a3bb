package mcs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// MaxRecordItems bounds the endpoints of one record object (head or
// part): its backends plus its groups' ports (each group piece repeats
// its group's ports). No item is more than 600 bytes of JSON with every
// string at its schema maximum, so the endpoints of an object stay under
// 600 KiB, and the whole object (a head's definition adds at most ≈ 320
// KiB, exported annotations included) under 1 MiB, below etcd's 1.5 MiB
// request limit. Typical backends (no node name or zone) are ≈ 60 bytes.
const MaxRecordItems = 1000

// Aggregate sets r's ReadyEndpoints and ServingEndpoints from its
// endpoints (distinct addresses of the address type that has most, so a
// dual-stack pod counts once; ready means ready and not terminating,
// serving means serving or ready, so ReadyEndpoints ≤ ServingEndpoints) and,
// for a ClusterSetIP record, drops the endpoints: importers of a
// ClusterSetIP export reach its ClusterIPs and need only the counts.
func Aggregate(r *ExportRecord) {
	ready := map[string]map[string]bool{}   // address type -> ready addresses
	serving := map[string]map[string]bool{} // address type -> serving addresses
	add := func(m map[string]map[string]bool, family, addr string) {
		if m[family] == nil {
			m[family] = map[string]bool{}
		}
		m[family][addr] = true
	}
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			if b.Ready && !b.Terminating {
				add(ready, g.AddressType, b.Address)
				add(serving, g.AddressType, b.Address) // a ready endpoint serves
			} else if b.Serving {
				add(serving, g.AddressType, b.Address)
			}
		}
	}
	r.ReadyEndpoints, r.ServingEndpoints = 0, 0
	for _, addrs := range ready {
		r.ReadyEndpoints = max(r.ReadyEndpoints, int32(len(addrs)))
	}
	for _, addrs := range serving {
		r.ServingEndpoints = max(r.ServingEndpoints, int32(len(addrs)))
	}
	if r.Type == mcsv1beta1.ClusterSetIP {
		r.Endpoints = nil
	}
}

// RecordPartName is the broker object name of part index (≥ 1) of the
// record of a Service split at revision: "<namespace>.<name>.<revision>-<index>".
// It has two dots, a record name (RecordName) one, so no Service's record
// and no other Service's part can have it.
func RecordPartName(namespace, name, revision string, index int) string {
	return RecordName(namespace, name) + "." + revision + "-" + strconv.Itoa(index)
}

// SplitRecord returns the objects that carry r in the broker: r itself
// when its endpoints have at most maxItems items (backends plus each
// group's ports); otherwise the head (r with the first endpoints) and
// parts with the next ones, at most maxItems items each (at least one
// backend), all with Part set (index, count, and the revision: a hash of
// all endpoints, so an unchanged record splits into the same objects). A
// part carries r's identity (cluster, Service, export time, type) and
// endpoints only. Groups are kept in order and cut where a bound falls.
// maxItems ≤ 0 means MaxRecordItems.
func SplitRecord(r ExportRecord, maxItems int) []ExportRecord {
	if maxItems <= 0 {
		maxItems = MaxRecordItems
	}
	var chunks [][]causewayv1alpha1.RecordEndpoints
	var cur []causewayv1alpha1.RecordEndpoints
	n := 0 // items in cur
	for _, g := range r.Endpoints {
		for rest := g.Backends; len(rest) > 0; {
			room := maxItems - n - len(g.Ports)
			if room < 1 && n > 0 {
				chunks, cur, n = append(chunks, cur), nil, 0
				continue
			}
			take := min(len(rest), max(room, 1))
			piece := g
			piece.Backends = rest[:take:take]
			cur = append(cur, piece)
			rest, n = rest[take:], n+len(g.Ports)+take
		}
	}
	if len(chunks) == 0 {
		r.Part = nil
		return []ExportRecord{r}
	}
	chunks = append(chunks, cur)
	rev := endpointsRevision(r.Endpoints)
	out := make([]ExportRecord, len(chunks))
	for i, eps := range chunks {
		p := ExportRecord{
			ClusterID: r.ClusterID, ServiceNamespace: r.ServiceNamespace, ServiceName: r.ServiceName,
			ExportCreationTimestamp: r.ExportCreationTimestamp, Type: r.Type,
		}
		if i == 0 {
			p = r
		}
		p.Endpoints = eps
		p.Part = &causewayv1alpha1.RecordPart{Index: int32(i), Count: int32(len(chunks)), Revision: rev}
		out[i] = p
	}
	return out
}

// endpointsRevision is a short hash of a record's endpoints.
func endpointsRevision(eps []causewayv1alpha1.RecordEndpoints) string {
	b, err := json.Marshal(eps)
	if err != nil {
		panic(fmt.Sprintf("marshal record endpoints: %v", err)) // plain strings, ints and bools
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:5])
}

// IncompleteRecordError says that a split record's head names parts that
// are not (yet, or no longer) there.
type IncompleteRecordError struct {
	ClusterID, Revision string
	// Missing is the first index of the set that is not there.
	Missing, Count int
}

func (e *IncompleteRecordError) Error() string {
	return fmt.Sprintf("record of cluster %s is incomplete: part %d of %d (revision %s) is missing", e.ClusterID, e.Missing, e.Count, e.Revision)
}

// JoinRecord is the inverse of SplitRecord: head with the endpoints of
// its parts appended in index order, Part unset. objects are the
// exporting cluster's record objects of the Service by object name; the
// parts are those named RecordPartName(…, head's revision, index) whose
// Part agrees with the head (index, count, revision), and anything else
// is ignored. A head without Part is returned as it is. When a part of
// the set is missing it returns an *IncompleteRecordError: an importer
// never uses a partial set.
func JoinRecord(head ExportRecord, objects map[string]ExportRecord) (ExportRecord, error) {
	if head.Part == nil {
		return head, nil
	}
	want := *head.Part
	out := head
	out.Part = nil
	out.Endpoints = append([]causewayv1alpha1.RecordEndpoints(nil), head.Endpoints...)
	for i := 1; i < int(want.Count); i++ {
		p, ok := objects[RecordPartName(head.ServiceNamespace, head.ServiceName, want.Revision, i)]
		if !ok || p.Part == nil || *p.Part != (causewayv1alpha1.RecordPart{Index: int32(i), Count: want.Count, Revision: want.Revision}) {
			return ExportRecord{}, &IncompleteRecordError{ClusterID: head.ClusterID, Revision: want.Revision, Missing: i, Count: int(want.Count)}
		}
		out.Endpoints = append(out.Endpoints, p.Endpoints...)
	}
	return out, nil
}
