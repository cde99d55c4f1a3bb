package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube/plaincache"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// exportState is the outcome of the export half of a sync.
type exportState struct {
	export    *mcsv1beta1.ServiceExport // nil: not exported here
	record    *mcs.ExportRecord         // the published record, nil when none
	invalid   error                     // from mcs.NewExportRecord
	published bool
	writeErr  error
}

// sync brings one Service's export, import and export status up to date.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName) error {
	exp, err := c.syncExport(ctx, key)
	if err != nil {
		return err
	}
	if apierrors.IsConflict(exp.writeErr) {
		return exp.writeErr // the cache lags behind the broker: retry, do not report it
	}
	m, importErr := c.syncImport(ctx, key, exp)
	statusErr := c.syncExportStatus(ctx, exp, m, importErr)
	return errors.Join(exp.writeErr, importErr, statusErr)
}

// syncExport publishes (or withdraws) this cluster's record of key.
func (c *Controller) syncExport(ctx context.Context, key types.NamespacedName) (exportState, error) {
	var st exportState
	var se *mcsv1beta1.ServiceExport
	if v, ok := c.stores.exports.Get(key); ok {
		se = v.export(key)
	}
	st.export = se
	recKey := types.NamespacedName{Namespace: c.ownNamespace(), Name: mcs.RecordName(key.Namespace, key.Name)}
	have, published := c.brokerStores.records.Get(recKey)
	own := c.ownRecordParts(key)
	// The head goes first, so importers stop using the set before its
	// parts go. Before it, this cluster's VIP allocations of key: they
	// count only while it exports key, and released while its record still
	// stands, their addresses are free for the next exporter's claim
	// (which, walking the same candidates, takes the same address) rather
	// than held by an allocation that no longer counts.
	withdraw := func() {
		c.setExported(key, false)
		if published {
			if err := c.alloc.Release(ctx, key); err != nil {
				st.writeErr = fmt.Errorf("release VIPs of %s before withdrawing its record: %w", key, err)
				return
			}
			if err := c.bclient.Delete(ctx, have.object(recKey), client.Preconditions{UID: &have.uid}); err != nil && !apierrors.IsNotFound(err) {
				st.writeErr = fmt.Errorf("delete record %s: %w", recKey, err)
				return
			}
			c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "delete").Inc()
		}
		st.writeErr = c.deleteRecordParts(ctx, own, nil)
	}
	if se == nil {
		withdraw()
		return st, nil
	}
	var svc *corev1.Service
	if v, ok := c.stores.services.Get(key); ok {
		svc = v.service(key)
	}
	spec, invalid := mcs.NewExportRecord(c.cfg.ClusterID, se, svc)
	if invalid != nil {
		st.invalid = invalid
		withdraw()
		return st, nil
	}
	local := localSlices(c.stores.slices.Group(key.String()))
	spec.Endpoints = mcs.RecordEndpointsFromSlices(local)
	// Globalnet: the record carries the Service's global addresses once
	// the globalnet controller has allocated them; none while the pool is
	// exhausted or the cluster has no global CIDR.
	global, ok, err := c.globalAddresses(ctx, key)
	if err != nil {
		return st, err
	}
	if ok {
		mcs.SetGlobalAddresses(&spec, global)
	}
	mcs.Aggregate(&spec)
	st.record = &spec

	// A split record: its parts are written before the head that names
	// them, the parts of the head's previous revision deleted after it, so
	// an importer always finds a complete set (or, between a head update
	// and its watch event, the previous complete one).
	objs := mcs.SplitRecord(spec, mcs.MaxRecordItems)
	head := objs[0]
	if err := c.writeRecordParts(ctx, objs[1:], own); err != nil {
		st.writeErr = err
		return st, nil
	}
	switch {
	case !published:
		obj := &causewayv1alpha1.ServiceExportRecord{
			ObjectMeta: metav1.ObjectMeta{Namespace: recKey.Namespace, Name: recKey.Name},
			Spec:       head,
		}
		err := c.bclient.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			// The cache lags behind our own create: its age is the
			// broker's.
			err = c.breader.Get(ctx, recKey, obj)
		}
		if err != nil {
			st.writeErr = fmt.Errorf("create record %s: %w", recKey, err)
			return st, nil
		}
		c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "create").Inc()
		have.created = obj.CreationTimestamp
	case have.hash != mcs.ContentHash(head):
		upd := have.object(recKey)
		upd.Spec = head
		if err := c.bclient.Update(ctx, upd); err != nil {
			st.writeErr = fmt.Errorf("update record %s: %w", recKey, err)
			return st, nil
		}
		c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "update").Inc()
	}
	if err := c.deleteRecordParts(ctx, own, objs[1:]); err != nil {
		st.writeErr = err
		return st, nil
	}
	// Merged as every importer merges it: aged by the broker.
	st.record.ExportCreationTimestamp = have.created
	st.published = true
	c.setExported(key, true)
	return st, nil
}

// ownRecordParts returns this cluster's record parts of key in the
// broker cache (not the head), by name.
func (c *Controller) ownRecordParts(key types.NamespacedName) map[string]cachedRecord {
	out := map[string]cachedRecord{}
	for _, it := range c.brokerStores.records.Group(key.String()) {
		if it.Key.Namespace == c.ownNamespace() {
			out[it.Key.Name] = it.Value
		}
	}
	return out
}

// recordHeads returns the object named like the head of key's record in
// each cluster namespace of the broker cache (namespaces of other objects
// are skipped), and the other objects of key (the parts of split
// records).
func (c *Controller) recordHeads(key types.NamespacedName) (heads, parts []plaincache.Item[cachedRecord]) {
	name := mcs.RecordName(key.Namespace, key.Name)
	for _, ns := range c.brokerStores.records.Namespaces() {
		if _, ok := broker.ClusterIDFromNamespace(ns); !ok {
			continue
		}
		k := types.NamespacedName{Namespace: ns, Name: name}
		if v, ok := c.brokerStores.records.Get(k); ok {
			heads = append(heads, plaincache.Item[cachedRecord]{Key: k, Value: v})
		}
	}
	return heads, c.brokerStores.records.Group(key.String())
}

// writeRecordParts creates or updates the parts of a split record (none
// when it is one object). A part's name carries its revision, so an
// existing one differs only when edited by hand.
func (c *Controller) writeRecordParts(ctx context.Context, parts []mcs.ExportRecord, own map[string]cachedRecord) error {
	for _, p := range parts {
		name := mcs.RecordPartName(p.ServiceNamespace, p.ServiceName, p.Part.Revision, int(p.Part.Index))
		switch have, ok := own[name]; {
		case !ok:
			obj := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: c.ownNamespace(), Name: name}, Spec: p}
			if err := c.bclient.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create record part %s: %w", name, err)
			}
			c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "create").Inc()
		case have.hash != mcs.ContentHash(p):
			upd := have.object(types.NamespacedName{Namespace: c.ownNamespace(), Name: name})
			upd.Spec = p
			if err := c.bclient.Update(ctx, upd); err != nil {
				return fmt.Errorf("update record part %s: %w", name, err)
			}
			c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "update").Inc()
		}
	}
	return nil
}

// deleteRecordParts deletes the parts in own that are not in keep.
func (c *Controller) deleteRecordParts(ctx context.Context, own map[string]cachedRecord, keep []mcs.ExportRecord) error {
	kept := map[string]bool{}
	for _, p := range keep {
		kept[mcs.RecordPartName(p.ServiceNamespace, p.ServiceName, p.Part.Revision, int(p.Part.Index))] = true
	}
	var errs []error
	for name, r := range own {
		if kept[name] {
			continue
		}
		if err := c.bclient.Delete(ctx, r.object(types.NamespacedName{Namespace: c.ownNamespace(), Name: name}),
			client.Preconditions{UID: &r.uid}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete record part %s: %w", name, err))
			continue
		}
		c.metrics.apiWrites.WithLabelValues("ServiceExportRecord", "delete").Inc()
	}
	return errors.Join(errs...)
}

// refusal is a remote record that contributes nothing to the import:
// refused by addrpolicy.CheckRecord, an incomplete split record
// (mcs.ReasonIncompleteRecord), or over its cluster's quota
// (mcs.ReasonQuotaExceeded).
type refusal struct {
	clusterID string
	reason    string
	message   string
}

func (r refusal) String() string { return "cluster " + r.clusterID + ": " + r.detail() }

// detail is the refusal without its cluster: "<reason>: <message>".
func (r refusal) detail() string { return r.reason + ": " + r.message }

// records returns every cluster's record of key from the broker cache,
// split records joined (mcs.JoinRecord), with this cluster's replaced by
// what syncExport just published, and the remote records that contribute
// nothing (left out of the first list): incomplete sets, whose head names
// a part that is not there — an exporter writes the parts before the
// head that names them, so this is a part deleted by hand or a set that
// was never complete; records beyond their cluster's quota
// (recordQuotas); and those addrpolicy.CheckRecord refuses (a split
// record is checked joined, as it is merged). Such a cluster contributes
// nothing to the Service, and every other cluster's record is merged as
// if it did not exist. A
// record claiming a cluster other than its namespace's is ignored:
// identities can write only their own namespace, and this keeps one from
// speaking for another. exporters are the clusters with a record of key
// in the broker, contributing or not (this one while its record is
// published), with the broker's creation time of each one's record: whose
// VIP allocations of key count (mcs.VIPExporters). The error is a failed
// read of a record the cache holds no spec of (joinRemote).
func (c *Controller) records(ctx context.Context, key types.NamespacedName, exp exportState) (recs []mcs.ExportRecord, refused []refusal, exporters map[string]time.Time, err error) {
	headList, partList := c.recordHeads(key)
	// A remote cluster's objects, in its own namespace, of the Service it
	// names.
	remote := func(r plaincache.Item[cachedRecord]) (string, bool) {
		id, ok := broker.ClusterIDFromNamespace(r.Key.Namespace)
		return id, ok && id == r.Value.cluster && id != c.cfg.ClusterID && r.Value.service == key
	}
	heads := map[string]plaincache.Item[cachedRecord]{}            // cluster -> head
	parts := map[string]map[string]plaincache.Item[cachedRecord]{} // cluster -> object name -> part
	exporters = map[string]time.Time{}
	for _, r := range headList {
		if id, ok := remote(r); ok {
			heads[id] = r
			exporters[id] = r.Value.created.Time
		}
	}
	for _, r := range partList {
		if id, ok := remote(r); ok && r.Value.specPart != nil {
			if parts[id] == nil {
				parts[id] = map[string]plaincache.Item[cachedRecord]{}
			}
			parts[id][r.Key.Name] = r
		}
	}
	var pol *addrpolicy.Config
	for _, id := range slices.Sorted(maps.Keys(heads)) {
		spec, why, err := c.joinRemote(ctx, id, heads[id], parts[id])
		if err != nil {
			return nil, nil, nil, err
		}
		if why != nil {
			refused = append(refused, *why)
			continue
		}
		if pol == nil {
			pol = ptrTo(c.recordPolicy(ctx))
		}
		var re *addrpolicy.RecordError
		if err := addrpolicy.CheckRecord(*pol, &spec, c.reach(ctx, id).Claim(id)); errors.As(err, &re) {
			refused = append(refused, refusal{id, string(re.Reason), re.Message})
			continue
		}
		recs = append(recs, brokerAged(heads[id].Value.created, spec))
	}
	if exp.record != nil {
		recs = append(recs, *exp.record)
	}
	if exp.published {
		exporters[c.cfg.ClusterID] = exp.record.ExportCreationTimestamp.Time
	}
	slices.SortFunc(refused, func(a, b refusal) int { return strings.Compare(a.clusterID, b.clusterID) })
	return recs, refused, exporters, nil
}

// joinRemote returns cluster id's record of a Service, joined from its
// head and the parts the head names (mcs.JoinRecord), or why it
// contributes nothing: a part is missing (mcs.ReasonIncompleteRecord), or
// an object of the set lies beyond the cluster's quota
// (mcs.ReasonQuotaExceeded, recordQuotas). A spec the cache dropped while
// the quota did not take the object is read again from the broker API
// server (and cached again); only that read's failure is an error.
func (c *Controller) joinRemote(ctx context.Context, id string, head plaincache.Item[cachedRecord], parts map[string]plaincache.Item[cachedRecord]) (mcs.ExportRecord, *refusal, error) {
	idents := make(map[string]mcs.ExportRecord, len(parts))
	for name, p := range parts {
		idents[name] = p.Value.identity()
	}
	if _, err := mcs.JoinRecord(head.Value.identity(), idents); err != nil {
		return mcs.ExportRecord{}, &refusal{id, mcs.ReasonIncompleteRecord, err.Error()}, nil
	}
	set := []plaincache.Item[cachedRecord]{head}
	if p := head.Value.specPart; p != nil {
		for i := 1; i < int(p.Count); i++ {
			set = append(set, parts[mcs.RecordPartName(head.Value.service.Namespace, head.Value.service.Name, p.Revision, i)])
		}
	}
	ns := head.Key.Namespace
	for _, it := range set {
		if !c.quotas.taken(ns, it.Key.Name) {
			objects, taken := c.quotas.usage(ns)
			return mcs.ExportRecord{}, &refusal{id, mcs.ReasonQuotaExceeded, fmt.Sprintf(
				"record object %s is beyond the cluster's quota of %d record objects and %d backends, taken from its oldest (%d of its %d objects are taken)",
				it.Key.Name, c.cfg.Policy.Quotas.Records, c.cfg.Policy.Quotas.Backends, taken, objects)}, nil
		}
	}
	var headSpec mcs.ExportRecord
	specs := make(map[string]mcs.ExportRecord, len(set)-1)
	for i, it := range set {
		spec, ok := it.Value.remoteSpec()
		if !ok {
			var obj causewayv1alpha1.ServiceExportRecord
			switch err := c.breader.Get(ctx, it.Key, &obj); {
			case apierrors.IsNotFound(err):
				return mcs.ExportRecord{}, &refusal{id, mcs.ReasonIncompleteRecord, fmt.Sprintf("record object %s is gone", it.Key.Name)}, nil
			case err != nil:
				return mcs.ExportRecord{}, nil, fmt.Errorf("read record %s: %w", it.Key, err)
			}
			fetched := obj.Spec // not &obj.Spec, which would keep the whole object cached
			spec = &fetched
			if obj.UID == it.Value.uid && obj.ResourceVersion == it.Value.resourceVersion {
				c.quotas.keep(ns, it.Key.Name, it.Value.body, spec)
			}
		}
		if i == 0 {
			headSpec = *spec
		} else {
			specs[it.Key.Name] = *spec
		}
	}
	joined, err := mcs.JoinRecord(headSpec, specs)
	if err != nil {
		return mcs.ExportRecord{}, &refusal{id, mcs.ReasonIncompleteRecord, err.Error()}, nil
	}
	return joined, nil, nil
}

// vipExporters is the mcs.VIPExporters of key: the clusters with a record
// of key in the cache (known, from records), and for any other cluster
// the allocator asks about — the owner of an allocation of key the cache
// shows no record of: a member that does not export key, or a record the
// cache has not seen yet — the broker API server's word, asked once per
// cluster and sync. This cluster's own state is exact (known).
func (c *Controller) vipExporters(ctx context.Context, key types.NamespacedName, known map[string]time.Time) mcs.VIPExporters {
	asked := map[string]*time.Time{}
	return func(cluster string) (time.Time, bool) {
		if t, ok := known[cluster]; ok {
			return t, true
		}
		if cluster == c.cfg.ClusterID {
			return time.Time{}, false
		}
		if t, ok := asked[cluster]; ok {
			return ptrOr(t), t != nil
		}
		var rec causewayv1alpha1.ServiceExportRecord
		err := c.breader.Get(ctx, types.NamespacedName{Namespace: broker.Namespace(cluster), Name: mcs.RecordName(key.Namespace, key.Name)}, &rec)
		if err != nil || rec.DeletionTimestamp != nil || rec.Spec.ClusterID != cluster ||
			rec.Spec.ServiceNamespace != key.Namespace || rec.Spec.ServiceName != key.Name {
			asked[cluster] = nil
			return time.Time{}, false
		}
		asked[cluster] = &rec.CreationTimestamp.Time
		return rec.CreationTimestamp.Time, true
	}
}

func ptrOr(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// brokerAged is a remote record's (joined) spec as merged: its age is the
// creationTimestamp the broker API server gave its head object, not the
// exportCreationTimestamp the exporter wrote (which any member could set
// to the distant past to win every conflict; the broker's it cannot
// choose, only renew by deleting and recreating the record, which makes
// it younger).
func brokerAged(created metav1.Time, spec mcs.ExportRecord) mcs.ExportRecord {
	spec = *spec.DeepCopy()
	spec.ExportCreationTimestamp = created
	return spec
}

// syncImport writes or removes the ServiceImport and EndpointSlices of key
// here, and returns the merge (nil when nobody exports key).
func (c *Controller) syncImport(ctx context.Context, key types.NamespacedName, exp exportState) (*mcs.MergeResult, error) {
	recs, refused, exporters, err := c.records(ctx, key, exp)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		// Every record refused: nothing to import; the Events say why.
		c.eventRefused(ctx, key, nil, refused)
		return nil, c.removeImport(ctx, key)
	}
	m := mcs.Merge(recs)

	ns := &corev1.Namespace{}
	switch err := c.local.Get(ctx, types.NamespacedName{Name: key.Namespace}, ns); {
	case apierrors.IsNotFound(err):
		return &m, nil // KEP-1645: imported only where the namespace exists
	case err != nil:
		return &m, fmt.Errorf("get namespace: %w", err)
	}
	if ns.DeletionTimestamp != nil {
		return &m, nil
	}

	var vips []netip.Addr
	var vipErr error
	if m.Spec.Type == mcsv1beta1.ClusterSetIP {
		vips, vipErr = c.clustersetVIPs(ctx, key, m.Spec.IPFamilies, c.vipExporters(ctx, key, exporters))
	}
	if wait := c.vipPendingWait(key, len(vips) == 0 && errors.Is(vipErr, mcs.ErrVIPPending)); wait > 0 {
		c.requeue.addAfter(key, wait)
		return &m, nil
	}
	want := mcs.BuildServiceImport(m, key.Namespace, key.Name, vips)
	ready := metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), Status: metav1.ConditionTrue,
		Reason: string(mcsv1beta1.ServiceImportReasonReady), Message: "imported"}
	if vipErr != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "VIPUnavailable", vipErr.Error()
		switch {
		case errors.Is(vipErr, mcs.ErrVIPRangeExhausted):
			ready.Reason = "VIPRangeExhausted"
		case errors.Is(vipErr, mcs.ErrVIPPending):
			ready.Reason = "VIPPending"
		}
	}
	// Backends of every live cluster; a remote one's only where the tunnel
	// to it reaches them (else not ready, and the import says why).
	var sources []mcs.SourceEndpoints
	var unreachable []string
	for _, r := range recs {
		if !c.live.alive(r.ClusterID) {
			continue
		}
		local := r.ClusterID == c.cfg.ClusterID
		src := m.Source(r, local)
		if !local {
			var why string
			if src, why = mcs.Reachable(src, r, c.reach(ctx, r.ClusterID)); why != "" {
				unreachable = append(unreachable, why)
			}
		}
		sources = append(sources, src)
	}
	// No remote's claimed ready endpoints may draw (almost) every
	// connection of the VIP: addrpolicy bounds each against the others.
	weights := make(map[string]int, len(sources))
	for _, src := range sources {
		weights[src.ClusterID] = src.ReadyEndpoints
	}
	capped := addrpolicy.CapWeights(c.cfg.ClusterID, weights)
	for i := range sources {
		sources[i].ReadyEndpoints = capped[sources[i].ClusterID]
	}
	reachable := metav1.Condition{Type: mcs.ConditionReachable, Status: metav1.ConditionTrue, Reason: mcs.ReasonReachable,
		Message: "every exporting cluster's backends are reachable"}
	if len(unreachable) > 0 {
		slices.Sort(unreachable)
		reachable.Status, reachable.Reason, reachable.Message = metav1.ConditionFalse, mcs.ReasonUnreachable, truncate(strings.Join(unreachable, "; "), 2000)
	}
	si, err := c.applyServiceImport(ctx, want, ready, reachable, refusedCondition(refused))
	if err != nil {
		return &m, err
	}
	c.eventRefused(ctx, key, si, refused)
	rendered := mcs.RenderEndpointSlices(mcs.RenderInput{Import: si, LocalClusterID: c.cfg.ClusterID, Sources: sources})
	if err := c.applySlices(ctx, mcs.PlanEndpointSlices(rendered, importedSlices(c.stores.slices.Group(key.String())))); err != nil {
		return &m, err
	}
	c.setImported(key, len(rendered))
	if vipErr != nil && !errors.Is(vipErr, mcs.ErrVIPPending) {
		// Pending needs no retry: the exporter's allocation's watch event
		// brings the Service back.
		return &m, fmt.Errorf("clusterset VIP: %w", vipErr)
	}
	return &m, nil
}

// clustersetVIPs returns the clusterset VIPs of key, one per IP family of
// its import (mcs.VIPFamilies of families, in that order), by
// mcs.FamilyVIPAllocator over the cache of allocations: the allocations
// of the clusters exporting key (exporters) count, the oldest kept when
// there are several (two clusters allocated at once, before either saw
// the other's; the allocation's watch event brings every cluster here
// again, so all converge on the same addresses), and a cluster that
// exports key claims one where none counts yet. A cluster that only
// imports key keeps the VIPs it imported it with meanwhile. A family that
// fails is left out and its error returned with the others' VIPs.
func (c *Controller) clustersetVIPs(ctx context.Context, key types.NamespacedName, families []corev1.IPFamily, exporters mcs.VIPExporters) ([]netip.Addr, error) {
	c.mu.Lock()
	last := c.services[key].vips
	c.mu.Unlock()
	vips, err := c.alloc.Allocate(ctx, key, families, exporters, last)
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(err, mcs.ErrVIPRangeExhausted) {
		c.waitingVIP[key] = true
	} else {
		delete(c.waitingVIP, key)
	}
	c.updateLocked(key, func(st *serviceState) { st.vips = vips })
	return vips, err
}

func (c *Controller) applyServiceImport(ctx context.Context, want *mcsv1beta1.ServiceImport, conds ...metav1.Condition) (*mcsv1beta1.ServiceImport, error) {
	key := client.ObjectKeyFromObject(want)
	cached, ok := c.stores.imports.Get(key)
	var have *mcsv1beta1.ServiceImport
	switch {
	case !ok:
		have = want.DeepCopy()
		have.Status = mcsv1beta1.ServiceImportStatus{}
		if err := c.local.Create(ctx, have); err != nil {
			return nil, fmt.Errorf("create ServiceImport: %w", err)
		}
		c.metrics.apiWrites.WithLabelValues("ServiceImport", "create").Inc()
	case cached.specHash != mcs.ContentHash(want.Spec) || !mapsEqual(cached.labels, want.Labels) || !mapsEqual(cached.annotations, want.Annotations):
		upd := cached.serviceImport(key)
		upd.Spec, upd.Labels, upd.Annotations = want.Spec, want.Labels, want.Annotations
		if err := c.local.Update(ctx, upd); err != nil {
			return nil, fmt.Errorf("update ServiceImport: %w", err)
		}
		c.metrics.apiWrites.WithLabelValues("ServiceImport", "update").Inc()
		have = upd
	default:
		// Unchanged: the cache keeps the spec's hash, the spec is want's.
		have = cached.serviceImport(key)
		have.Spec = *want.Spec.DeepCopy()
	}
	status := *have.Status.DeepCopy()
	status.Clusters = want.Status.Clusters
	for _, cond := range conds {
		cond.ObservedGeneration = have.Generation
		meta.SetStatusCondition(&status.Conditions, cond)
	}
	if !equality.Semantic.DeepEqual(status, have.Status) {
		upd := have.DeepCopy()
		upd.Status = status
		// A merge patch: no conflict with a resourceVersion the cache has
		// not caught up with; the status is ours alone.
		if err := c.local.Status().Patch(ctx, upd, client.MergeFrom(have)); err != nil {
			return nil, fmt.Errorf("update ServiceImport status: %w", err)
		}
		c.metrics.apiWrites.WithLabelValues("ServiceImport", "status").Inc()
		have = upd
	}
	return have, nil
}

func (c *Controller) applySlices(ctx context.Context, p mcs.SlicePlan) error {
	var errs []error
	for i := range p.Create {
		if err := c.local.Create(ctx, &p.Create[i]); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create EndpointSlice %s: %w", p.Create[i].Name, err))
		} else {
			c.metrics.apiWrites.WithLabelValues("EndpointSlice", "create").Inc()
		}
	}
	for i := range p.Update {
		if err := c.local.Update(ctx, &p.Update[i]); err != nil {
			errs = append(errs, fmt.Errorf("update EndpointSlice %s: %w", p.Update[i].Name, err))
		} else {
			c.metrics.apiWrites.WithLabelValues("EndpointSlice", "update").Inc()
		}
	}
	for _, d := range p.Delete {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name}}
		if err := c.local.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete EndpointSlice %s: %w", d.Name, err))
		} else {
			c.metrics.apiWrites.WithLabelValues("EndpointSlice", "delete").Inc()
		}
	}
	return errors.Join(errs...)
}

// removeImport deletes the ServiceImport and slices of key here and
// releases this cluster's VIP allocations of key.
func (c *Controller) removeImport(ctx context.Context, key types.NamespacedName) error {
	var errs []error
	if err := c.applySlices(ctx, mcs.PlanEndpointSlices(nil, importedSlices(c.stores.slices.Group(key.String())))); err != nil {
		errs = append(errs, err)
	}
	if cached, ok := c.stores.imports.Get(key); ok {
		if err := c.local.Delete(ctx, cached.serviceImport(key)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete ServiceImport: %w", err))
		} else {
			c.metrics.apiWrites.WithLabelValues("ServiceImport", "delete").Inc()
		}
	}
	c.setImported(key, -1)

	c.mu.Lock()
	c.updateLocked(key, func(st *serviceState) { st.vips = nil })
	delete(c.waitingVIP, key)
	delete(c.vipPendingSince, key)
	c.mu.Unlock()
	// This cluster does not export key (else its record would be there):
	// its allocations of key count for nobody.
	if err := c.alloc.Release(ctx, key); err != nil {
		errs = append(errs, fmt.Errorf("release VIP: %w", err))
	}
	return errors.Join(errs...)
}

// syncExportStatus sets the ServiceExport's Valid, Ready and Conflict
// conditions and records Events when it becomes invalid or conflicting.
func (c *Controller) syncExportStatus(ctx context.Context, exp exportState, m *mcs.MergeResult, importErr error) error {
	se := exp.export
	if se == nil {
		return nil
	}
	status := *se.Status.DeepCopy()
	set := func(cond metav1.Condition) {
		cond.ObservedGeneration = se.Generation
		meta.SetStatusCondition(&status.Conditions, cond)
	}
	set(mcs.ValidCondition(exp.invalid))
	switch {
	case exp.invalid != nil:
		set(mcs.ReadyCondition(false, exp.invalid))
		meta.RemoveStatusCondition(&status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	default:
		set(mcs.ReadyCondition(exp.published, exp.writeErr))
		if m != nil {
			if cond, ok := m.Conflict(c.cfg.ClusterID); ok {
				set(cond)
			}
		}
	}
	if equality.Semantic.DeepEqual(status, se.Status) {
		return nil
	}
	wasValid := meta.IsStatusConditionTrue(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
	oldConflict := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	upd := se.DeepCopy()
	upd.Status = status
	if err := c.local.Status().Patch(ctx, upd, client.MergeFrom(se)); err != nil {
		return fmt.Errorf("update ServiceExport status: %w", err)
	}
	c.metrics.apiWrites.WithLabelValues("ServiceExport", "status").Inc()
	if v := meta.FindStatusCondition(status.Conditions, string(mcsv1beta1.ServiceExportConditionValid)); v.Status == metav1.ConditionFalse &&
		(wasValid || meta.FindStatusCondition(se.Status.Conditions, v.Type) == nil) {
		c.recorder.Eventf(upd, nil, corev1.EventTypeWarning, v.Reason, "Export", "%s", v.Message)
	}
	if cf := meta.FindStatusCondition(status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict)); cf != nil && cf.Status == metav1.ConditionTrue &&
		(oldConflict == nil || oldConflict.Status != metav1.ConditionTrue || oldConflict.Reason != cf.Reason) {
		c.recorder.Eventf(upd, nil, corev1.EventTypeWarning, firstReason(cf.Reason), "Merge", "%s", truncate(cf.Message, 1000))
	}
	return nil
}

// serviceState is what the controller remembers of one Service.
type serviceState struct {
	vips     []netip.Addr // the clusterset VIPs allocated or confirmed here
	exported bool         // this cluster's record is published
	imported bool         // the ServiceImport is written here
	slices   int32        // multi-cluster EndpointSlices written here
}

func (st serviceState) empty() bool {
	return len(st.vips) == 0 && !st.exported && !st.imported && st.slices == 0
}

// VIPPendingGrace is how long a cluster that does not import a
// ClusterSetIP Service yet waits for an exporter's VIP allocation before
// it imports the Service without one (Ready=False, VIPPending). An
// importer usually sees the exporter's record a moment before its
// allocation; creating the import without an address and updating it
// then would cost two writes more per Service.
const VIPPendingGrace = 5 * time.Second

// vipPendingWait is how much longer key's import waits for its VIP:
// positive only while pending (no VIP allocated yet), key is not
// imported here, and VIPPendingGrace has not passed since it was first
// found pending.
func (c *Controller) vipPendingWait(key types.NamespacedName, pending bool) time.Duration {
	_, imported := c.stores.imports.Get(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !pending || imported {
		delete(c.vipPendingSince, key)
		return 0
	}
	since, ok := c.vipPendingSince[key]
	if !ok {
		since = time.Now()
		c.vipPendingSince[key] = since
	}
	return VIPPendingGrace - time.Since(since)
}

// updateLocked applies f to key's state and keeps the totals; call with
// c.mu held.
func (c *Controller) updateLocked(key types.NamespacedName, f func(*serviceState)) {
	st := c.services[key]
	count := func(st serviceState, sign int) {
		if st.exported {
			c.exports += sign
		}
		if st.imported {
			c.imports += sign
		}
		c.sliceCount += sign * int(st.slices)
	}
	count(st, -1)
	f(&st)
	count(st, 1)
	if st.empty() {
		delete(c.services, key)
	} else {
		c.services[key] = st
	}
	c.metrics.exports.Set(float64(c.exports))
	c.metrics.imports.Set(float64(c.imports))
	c.metrics.slices.Set(float64(c.sliceCount))
}

func (c *Controller) setExported(key types.NamespacedName, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updateLocked(key, func(st *serviceState) { st.exported = on })
}

// setImported records the number of slices of key; n < 0: no import.
func (c *Controller) setImported(key types.NamespacedName, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updateLocked(key, func(st *serviceState) { st.imported, st.slices = n >= 0, int32(max(n, 0)) })
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// firstReason is an event reason from a comma-separated condition reason.
func firstReason(r string) string {
	if i := strings.IndexByte(r, ','); i >= 0 {
		return r[:i]
	}
	return r
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
