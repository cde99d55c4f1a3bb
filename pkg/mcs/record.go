package mcs

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// ExportRecord is what one cluster publishes to the broker for one exported
// Service. It is the spec of the broker's ServiceExportRecord object, so the
// policy functions here work on exactly what is stored.
type ExportRecord = causewayv1alpha1.ServiceExportRecordSpec

// RecordName is the broker object name of the record for a Service:
// "<namespace>.<name>". Namespaces and Service names are DNS labels without
// dots, so the name is unique and reversible.
func RecordName(namespace, name string) string { return namespace + "." + name }

// InvalidExportError says why a ServiceExport cannot be exported; Reason is
// the mcs-api reason for Valid=False.
type InvalidExportError struct {
	Reason  mcsv1beta1.ServiceExportConditionReason
	Message string
}

func (e *InvalidExportError) Error() string { return e.Message }

// NewExportRecord builds the record a cluster publishes for export, which
// must be the ServiceExport of svc. svc is nil when the Service does not
// exist. It returns an *InvalidExportError (reason NoService or
// InvalidServiceType) when the export is not valid.
func NewExportRecord(clusterID string, export *mcsv1beta1.ServiceExport, svc *corev1.Service) (ExportRecord, error) {
	if svc == nil {
		return ExportRecord{}, &InvalidExportError{
			Reason:  mcsv1beta1.ServiceExportReasonNoService,
			Message: fmt.Sprintf("service %s/%s not found", export.Namespace, export.Name),
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return ExportRecord{}, &InvalidExportError{
			Reason:  mcsv1beta1.ServiceExportReasonInvalidServiceType,
			Message: fmt.Sprintf("service %s/%s is of type ExternalName, which cannot be exported", svc.Namespace, svc.Name),
		}
	}
	r := ExportRecord{
		ClusterID:               clusterID,
		ServiceNamespace:        svc.Namespace,
		ServiceName:             svc.Name,
		ExportCreationTimestamp: export.CreationTimestamp,
		Type:                    mcsv1beta1.ClusterSetIP,
		SessionAffinity:         svc.Spec.SessionAffinity,
		SessionAffinityConfig:   svc.Spec.SessionAffinityConfig.DeepCopy(),
		IPFamilies:              slices.Clone(svc.Spec.IPFamilies),
		InternalTrafficPolicy:   clonePtr(svc.Spec.InternalTrafficPolicy),
		TrafficDistribution:     clonePtr(svc.Spec.TrafficDistribution),
		ExportedLabels:          maps.Clone(export.Spec.ExportedLabels),
		ExportedAnnotations:     maps.Clone(export.Spec.ExportedAnnotations),
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		r.Type = mcsv1beta1.Headless
	} else {
		r.ClusterIPs = slices.Clone(svc.Spec.ClusterIPs)
		if len(r.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
			r.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	}
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		r.Ports = append(r.Ports, causewayv1alpha1.RecordPort{
			Name:        p.Name,
			Protocol:    proto,
			Port:        p.Port,
			AppProtocol: clonePtr(p.AppProtocol),
		})
	}
	return r, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ValidCondition is the ServiceExport's Valid condition for the error
// NewExportRecord returned (nil: valid).
func ValidCondition(err error) metav1.Condition {
	c := metav1.Condition{
		Type:    string(mcsv1beta1.ServiceExportConditionValid),
		Status:  metav1.ConditionTrue,
		Reason:  string(mcsv1beta1.ServiceExportReasonValid),
		Message: "the service can be exported",
	}
	if err != nil {
		c.Status, c.Message = metav1.ConditionFalse, err.Error()
		c.Reason = string(mcsv1beta1.ServiceExportReasonFailed)
		var inv *InvalidExportError
		if errors.As(err, &inv) {
			c.Reason = string(inv.Reason)
		}
	}
	return c
}

// ReadyCondition is the ServiceExport's Ready condition: True (Exported)
// once its record is in the broker, False (Failed) when it cannot be
// exported (err from NewExportRecord or from writing the record), Unknown
// (Pending) before.
func ReadyCondition(published bool, err error) metav1.Condition {
	c := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionReady)}
	switch {
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed), err.Error()
	case published:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported), "exported to the clusterset"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, string(mcsv1beta1.ServiceExportReasonPending), "being exported"
	}
	return c
}
