package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority kept as PEM files in a directory.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertFile is the CA certificate's path, for --client-ca-file and
	// kubeconfigs.
	CertFile string
}

// LoadOrCreateCA loads dir/<name>.crt and .key, creating them when absent.
func LoadOrCreateCA(dir, name string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if cert, key, err := loadPair(certFile, keyFile); err == nil {
		return &CA{Cert: cert, Key: key, CertFile: certFile}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s: %w", name, err)
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writePair(certFile, keyFile, der, key); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertFile: certFile}, nil
}

// CertSpec describes a certificate the CA issues.
type CertSpec struct {
	CommonName   string
	Organization []string // Kubernetes groups for client certificates
	DNSNames     []string
	IPs          []net.IP
	Server       bool // server auth (else client auth)
}

// Issue writes dir/<name>.crt and .key signed by the CA, unless both
// exist already, and returns their paths.
func (ca *CA) Issue(dir, name string, spec CertSpec) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if _, _, err := loadPair(certFile, keyFile); err == nil {
		return certFile, keyFile, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate %s key: %w", name, err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if spec.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(5, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return "", "", fmt.Errorf("sign %s: %w", name, err)
	}
	return certFile, keyFile, writePair(certFile, keyFile, der, key)
}

// WriteKeyPair writes an ECDSA key pair (private and public PEM) unless
// present; the service-account token signer uses it.
func WriteKeyPair(privFile, pubFile string) error {
	if _, err := os.Stat(privFile); err == nil {
		if _, err := os.Stat(pubFile); err == nil {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func loadPair(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s: not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", certFile, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	return cert, signer, nil
}

func writePair(certFile, keyFile string, der []byte, key crypto.Signer) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}
