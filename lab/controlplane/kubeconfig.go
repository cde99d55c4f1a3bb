package controlplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// PKI is one control plane's certificates and keys.
type PKI struct {
	Dir                     string
	CA                      *CA
	ServingCert, ServingKey string
	SAPrivate, SAPublic     string
	// KubeletClientCert and KubeletClientKey are the API server's client
	// identity towards kubelets (user KubeletClientUser).
	KubeletClientCert, KubeletClientKey string
}

// KubeletClientUser is the user name of the API server's client
// certificate towards kubelets (--kubelet-client-certificate): the one
// client a lab kubelet's API accepts.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// NewPKI loads or creates the CA, the API server's serving certificate
// (valid for 127.0.0.1, localhost, the in-cluster names and servingIPs;
// issued once, so the addresses of its first call count), its client
// certificate towards kubelets and the service-account signing key pair in
// dir.
func NewPKI(dir, name string, servingIPs []net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := LoadOrCreateCA(dir, "ca")
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	p := &PKI{Dir: dir, CA: ca,
		SAPrivate: filepath.Join(dir, "sa.key"), SAPublic: filepath.Join(dir, "sa.pub")}
	p.ServingCert, p.ServingKey, err = ca.Issue(dir, "apiserver", CertSpec{
		CommonName: name + "-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:        append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, servingIPs...),
		Server:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	p.KubeletClientCert, p.KubeletClientKey, err = ca.Issue(dir, "apiserver-kubelet-client", CertSpec{
		CommonName: KubeletClientUser, Organization: []string{"system:masters"},
	})
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	if err := WriteKeyPair(p.SAPrivate, p.SAPublic); err != nil {
		return nil, fmt.Errorf("pki %s: service-account keys: %w", name, err)
	}
	return p, nil
}

// Kubeconfig writes (once) <dir>/../<file>.kubeconfig for a client
// certificate identity and returns its path.
func (p *PKI) Kubeconfig(server, file, user string, groups []string) (string, error) {
	path := filepath.Join(filepath.Dir(p.Dir), file+".kubeconfig")
	cert, key, err := p.CA.Issue(p.Dir, "client-"+file, CertSpec{CommonName: user, Organization: groups})
	if err != nil {
		return "", err
	}
	cfg := p.config(server)
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

func (p *PKI) tokenKubeconfig(path, server, token string) error {
	cfg := p.config(server)
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	return clientcmd.WriteToFile(*cfg, path)
}

func (p *PKI) config(server string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.CA.CertFile}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	cfg.CurrentContext = "default"
	return cfg
}

func restConfigFromFile(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}
