package ipsec

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/causeway-net/causeway/pkg/cable"
)

const (
	// Name is the registry name of this driver.
	Name = "ipsec"
	// IKEPort and NATTPort are the UDP ports charon listens on.
	IKEPort  = 500
	NATTPort = 4500
	// DefaultMTU of the TUN device: room for IPv4 + UDP + ESP (IV,
	// padding, ICV) on a 1500-byte WAN.
	DefaultMTU = 1400
	// TUNName is the device kernel-libipsec creates in the namespace.
	// It cannot be renamed: the plugin installs its routes by this name.
	TUNName = "ipsec0"
	// CharonTable is the routing table where kernel-libipsec puts its own
	// routes (one per CHILD_SA, it insists on installing them). They are
	// never looked up: charon's rule for the table matches only packets
	// with CharonRuleMark, which nothing sets. The driver's routes (proto
	// 157, LocalEndpoint.RouteTable) carry the traffic.
	CharonTable        = 0xca5e
	CharonRulePriority = 32700
	CharonRuleMark     = 0xca5e0157
	// Charon is the Debian path of the IKE daemon.
	Charon = "/usr/lib/ipsec/charon"
	// IKEProposal and ESPProposal use only algorithms of the base plugins
	// (aes, sha2, hmac, gmp), which every gateway has. ESPProposalGCM is
	// proposed first where an AES-GCM implementation is installed
	// (openssl/aesni/gcm plugins from libstrongswan-standard-plugins): it
	// is several times faster (AES-NI, one pass).
	IKEProposal    = "aes256-sha256-modp3072"
	ESPProposal    = "aes128-sha256-modp3072"
	ESPProposalGCM = "aes128gcm16-modp3072"
	// PluginDir is where Debian installs charon's plugins.
	PluginDir = "/usr/lib/ipsec/plugins"
)

// BasePlugins are the charon plugins always loaded, in load order.
// kernel-libipsec comes before kernel-netlink so that it is the IPsec
// backend (userspace ESP over TUN) while kernel-netlink handles addresses
// and routes.
var BasePlugins = []string{
	"kernel-libipsec", "kernel-netlink", "socket-default", "vici",
	"random", "nonce", "aes", "sha1", "sha2", "hmac", "gmp", "kdf",
}

// FastPlugins are loaded (first, so they are preferred) when installed:
// AES-NI and AES-GCM implementations.
var FastPlugins = []string{"openssl", "aesni", "gcm"}

// Plugins returns the plugins to load given which optional plugins are
// installed, and whether AES-GCM is available.
func Plugins(installed func(name string) bool) (plugins []string, gcm bool) {
	for _, p := range FastPlugins {
		if installed(p) {
			plugins = append(plugins, p)
		}
	}
	plugins = append(plugins, BasePlugins...)
	return plugins, HasGCM(plugins)
}

// HasGCM reports whether plugins include an AES-GCM implementation.
func HasGCM(plugins []string) bool {
	return slices.Contains(plugins, "openssl") || slices.Contains(plugins, "gcm")
}

// LoadedPlugins returns the plugins of a strongswan.conf written by
// StrongSwanConf (its "load = ..." line).
func LoadedPlugins(conf string) []string {
	for _, line := range strings.Split(conf, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "load = "); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// PluginInstalled reports whether charon's plugin name is installed.
func PluginInstalled(name string) bool {
	_, err := os.Stat(filepath.Join(PluginDir, "libstrongswan-"+name+".so"))
	return err == nil
}

// ESPProposals returns the ESP proposals, best first.
func ESPProposals(gcm bool) []string {
	if gcm {
		return []string{ESPProposalGCM, ESPProposal}
	}
	return []string{ESPProposal}
}

// Files are the paths the driver keeps under <StateDir>/ipsec.
type Files struct {
	Dir     string // <StateDir>/ipsec
	Conf    string // strongswan.conf (STRONGSWAN_CONF)
	RunDir  string // bind-mounted over /run in charon's mount namespace
	PidFile string // charon.pid as seen from outside
	Socket  string // VICI socket
	Log     string // charon's file log
	ConnsDB string // fingerprints of the loaded connections
	Stdout  string // charon's stdout/stderr
}

// FilesFor returns the file layout for stateDir.
func FilesFor(stateDir string) Files {
	dir := filepath.Join(stateDir, "ipsec")
	run := filepath.Join(dir, "run")
	return Files{
		Dir:     dir,
		Conf:    filepath.Join(dir, "strongswan.conf"),
		RunDir:  run,
		PidFile: filepath.Join(run, "charon.pid"),
		Socket:  filepath.Join(dir, "charon.vici"),
		Log:     filepath.Join(dir, "charon.log"),
		ConnsDB: filepath.Join(dir, "conns.json"),
		Stdout:  filepath.Join(dir, "charon.out"),
	}
}

// StrongSwanConf renders charon's configuration: only the plugins above,
// the VICI socket in the state dir, no routes or virtual IPs installed by
// charon (the driver owns the routes), and a file log.
func StrongSwanConf(f Files, plugins []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by the causeway ipsec cable driver; overwritten on start.\n")
	fmt.Fprintf(&b, "charon {\n")
	fmt.Fprintf(&b, "  load_modular = no\n")
	fmt.Fprintf(&b, "  load = %s\n", strings.Join(plugins, " "))
	fmt.Fprintf(&b, "  port = %d\n  port_nat_t = %d\n", IKEPort, NATTPort)
	fmt.Fprintf(&b, "  install_routes = no\n  install_virtual_ip = no\n")
	fmt.Fprintf(&b, "  routing_table = %d\n  routing_table_prio = %d\n", CharonTable, CharonRulePriority)
	fmt.Fprintf(&b, "  retransmit_tries = 3\n  retransmit_timeout = 2.0\n")
	fmt.Fprintf(&b, "  plugins {\n")
	fmt.Fprintf(&b, "    vici {\n      socket = unix://%s\n    }\n", f.Socket)
	fmt.Fprintf(&b, "    kernel-libipsec {\n      allow_peer_ts = no\n    }\n")
	fmt.Fprintf(&b, "    kernel-netlink {\n      fwmark = %#x\n    }\n", CharonRuleMark)
	fmt.Fprintf(&b, "  }\n")
	fmt.Fprintf(&b, "  filelog {\n    causeway {\n      path = %s\n      default = 1\n      ike = 2\n      flush_line = yes\n      time_format = %%F %%T\n    }\n  }\n", f.Log)
	fmt.Fprintf(&b, "  syslog {\n    identifier = charon-causeway\n    daemon {\n      default = -1\n    }\n  }\n")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// KeyFile is the gateway's X25519 private key in the state directory
// (next to ipsec/, which Cleanup removes; the key stays). Its public key
// is published in the gateway's Endpoint (publicKey).
const KeyFile = "ipsec.key"

// DerivePSK derives the IKE pre-shared key of the cable between the local
// cluster and remote: HKDF-SHA256 of the X25519 shared secret of the local
// private key and the remote's published public key, salted with both
// cluster IDs in order (min, 0, max), info "causeway ipsec psk". Both
// gateways compute the same key from what they publish; no other member
// can, as it lacks both private keys. A remote public key of low order
// (an all-zero shared secret) is refused.
func DerivePSK(priv *ecdh.PrivateKey, remoteKey cable.Key, local, remote string) (cable.Key, error) {
	pub, err := ecdh.X25519().NewPublicKey(remoteKey[:])
	if err != nil {
		return cable.Key{}, fmt.Errorf("public key: %w", err)
	}
	shared, err := priv.ECDH(pub)
	if err != nil {
		return cable.Key{}, fmt.Errorf("public key %s: %w", remoteKey, err)
	}
	a, b := min(local, remote), max(local, remote)
	k, err := hkdf.Key(sha256.New, shared, []byte(a+"\x00"+b), "causeway ipsec psk", len(cable.Key{}))
	if err != nil {
		return cable.Key{}, err
	}
	return cable.Key(k), nil
}

// Identity is the IKE identity of a cluster's gateway (an FQDN-type ID).
func Identity(clusterID string) string { return "@" + clusterID }

// ConnName is the VICI connection (and CHILD_SA and shared-key) name of
// the cable to a remote cluster.
func ConnName(clusterID string) string { return "cw-" + clusterID }

// Peer is a fully resolved connection: what is loaded into charon.
type Peer struct {
	ClusterID string
	Remote    netip.AddrPort
	LocalTS   []netip.Prefix
	RemoteTS  []netip.Prefix
	PSK       cable.Key
	// ESP are the ESP proposals, best first.
	ESP []string
}

// Fingerprint identifies a Peer's configuration; equal fingerprints mean
// a Set leaves the loaded connection alone. The PSK enters only hashed.
func (p Peer) Fingerprint(localID string) string {
	h := sha256.New()
	fmt.Fprintf(h, "v1|%s|%s|%s|%v|%v|%s|%v|%x", localID, p.ClusterID, p.Remote, p.LocalTS, p.RemoteTS,
		IKEProposal, p.ESP, p.PSK[:])
	return fmt.Sprintf("%x", h.Sum(nil)[:16])
}

// SourceAddr is the address the driver gives charon's TUN for a local
// traffic selector p that no address of the namespace lies in (see
// ensureSourceAddrs): one Kubernetes never allocates to a pod or a
// ClusterIP. For IPv4 the last address of p (its broadcast address); for
// IPv6 the first (the subnet-router anycast address: the ClusterIP
// allocator and host-local IPAM skip it, while IPv6 has no broadcast
// address and the last one is an ordinary ClusterIP).
func SourceAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	if p.Addr().Is6() {
		return p.Addr()
	}
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
