package lab

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/internal/imagebuild"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/pkg/kube"
)

// DemoNamespace holds the demo application in every cluster.
const DemoNamespace = "demo"

// demoServerClusters are the clusters running whereami: the first two.
func (s *State) demoServerClusters() []string {
	m := s.Members()
	return m[:min(2, len(m))]
}

// DemoObjects are the demo's objects for one cluster: the namespace, a
// client pod, and in the first two clusters the whereami Deployment (two
// replicas) and Service (TCP 80 and UDP 8080 to the pods' port 8080;
// RequireDualStack in a dual-stack cluster).
func (s *State) DemoObjects(cluster string) []client.Object {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: DemoNamespace, Name: "client", Labels: map[string]string{"app": "client"}},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{s.demoContainer("client", apps.ImageClient, cluster)},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
			},
		},
	}
	serves := false
	for _, c := range s.demoServerClusters() {
		serves = serves || c == cluster
	}
	if !serves {
		return objs
	}
	labels := map[string]string{"app": "whereami"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: DemoNamespace, Name: "whereami"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
				{Name: "udp-echo", Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolUDP},
			},
		},
	}
	if c, _ := s.Topology.Cluster(cluster); c.DualStack() {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	whereami := s.demoContainer("whereami", apps.ImageWhereami, cluster)
	whereami.Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "udp-echo", ContainerPort: 8080, Protocol: corev1.ProtocolUDP},
	}
	whereami.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	return append(objs,
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: DemoNamespace, Name: "whereami"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](2),
						Containers:                    []corev1.Container{whereami},
					},
				},
			},
		},
		svc,
	)
}

// demoContainer is a demo container of a built-in lab image: the image
// alone for the lab kubelet, which knows its program; with
// RuntimeContainerd the lab image running the same program
// (`causeway-lab app <name>`), the Pod's names from the downward API.
func (s *State) demoContainer(name, image, cluster string) corev1.Container {
	if !s.containerd() {
		return corev1.Container{Name: name, Image: image}
	}
	cmd := []string{path.Join(imagebuild.BinDir, imagebuild.LabBinary), "app", name}
	var env []corev1.EnvVar
	if image == apps.ImageWhereami {
		cmd = append(cmd, "--port=8080", "--cluster="+cluster,
			"--namespace=$(POD_NAMESPACE)", "--pod=$(POD_NAME)", "--node=$(NODE_NAME)", "--pod-ip=$(POD_IP)")
		for k, path := range map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name",
			"NODE_NAME": "spec.nodeName", "POD_IP": "status.podIP"} {
			env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}})
		}
		slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	}
	return corev1.Container{Name: name, Image: s.labImage(), Command: cmd, Env: env}
}

// deploy creates the system (CoreDNS) and demo objects that are missing. Pods are refused
// until the controller manager has made the namespace's default service
// account, so creation is retried for a while.
func (s *State) deploy(ctx context.Context, clients map[string]client.Client) error {
	return forEach(s.Members(), func(name string) error {
		objs := s.SystemObjects(name)
		if s.Demo {
			objs = append(objs, s.DemoObjects(name)...)
		}
		for _, obj := range objs {
			var last error
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				existing := obj.DeepCopyObject().(client.Object)
				if err := clients[name].Get(ctx, client.ObjectKeyFromObject(obj), existing); err == nil {
					return true, nil
				}
				last = clients[name].Create(ctx, obj.DeepCopyObject().(client.Object))
				return last == nil || apierrors.IsAlreadyExists(last), nil
			})
			if err != nil {
				return fmt.Errorf("cluster %s: create %T %s: %v", name, obj, obj.GetName(), last)
			}
		}
		return nil
	})
}

// waitPods waits until, in every cluster, at least want(cluster) pods of
// namespace are ready.
func (s *State) waitPods(ctx context.Context, clients map[string]client.Client, namespace string, want func(cluster string) int) error {
	return forEach(s.Members(), func(name string) error {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods := &corev1.PodList{}
			if err := clients[name].List(ctx, pods, client.InNamespace(namespace)); err != nil {
				last = err.Error()
				return false, nil
			}
			ready := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && kube.PodReady(&p) {
					ready++
				}
			}
			last = fmt.Sprintf("%d of %d pods ready in namespace %s", ready, want(name), namespace)
			return ready >= want(name), nil
		})
		if err != nil {
			return fmt.Errorf("cluster %s: %s: %w", name, last, err)
		}
		return nil
	})
}

// demoPods is how many demo pods a cluster runs.
func (s *State) demoPods(cluster string) int {
	for _, c := range s.demoServerClusters() {
		if c == cluster {
			return 3
		}
	}
	return 1
}
