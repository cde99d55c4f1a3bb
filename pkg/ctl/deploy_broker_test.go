package ctl

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/clusterset"
)

// TestDeployBrokerPolicy runs deploy-broker's policy flags end to end
// against a real broker with a quota controller: a policy that does not
// hold together changes nothing; the flags' policy is stored with every
// field set, reads back through clusterset.Read with a member's identity
// from its join file, bounds that member's claims and sets every member's
// quota; running again without flags keeps it, a flag changes its field
// only.
func TestDeployBrokerPolicy(t *testing.T) {
	b := kubetest.Start(t, "broker", kubetest.WithComponents(controlplane.ControllerManager))
	ctx := context.Background()
	dir := t.TempDir()
	deploy := func(args ...string) (string, error) {
		return runCtl(append([]string{"deploy-broker", "--kubeconfig", b.AdminKubeconfig, "--output-dir", dir, "--cluster-id", "c1", "--cluster-id", "c2"}, args...)...)
	}

	if out, err := runCtl("deploy-broker", "--help"); err != nil || !strings.Contains(out, "a flag not given keeps the field") {
		t.Errorf("--help does not say what a flag not given does: %v\n%s", err, out)
	} else {
		def := addrpolicy.DefaultPolicy()
		for _, flag := range []string{"--allowed-cidrs", "--vip-range", "--vip-range-ipv6", "--global-supernet", "--global-cidr-bits",
			"--quota-service-export-records", "--quota-backends", "--quota-global-cidrs", "--quota-objects"} {
			if !strings.Contains(out, flag+" ") {
				t.Errorf("--help has no %s", flag)
			}
		}
		for _, d := range []string{def.VIPRange.String(), def.VIPRangeIPv6.String(), def.Supernet.String(), "fc00::/7", "(default of a new policy: 10000)"} {
			if !strings.Contains(out, d) {
				t.Errorf("--help does not name the default %s", d)
			}
		}
	}

	// Refused before anything is written.
	if out, err := deploy("--global-cidr-bits", "4"); err == nil || !strings.Contains(err.Error(), "global CIDR size /4 must lie between the supernet's /8 and /29") {
		t.Fatalf("deploy-broker --global-cidr-bits 4: %v, want the policy's refusal\n%s", err, out)
	}
	if err := b.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &v1alpha1.ClusterSetPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterSetPolicy after a refused deploy-broker: %v, want NotFound", err)
	}
	if err := b.Client.Get(ctx, client.ObjectKey{Name: broker.Namespace("c1")}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("member namespace after a refused deploy-broker: %v, want NotFound", err)
	}

	out, err := deploy("--allowed-cidrs", "10.0.0.0/8,fd00::/8", "--vip-range", "243.16.0.0/16", "--vip-range-ipv6", "fd00:ffff::/112",
		"--global-supernet", "242.1.0.0/16", "--global-cidr-bits", "26", "--quota-service-export-records", "50", "--quota-backends", "500",
		"--quota-global-cidrs", "2", "--quota-objects", "20")
	if err != nil {
		t.Fatalf("deploy-broker with a policy: %v\n%s", err, out)
	}
	want, err := addrpolicy.ParsePolicy(v1alpha1.ClusterSetPolicySpec{
		AllowedCIDRs: []string{"10.0.0.0/8", "fd00::/8"}, VIPRange: "243.16.0.0/16", VIPRangeIPv6: "fd00:ffff::/112",
		Globalnet: v1alpha1.GlobalnetPolicy{Supernet: "242.1.0.0/16", CIDRBits: 26},
		Quotas:    v1alpha1.MemberQuotas{ServiceExportRecords: 50, Backends: 500, GlobalCIDRs: 2, Objects: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ClusterSet policy clusterset: allowed 10.0.0.0/8,fd00::/8; VIP ranges 243.16.0.0/16, fd00:ffff::/112; globalnet supernet 242.1.0.0/16, /26",
		"quotas enforced in c1, c2"} {
		if !strings.Contains(out, s) {
			t.Errorf("deploy-broker does not say %q:\n%s", s, out)
		}
	}
	joinFile, err := os.ReadFile(filepath.Join(dir, "c1.join.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c1 := kubetest.KubeconfigClient(t, joinFile)
	readBack := func(when string, want addrpolicy.Policy) {
		t.Helper()
		got, err := clusterset.Read(ctx, c1)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: c1 reads the policy %+v, %v; want %+v", when, got, err, want)
		}
		var obj v1alpha1.ClusterSetPolicy
		if err := b.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &obj); err != nil || !reflect.DeepEqual(obj.Spec, want.Spec()) {
			t.Errorf("%s: the broker holds %+v, %v; want every field set: %+v", when, obj.Spec, err, want.Spec())
		}
		for _, id := range []string{"c1", "c2"} {
			var q corev1.ResourceQuota
			err := b.Client.Get(ctx, client.ObjectKey{Namespace: broker.Namespace(id), Name: broker.QuotaName}, &q)
			if got := q.Spec.Hard["count/serviceexportrecords.causeway.dev"]; err != nil || got.Value() != int64(want.Quotas.Records) {
				t.Errorf("%s: quota of %s: %v records, %v; want %d", when, id, got.String(), err, want.Quotas.Records)
			}
		}
	}
	readBack("with flags", want)

	// The member's claims follow the policy deploy-broker wrote: a /24
	// of the /16 supernet is not one of its /26 blocks.
	claim := &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: "242.1.0.0-24", Labels: map[string]string{broker.LabelClusterID: "c1"}},
		Spec: v1alpha1.GlobalCIDRSpec{ClusterID: "c1"}}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c1.Create(ctx, claim.DeepCopy())
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is not a /26 of the globalnet supernet 242.1.0.0/16") {
			break
		}
		if err == nil {
			_ = b.Client.Delete(ctx, claim.DeepCopy())
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1 claims a /24: err=%v, want Forbidden by the policy", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if out, err := deploy(); err != nil {
		t.Fatalf("deploy-broker again: %v\n%s", err, out)
	}
	readBack("again without flags", want)

	if out, err := deploy("--quota-service-export-records", "60"); err != nil {
		t.Fatalf("deploy-broker --quota-service-export-records 60: %v\n%s", err, out)
	}
	want.Quotas.Records = 60
	readBack("one flag", want)

	if out, err := deploy("--vip-range", "242.1.128.0/20"); err == nil || !strings.Contains(err.Error(), "overlaps the globalnet supernet") {
		t.Errorf("deploy-broker with a VIP range in the supernet: %v, want the policy's refusal\n%s", err, out)
	}
	readBack("a refused flag", want)
}
