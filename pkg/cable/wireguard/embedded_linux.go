package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// embedded is a wireguard-go device running in this process over a TUN
// device in the target namespace. It serves its UAPI socket in
// /var/run/wireguard/<name>.sock, through which wgctrl (and `wg`)
// configure it.
type embedded struct {
	dev      *device.Device
	tun      tun.Device
	uapi     net.Listener
	wg       sync.WaitGroup
	offloads Offloads
}

// Offloads reports which batching/offload features the embedded device
// uses.
type Offloads struct {
	// TUNVnetHdr: the TUN has IFF_VNET_HDR with TSO/checksum offload, so
	// wireguard-go reads and writes TCP super-packets (GSO/GRO on TUN).
	TUNVnetHdr bool
	// TUNBatch is the TUN read/write batch size.
	TUNBatch int
	// UDPGSO / UDPGRO: the kernel supports UDP_SEGMENT / UDP_GRO on the
	// namespace's UDP sockets; StdNetBind then sends and receives batches
	// of encrypted datagrams as one super-packet.
	UDPGSO, UDPGRO bool
	// BindBatch is the bind's sendmmsg/recvmmsg batch size.
	BindBatch int
}

// nsTUN runs the TUN ioctls that look the device up by name (MTU) inside
// the device's namespace.
type nsTUN struct {
	tun.Device
	ns string
}

func (t *nsTUN) MTU() (int, error) {
	var mtu int
	err := netnsx.Do(t.ns, func() error {
		var err error
		mtu, err = t.Device.MTU()
		return err
	})
	return mtu, err
}

// nsBind opens wireguard-go's UDP sockets on a thread switched into the
// target namespace; the sockets stay there, the rest runs anywhere.
type nsBind struct {
	conn.Bind
	ns string
}

func (b *nsBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	var (
		fns    []conn.ReceiveFunc
		actual uint16
	)
	err := netnsx.Do(b.ns, func() error {
		var err error
		fns, actual, err = b.Bind.Open(port)
		return err
	})
	return fns, actual, err
}

// NewNamespacedBind returns wireguard-go's standard bind (UDP GSO/GRO,
// batched I/O) with its sockets opened inside the namespace at nsPath.
func NewNamespacedBind(nsPath string) conn.Bind {
	return &nsBind{Bind: conn.NewStdNetBind(), ns: nsPath}
}

// CreateTUN creates a wireguard-go TUN device (with vnet_hdr offloads)
// named name inside the namespace at nsPath.
func CreateTUN(nsPath, name string, mtu int) (tun.Device, error) {
	var t tun.Device
	err := netnsx.Do(nsPath, func() error {
		var err error
		t, err = tun.CreateTUN(name, mtu)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create tun %s: %w", name, err)
	}
	return &nsTUN{Device: t, ns: nsPath}, nil
}

func startEmbedded(nsPath, name string, mtu int, log *slog.Logger) (*embedded, error) {
	t, err := CreateTUN(nsPath, name, mtu)
	if err != nil {
		return nil, err
	}
	logger := &device.Logger{
		Verbosef: func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.Error(fmt.Sprintf(format, args...)) },
	}
	bind := NewNamespacedBind(nsPath)
	dev := device.NewDevice(t, bind, logger)
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("open uapi socket for %s: %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	f.Close()
	if err != nil {
		dev.Close()
		os.Remove(SocketPath(name))
		return nil, fmt.Errorf("listen on uapi socket for %s: %w", name, err)
	}
	e := &embedded{dev: dev, tun: t, uapi: l}
	e.offloads = probeOffloads(nsPath, t, bind)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	return e, nil
}

// SocketPath is where wireguard-go serves the UAPI socket of device name.
func SocketPath(name string) string { return "/var/run/wireguard/" + name + ".sock" }

// RemoveStaleSocket removes the UAPI socket of device name when no
// process serves it — an embedded device's process killed (SIGKILL runs
// no close, so the file stays while the device is gone) — and reports
// whether it did. A served socket, or none, is left alone.
func RemoveStaleSocket(name string) (bool, error) {
	path := SocketPath(name)
	c, err := net.Dial("unix", path)
	switch {
	case err == nil:
		c.Close()
		return false, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case !errors.Is(err, unix.ECONNREFUSED):
		return false, fmt.Errorf("probe uapi socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove stale uapi socket: %w", err)
	}
	return true, nil
}

func (e *embedded) close() error {
	err := e.uapi.Close() // unlinks the socket
	e.wg.Wait()
	e.dev.Close() // closes the TUN: the kernel removes the device and its routes
	// A listener already closed is no failure to stop: wireguard-go's
	// listener closes itself (and its cancel pipe, hence os.ErrClosed)
	// when another process removes its socket file.
	if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}

func probeOffloads(nsPath string, t tun.Device, b conn.Bind) Offloads {
	o := Offloads{TUNBatch: t.BatchSize(), BindBatch: b.BatchSize()}
	o.TUNVnetHdr = o.TUNBatch > 1
	netnsx.Do(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		o.UDPGSO = err == nil
		o.UDPGRO = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
		return nil
	})
	return o
}
