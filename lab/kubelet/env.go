package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/lab/netlab"
)

// containerEnv is the container's environment, in order: literal values
// (with $(VAR) references to earlier variables expanded), the
// downward-API fields a pod commonly asks for, and keys of ConfigMaps and
// Secrets of the pod's namespace (read through kube; a missing one that is
// not optional fails, an optional one is left out).
// Resource fields and envFrom are not supported and are left out, with a
// warning.
func containerEnv(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, c corev1.Container, podIP, hostIP string, log *slog.Logger) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		log.Warn("envFrom not supported; left out", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name)
	}
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+expand(e.Value, envMap(env)))
			continue
		}
		var v string
		switch src := e.ValueFrom; {
		case src.FieldRef != nil:
			var ok bool
			if v, ok = fieldValue(pod, src.FieldRef.FieldPath, podIP, hostIP); !ok {
				log.Warn("env field not supported; variable left out", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "env", e.Name, "field", src.FieldRef.FieldPath)
				continue
			}
		case src.ConfigMapKeyRef != nil || src.SecretKeyRef != nil:
			kind, name, key, optional := "ConfigMap", "", "", (*bool)(nil)
			if r := src.ConfigMapKeyRef; r != nil {
				name, key, optional = r.Name, r.Key, r.Optional
			} else {
				r := src.SecretKeyRef
				kind, name, key, optional = "Secret", r.Name, r.Key, r.Optional
			}
			data, err := keyData(ctx, kube, kind, pod.Namespace, name)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			val, found := data[key]
			if !found {
				if optional != nil && *optional {
					continue
				}
				return nil, fmt.Errorf("env %s: key %q of %s %s/%s not found", e.Name, key, kind, pod.Namespace, name)
			}
			v = string(val)
		default:
			log.Warn("env source not supported; variable left out", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "env", e.Name)
			continue
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// env is the environment of container c of pod: on a node with the API
// server forwarder, KUBERNETES_SERVICE_HOST and _PORT naming it, as
// in-cluster clients expect (https://127.0.0.1:6443 for hostNetwork pods,
// https://<netlab.APIAddress>:6443 for the others, which reach it through
// their node), then containerEnv.
func (k *Kubelet) env(ctx context.Context, pod *corev1.Pod, c corev1.Container, podIP string) ([]string, error) {
	var base []string
	if k.cfg.APIServerForward != "" {
		host := "127.0.0.1"
		if !pod.Spec.HostNetwork {
			host = netlab.APIAddress.String()
		}
		base = []string{"KUBERNETES_SERVICE_HOST=" + host, fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", APIServerPort)}
	}
	env, err := containerEnv(ctx, k.cfg.Client, pod, c, podIP, k.cfg.Node.Address.Addr().String(), k.log)
	return append(base, env...), err
}

// keyData is the data of ConfigMap (Data and BinaryData) or Secret
// (kind) namespace/name; nil, without an error, when it does not exist.
func keyData(ctx context.Context, kube kubernetes.Interface, kind, namespace, name string) (map[string][]byte, error) {
	data := map[string][]byte{}
	var err error
	if kind == "Secret" {
		var s *corev1.Secret
		if s, err = kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil && s.Data != nil {
			data = s.Data
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", kind, namespace, name, err)
	}
	return data, nil
}

// fieldValue is the downward-API field a fieldRef names.
func fieldValue(pod *corev1.Pod, path, podIP, hostIP string) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "status.podIP", "status.podIPs":
		return podIP, true
	case "status.hostIP", "status.hostIPs":
		return hostIP, true
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok && strings.HasSuffix(k, "']") {
		return pod.Labels[strings.TrimSuffix(k, "']")], true
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok && strings.HasSuffix(k, "']") {
		return pod.Annotations[strings.TrimSuffix(k, "']")], true
	}
	return "", false
}

// envMap maps the names of "NAME=value" entries to their values (a later
// entry wins).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}

// expand replaces $(NAME) in s by the value of variable NAME, as the
// kubelet does in a container's command, args and env values: "$$" is a
// literal "$", and a reference to an undefined variable (or an unclosed
// one) stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := vars[s[i+2:i+2+end]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += len(ref) - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
