package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/causeway-net/causeway/lab/netlab"
)

// APIPort is where the kubelet API listens, on the node's address inside
// the node namespace (the real kubelet's port).
const APIPort = 10250

// Serving configures the kubelet API.
type Serving struct {
	// CertFile and KeyFile are the serving certificate, valid for the
	// node's address (controlplane.KubeletServingCert).
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates; of those, only user
	// (CommonName) ClientUser is let in: the API server's
	// --kubelet-client-certificate (controlplane.KubeletClientUser).
	ClientCAFile string
	ClientUser   string
}

// Stream timeouts of exec and port-forward sessions (the real kubelet's
// defaults).
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// serveAPI serves the kubelet API on the node's address until ctx is done.
func (k *Kubelet) serveAPI(ctx context.Context) error {
	s := k.cfg.Serving
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return fmt.Errorf("kubelet API: serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(s.ClientCAFile)
	if err != nil {
		return fmt.Errorf("kubelet API: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("kubelet API: no certificate in %s", s.ClientCAFile)
	}
	addr := net.JoinHostPort(k.cfg.Node.Address.Addr().String(), strconv.Itoa(APIPort))
	ln, err := k.cfg.Host.Listen(k.nodeNS, "tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	srv := &http.Server{
		Handler: k.authenticate(k.apiMux()),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			// exec and port-forward upgrade the connection (SPDY,
			// WebSocket): HTTP/1.1 only.
			NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12,
		},
		ReadHeaderTimeout: 30 * time.Second,
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	k.log.Info("serving the kubelet API", "address", addr)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubelet API: %w", err)
	}
	return nil
}

// authenticate lets in only the API server's client certificate.
func (k *Kubelet) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != k.cfg.Serving.ClientUser {
			http.Error(w, "forbidden: only the API server's kubelet client may use this kubelet", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (k *Kubelet) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	exec := func(w http.ResponseWriter, r *http.Request) { k.serveExec(w, r) }
	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, exec)
		mux.HandleFunc("POST "+p, exec)
	}
	pf := func(w http.ResponseWriter, r *http.Request) { k.servePortForward(w, r) }
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, pf)
		mux.HandleFunc("POST "+p, pf)
	}
	return mux
}

// apiPod is the pod a kubelet API request names, with the UID in the
// path (if any) checked; it writes the error response when there is none.
func (k *Kubelet) apiPod(w http.ResponseWriter, r *http.Request) (*corev1.Pod, bool) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && r.PathValue("uid") != "" && string(pod.UID) != r.PathValue("uid")) {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, k.cfg.Node.Name), http.StatusNotFound)
		return nil, false
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return nil, false
	}
	return pod, true
}

// apiContainer is the named container of pod, which must be running (its
// status says so); it writes the error response when not.
func apiContainer(w http.ResponseWriter, pod *corev1.Pod, name string) (corev1.Container, bool) {
	for _, c := range pod.Spec.Containers {
		if c.Name != name {
			continue
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.Name == name && s.State.Running != nil {
				return c, true
			}
		}
		http.Error(w, fmt.Sprintf("container %s of pod %s/%s is not running", name, pod.Namespace, pod.Name), http.StatusBadRequest)
		return corev1.Container{}, false
	}
	http.Error(w, fmt.Sprintf("container %s is not valid for pod %s/%s", name, pod.Namespace, pod.Name), http.StatusNotFound)
	return corev1.Container{}, false
}

// sandbox is where a pod's processes run: its network namespace (the
// node's for hostNetwork pods) and its cgroup.
func (k *Kubelet) sandbox(pod *corev1.Pod) (netns, cgroup string) {
	np := netlab.Pod{Cluster: k.cfg.Cluster.Name, Node: k.cfg.Node.Name, Namespace: pod.Namespace, Name: pod.Name}
	netns = k.cfg.Host.Names().PodOf(np)
	if pod.Spec.HostNetwork {
		netns = k.nodeNS
	}
	return netns, k.cfg.Host.Cgroups().PodOf(np)
}

func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod, ok := k.apiPod(w, r)
	if !ok {
		return
	}
	c, ok := apiContainer(w, pod, r.PathValue("container"))
	if !ok {
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "no command given", http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, &executor{k: k, pod: pod, container: c}, pod.Name, string(pod.UID), c.Name, cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	pod, ok := k.apiPod(w, r)
	if !ok {
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, &portForwarder{k: k, pod: pod}, pod.Name, string(pod.UID), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}
