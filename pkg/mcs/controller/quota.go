package controller

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// recordQuotas decides, for each remote cluster (broker namespace), which
// of its ServiceExportRecord objects this importer takes — and keeps the
// specs of: its oldest, by the broker's creation time and then name, as
// long as they number at most Quotas.Records and carry at most
// Quotas.Backends backends together (addrpolicy.RecordBackends); from the
// first that does not fit on, none. So a cluster flooding the broker
// loses its newest records, every importer (seeing the same objects)
// takes the same ones, and what a record cost never depends on the order
// the watch delivered the objects in.
//
// Each change costs O(1) when the object is newer than every taken one
// (new objects are: the broker stamps them), otherwise up to O(objects of
// the cluster).
type recordQuotas struct {
	limits addrpolicy.Quotas

	mu sync.Mutex
	ns map[string]*quotaView
}

func newRecordQuotas(limits addrpolicy.Quotas) *recordQuotas {
	return &recordQuotas{limits: limits, ns: map[string]*quotaView{}}
}

// quotaEntry is one record object as its quota counts it.
type quotaEntry struct {
	created  time.Time
	name     string
	backends int
}

func compareEntries(a, b quotaEntry) int {
	return cmp.Or(a.created.Compare(b.created), strings.Compare(a.name, b.name))
}

// quotaView is one cluster's record objects in quota order.
type quotaView struct {
	entries []quotaEntry         // by created, then name
	created map[string]time.Time // name -> created
	taken   int                  // entries[:taken] are taken
	sum     int                  // their backends
}

// index is the position of e (present or not) in v.entries.
func (v *quotaView) index(e quotaEntry) (int, bool) {
	return slices.BinarySearchFunc(v.entries, e, compareEntries)
}

// sumBefore is the backends of entries[:p], p ≤ v.taken.
func (v *quotaView) sumBefore(p int) int {
	s := v.sum
	for _, e := range v.entries[p:v.taken] {
		s -= e.backends
	}
	return s
}

// walk extends the taken prefix from entries[:from] (taken, sum
// backends) as far as the limits allow.
func (v *quotaView) walk(from, sum int, lim addrpolicy.Quotas) {
	i := from
	for ; i < len(v.entries); i++ {
		if i+1 > lim.Records || sum+v.entries[i].backends > lim.Backends {
			break
		}
		sum += v.entries[i].backends
	}
	v.taken, v.sum = i, sum
}

// flips appends to out the names of the entries other than skip whose
// being taken differs between the boundary before (in the current index
// space) and v.taken.
func (v *quotaView) flips(before int, skip string, out []string) []string {
	lo, hi := min(before, v.taken), max(before, v.taken)
	for _, e := range v.entries[lo:min(hi, len(v.entries))] {
		if e.name != skip {
			out = append(out, e.name)
		}
	}
	return out
}

// insert adds e (not present) and returns the other entries whose being
// taken changed.
func (v *quotaView) insert(e quotaEntry, lim addrpolicy.Quotas, out []string) []string {
	p, _ := v.index(e)
	if p > v.taken {
		v.entries = slices.Insert(v.entries, p, e)
		v.created[e.name] = e.created
		return out // behind the first that does not fit: changes nothing
	}
	sum := v.sumBefore(p)
	before := v.taken + 1 // the taken ones after e move up by one
	v.entries = slices.Insert(v.entries, p, e)
	v.created[e.name] = e.created
	v.walk(p, sum, lim)
	return v.flips(before, e.name, out)
}

// delete removes the entry named name, if any, and returns the other
// entries whose being taken changed.
func (v *quotaView) delete(name string, lim addrpolicy.Quotas, out []string) []string {
	created, ok := v.created[name]
	if !ok {
		return out
	}
	p, _ := v.index(quotaEntry{created: created, name: name})
	e := v.entries[p]
	v.entries = slices.Delete(v.entries, p, p+1)
	delete(v.created, name)
	switch {
	case p > v.taken:
		return out
	case p == v.taken: // the first that did not fit: the next may
		v.walk(p, v.sum, lim)
		return v.flips(p, name, out)
	}
	before := v.taken - 1
	v.sum -= e.backends
	v.taken = before
	v.walk(before, v.sum, lim)
	return v.flips(before, name, out)
}

// set records object name of broker namespace ns with its creation time
// and backends, and returns whether it is taken and the names of the
// cluster's other objects whose being taken changed.
func (q *recordQuotas) set(ns, name string, created time.Time, backends int) (bool, []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.ns[ns]
	if v == nil {
		v = &quotaView{created: map[string]time.Time{}}
		q.ns[ns] = v
	}
	e := quotaEntry{created: created, name: name, backends: backends}
	var out []string
	if have, ok := v.created[name]; ok {
		p, _ := v.index(quotaEntry{created: have, name: name})
		if v.entries[p] == e {
			return p < v.taken, nil
		}
		out = v.delete(name, q.limits, out)
	}
	out = v.insert(e, q.limits, out)
	p, _ := v.index(e)
	// An update is a delete and an insert: an object that flipped in both
	// did not change.
	slices.Sort(out)
	net := out[:0]
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && out[j] == out[i] {
			j++
		}
		if (j-i)%2 == 1 {
			net = append(net, out[i])
		}
		i = j
	}
	return p < v.taken, net
}

// remove forgets object name of namespace ns and returns the names of the
// cluster's other objects whose being taken changed.
func (q *recordQuotas) remove(ns, name string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.ns[ns]
	if v == nil {
		return nil
	}
	out := v.delete(name, q.limits, nil)
	if len(v.entries) == 0 {
		delete(q.ns, ns)
	}
	return out
}

// taken tells whether object name of namespace ns is taken.
func (q *recordQuotas) taken(ns, name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.takenLocked(ns, name)
}

// keep makes body hold spec if object name of namespace ns is taken, and
// nothing otherwise (spec nil: it only empties a body not taken), in step
// with the changes of the quota.
func (q *recordQuotas) keep(ns, name string, body *recordBody, spec *mcs.ExportRecord) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !q.takenLocked(ns, name):
		body.spec.Store(nil)
	case spec != nil:
		body.spec.Store(spec)
	}
}

func (q *recordQuotas) takenLocked(ns, name string) bool {
	v := q.ns[ns]
	if v == nil {
		return false
	}
	created, ok := v.created[name]
	if !ok {
		return false
	}
	p, _ := v.index(quotaEntry{created: created, name: name})
	return p < v.taken
}

// wouldTake tells whether the object would be taken if set now; it
// changes nothing.
func (q *recordQuotas) wouldTake(ns, name string, created time.Time, backends int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.ns[ns]
	if v == nil {
		return 1 <= q.limits.Records && backends <= q.limits.Backends
	}
	p, _ := v.index(quotaEntry{created: created, name: name})
	if p > v.taken {
		return false // behind the first that does not fit
	}
	return p+1 <= q.limits.Records && v.sumBefore(p)+backends <= q.limits.Backends
}

// usage is the objects of namespace ns and how many of them are taken.
func (q *recordQuotas) usage(ns string) (objects, taken int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if v := q.ns[ns]; v != nil {
		return len(v.entries), v.taken
	}
	return 0, 0
}

// observeRecord follows every change of the broker's records (the record
// cache's plaincache Config.Observe, from the first list on, elected or
// not): it keeps the quotas, empties the body of each remote record the
// quota no longer takes (its spec's memory is freed), and queues the
// Service of every record whose being taken changed.
func (c *Controller) observeRecord(key types.NamespacedName, _, new *cachedRecord) {
	if _, ok := broker.ClusterIDFromNamespace(key.Namespace); !ok || key.Namespace == c.ownNamespace() {
		return
	}
	var flipped []string
	if new == nil {
		flipped = c.quotas.remove(key.Namespace, key.Name)
	} else {
		_, flipped = c.quotas.set(key.Namespace, key.Name, new.created.Time, new.backends)
		if new.body != nil {
			c.quotas.keep(key.Namespace, key.Name, new.body, nil)
		}
	}
	for _, name := range flipped {
		v, ok := c.brokerStores.records.Get(types.NamespacedName{Namespace: key.Namespace, Name: name})
		if !ok {
			continue
		}
		if v.body != nil {
			c.quotas.keep(key.Namespace, name, v.body, nil)
		}
		c.requeue.add(v.service)
	}
	objects, taken := c.quotas.usage(key.Namespace)
	id, _ := broker.ClusterIDFromNamespace(key.Namespace)
	if objects == 0 {
		c.metrics.overQuota.DeleteLabelValues(id)
	} else {
		c.metrics.overQuota.WithLabelValues(id).Set(float64(objects - taken))
	}
	if objects == taken {
		c.mu.Lock()
		delete(c.quotaReported, id) // reported again when it goes over again
		c.mu.Unlock()
	}
}

// requeuer is a source of the controller that hands it Services to sync
// from outside its watches (once the controller runs, i.e. elected;
// before, it syncs every Service when it starts anyway).
type requeuer struct {
	q atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
}

func (r *requeuer) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.q.Store(&q)
	return nil
}

func (r *requeuer) add(key types.NamespacedName) {
	if q := r.q.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: key})
	}
}

// depth is the number of Services the controller's queue holds ready to
// sync (0 before the controller runs).
func (r *requeuer) depth() int {
	if q := r.q.Load(); q != nil {
		return (*q).Len()
	}
	return 0
}

// addAfter hands key to the controller after d.
func (r *requeuer) addAfter(key types.NamespacedName, d time.Duration) {
	if q := r.q.Load(); q != nil {
		(*q).AddAfter(reconcile.Request{NamespacedName: key}, d)
	}
}
