// Package clusterset reads the ClusterSet's policy (v1alpha1.ClusterSetPolicy)
// from an API server: the broker, where its administrator writes it, or a
// member cluster, where the active gateway mirrors it for the daemons
// without broker credentials (the route agent). pkg/addrpolicy evaluates
// it; this package only fetches it and tells a daemon when it changed.
//
// A broker without a ClusterSetPolicy stands for the default policy
// (addrpolicy.DefaultPolicy): members cannot create one (the broker's RBAC
// gives them no such right), so its absence is the administrator's
// choice. A policy that does not parse is an error: the daemons refuse to
// start with it, and a running one keeps what it has (fail static).
package clusterset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// ErrNoMirror is returned by ReadMirror while the member cluster holds no
// copy of the policy yet (no gateway has been active since the install).
var ErrNoMirror = errors.New("no ClusterSetPolicy mirrored into this cluster yet (is a gateway active?)")

// Reader reads the policy from an API server: Read (the broker) or
// ReadMirror (a member cluster).
type Reader func(ctx context.Context, c client.Reader) (addrpolicy.Policy, error)

// Read returns the ClusterSet's policy as the broker c holds it: the
// default policy when it has none.
func Read(ctx context.Context, c client.Reader) (addrpolicy.Policy, error) {
	p, err := read(ctx, c)
	if apierrors.IsNotFound(err) {
		return addrpolicy.DefaultPolicy(), nil
	}
	return p, err
}

// ReadMirror returns the policy as the active gateway mirrored it into the
// member cluster c: ErrNoMirror when it has not yet.
func ReadMirror(ctx context.Context, c client.Reader) (addrpolicy.Policy, error) {
	p, err := read(ctx, c)
	if apierrors.IsNotFound(err) {
		return addrpolicy.Policy{}, ErrNoMirror
	}
	return p, err
}

func read(ctx context.Context, c client.Reader) (addrpolicy.Policy, error) {
	var obj v1alpha1.ClusterSetPolicy
	err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &obj)
	switch {
	case apierrors.IsNotFound(err):
		return addrpolicy.Policy{}, err
	case err != nil:
		return addrpolicy.Policy{}, fmt.Errorf("read ClusterSetPolicy %s: %w", v1alpha1.ClusterSetPolicyName, err)
	}
	p, err := addrpolicy.ParsePolicy(obj.Spec)
	if err != nil {
		return addrpolicy.Policy{}, fmt.Errorf("ClusterSetPolicy %s: %w", v1alpha1.ClusterSetPolicyName, err)
	}
	return p, nil
}

// Wait reads the policy with read, retrying every interval while the API
// server does not answer, the policy is missing (ReadMirror) or does not
// parse, until ctx ends. report, when set, is told every failure and the
// success (nil). Each read is bounded by readTimeout.
func Wait(ctx context.Context, read Reader, c client.Reader, interval time.Duration, report func(error)) (addrpolicy.Policy, error) {
	var p addrpolicy.Policy
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = readWithin(ctx, read, c)
		if report != nil {
			report(err)
		}
		return err == nil, nil
	})
	if err != nil {
		return addrpolicy.Policy{}, fmt.Errorf("wait for the ClusterSet policy: %w", err)
	}
	return p, nil
}

// readTimeout bounds one read of Wait and Watch: a request that hangs is
// given up and tried again at the next interval.
const readTimeout = 10 * time.Second

func readWithin(ctx context.Context, read Reader, c client.Reader) (addrpolicy.Policy, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return read(ctx, c)
}

// ErrChanged is returned by Watch when the policy is no longer the one the
// daemon started with.
var ErrChanged = errors.New("the ClusterSet policy changed")

// Watch reads the policy every interval until ctx ends (nil) or it differs
// from have (an error wrapping ErrChanged, naming the change): a daemon
// that took settings from it at start returns that error and exits, to be
// restarted with the new policy (its kernel state stays meanwhile).
// Read errors are logged and retried: the daemon goes on with have.
func Watch(ctx context.Context, read Reader, c client.Reader, have addrpolicy.Policy, interval time.Duration, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p, err := readWithin(ctx, read, c)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("cannot read the ClusterSet policy; keeping the one in use", "err", err)
			}
			continue
		}
		if !reflect.DeepEqual(p, have) {
			return fmt.Errorf("%w: was %+v, now %+v", ErrChanged, have, p)
		}
	}
}

// Object is the ClusterSetPolicy object holding p with every field set,
// as the broker administrator writes it and the gateway mirrors it.
func Object(p addrpolicy.Policy) *v1alpha1.ClusterSetPolicy {
	return &v1alpha1.ClusterSetPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSetPolicyName},
		Spec:       p.Spec(),
	}
}

// Store creates or updates the ClusterSetPolicy in c to hold p (nothing
// is written when it already does): the broker administrator's write, and
// the gateway's mirror into its cluster.
func Store(ctx context.Context, c client.Client, p addrpolicy.Policy) error {
	want := Object(p)
	var have v1alpha1.ClusterSetPolicy
	err := c.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("create ClusterSetPolicy %s: %w", want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read ClusterSetPolicy %s: %w", want.Name, err)
	case reflect.DeepEqual(have.Spec, want.Spec):
		return nil
	}
	have.Spec = want.Spec
	if err := c.Update(ctx, &have); err != nil {
		return fmt.Errorf("update ClusterSetPolicy %s: %w", want.Name, err)
	}
	return nil
}
