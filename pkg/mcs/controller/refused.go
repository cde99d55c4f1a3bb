package controller

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// recordPolicy is the addrpolicy configuration remote records are
// checked with: the ClusterSet's policy, and this cluster's own CIDRs
// from its mirrored Cluster (empty until the gateway mirrored it; the
// tunnels' subnets, which Decide placed outside them, still bound every
// claim).
func (c *Controller) recordPolicy(ctx context.Context) addrpolicy.Config {
	cfg := addrpolicy.Config{Policy: c.cfg.Policy}
	var own causewayv1alpha1.Cluster
	if c.local.Get(ctx, types.NamespacedName{Namespace: c.cfg.Namespace, Name: c.cfg.ClusterID}, &own) == nil {
		cfg.LocalCIDRs = append(addrpolicy.ValidPrefixes(own.Spec.PodCIDRs), addrpolicy.ValidPrefixes(own.Spec.ServiceCIDRs)...)
		cfg.GlobalCIDRs = addrpolicy.ValidPrefixes(own.Spec.GlobalCIDRs)
	}
	return cfg
}

// refusedCondition is the ServiceImport's RemoteRecordRefused condition.
func refusedCondition(refused []refusal) metav1.Condition {
	cond := metav1.Condition{Type: mcs.ConditionRemoteRecordRefused, Status: metav1.ConditionFalse, Reason: mcs.ReasonNoneRefused,
		Message: "every exporting cluster's record was accepted"}
	if len(refused) == 0 {
		return cond
	}
	parts := make([]string, len(refused))
	for i, r := range refused {
		parts[i] = r.String()
	}
	cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, refused[0].reason, truncate(strings.Join(parts, "; "), 2000)
	return cond
}

// eventRefused records a Warning Event for each refusal of key not
// reported on the same object before (by this process): on the
// ServiceImport si, or, when
// every record was refused and there is no import, on the refused
// cluster's Endpoint mirror in Causeway's namespace. It keeps the
// remote_records_refused gauge. Records beyond their cluster's quota of a
// Service with no import are reported once per cluster while it is over
// its quota, not per Service: a cluster flooding the broker makes no
// Event and holds no memory here per record it floods with.
func (c *Controller) eventRefused(ctx context.Context, key types.NamespacedName, si *mcsv1beta1.ServiceImport, refused []refusal) {
	// A refusal is reported again when the object it is reported on
	// changes (an import appears or goes).
	on := "import "
	if si == nil {
		on = "endpoint "
	}
	now := make(map[string]string, len(refused))
	var overQuota []refusal
	for _, r := range refused {
		if si == nil && r.reason == mcs.ReasonQuotaExceeded {
			overQuota = append(overQuota, r)
			continue
		}
		now[r.clusterID] = on + r.detail()
	}
	c.mu.Lock()
	overQuota = slices.DeleteFunc(overQuota, func(r refusal) bool {
		reported := c.quotaReported[r.clusterID]
		c.quotaReported[r.clusterID] = true
		return reported
	})
	before := c.refused[key]
	if len(now) == 0 {
		delete(c.refused, key)
	} else {
		c.refused[key] = now
	}
	n := 0
	for _, m := range c.refused {
		n += len(m)
	}
	c.metrics.refused.Set(float64(n))
	c.mu.Unlock()

	for _, r := range overQuota {
		c.recorder.Eventf(c.endpointMirror(ctx, r.clusterID), nil, corev1.EventTypeWarning, mcs.EventRemoteRecordRefused, "Import",
			"cluster %s holds records beyond its quota, which are not imported (first seen: record %s: %s)", r.clusterID,
			mcs.RecordName(key.Namespace, key.Name), truncate(r.detail(), 800))
		c.log.Warn("remote cluster over its quota of records", "peer", r.clusterID, "service", key, "message", r.message)
	}
	for _, r := range refused {
		if _, ok := now[r.clusterID]; !ok || before[r.clusterID] == now[r.clusterID] {
			continue
		}
		var regarding runtime.Object = si
		if si == nil {
			regarding = c.endpointMirror(ctx, r.clusterID)
		}
		c.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, mcs.EventRemoteRecordRefused, "Import",
			"record %s of cluster %s refused, nothing of it is imported: %s", mcs.RecordName(key.Namespace, key.Name), r.clusterID, truncate(r.detail(), 900))
		c.log.Warn("remote record refused", "service", key, "peer", r.clusterID, "reason", r.reason, "message", r.message)
	}
}

// endpointMirror is the Endpoint mirror of cluster id in Causeway's
// namespace, for an Event (its name alone when it cannot be read).
func (c *Controller) endpointMirror(ctx context.Context, id string) *causewayv1alpha1.Endpoint {
	ep := &causewayv1alpha1.Endpoint{}
	if err := c.local.Get(ctx, types.NamespacedName{Namespace: c.cfg.Namespace, Name: id}, ep); err != nil {
		ep.Namespace, ep.Name = c.cfg.Namespace, id
	}
	return ep
}
