package bpf_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/bpf"
)

// dialEnv, when set, turns the test binary into a client that dials the
// address in it, writes its cgroup to the connection and exits (see TestMain).
const dialEnv = "CAUSEWAY_BPF_TEST_DIAL"

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		if err := dial(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dial connects to addr over TCP and sends the caller's cgroup v2 path.
func dial(addr string) error {
	cgroup, err := ownCgroup2()
	if err != nil {
		return err
	}
	conn, err := net.Dial("tcp4", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = io.WriteString(conn, cgroup+"\n")
	return err
}

// ownCgroup2 returns this process's cgroup v2 path from /proc/self/cgroup.
func ownCgroup2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return path, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted, read from
// /proc/self/mountinfo (e.g. /sys/fs/cgroup, or /sys/fs/cgroup/unified on
// hybrid hosts).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
		fields := strings.Fields(s.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
}

// endpoint4 returns addr:port in the map layout: both in network byte order.
func endpoint4(ap netip.AddrPort) bpf.Connect4Endpoint4 {
	addr := ap.Addr().As4()
	return bpf.Connect4Endpoint4{
		Addr: binary.NativeEndian.Uint32(addr[:]),
		Port: binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, ap.Port())),
	}
}

// enterNewNetns moves the calling goroutine's OS thread into a fresh network
// namespace with loopback up. The thread stays locked, so the runtime
// destroys it, and with it the namespace, when the test goroutine ends.
func enterNewNetns(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare network namespace: %v", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatalf("get lo flags: %v", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("set lo up: %v", err)
	}
}

// TestConnect4RewritesInCgroup attaches the connect4 program to a new cgroup
// and checks that a process in that cgroup dialing 127.0.0.2:P reaches a
// listener on 127.0.0.1:P, while the same process outside the cgroup is
// refused. Everything runs in a fresh network namespace.
func TestConnect4RewritesInCgroup(t *testing.T) {
	requireBPF(t)
	enterNewNetns(t)

	mnt, err := cgroup2Mount()
	if err != nil {
		t.Skipf("cgroup v2 is not mounted: %v", err)
	}
	cgDir, err := os.MkdirTemp(mnt, "causeway-bpf-test-")
	if err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cgDir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	cg, err := os.Open(cgDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.Close() })

	var objs bpf.Connect4Objects
	if err := bpf.LoadConnect4Objects(&objs, nil); err != nil {
		t.Fatalf("load connect4: %+v", err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	lnk, err := link.AttachCgroup(link.CgroupOptions{
		Path:    cgDir,
		Attach:  ebpf.AttachCGroupInet4Connect,
		Program: objs.RewriteConnect4,
	})
	if err != nil {
		t.Fatalf("attach connect4 to %s: %v", cgDir, err)
	}
	t.Cleanup(func() { _ = lnk.Close() })

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	backend := netip.MustParseAddrPort(ln.Addr().String())
	vip := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), backend.Port())
	if err := objs.Connect4Rewrites.Put(endpoint4(vip), endpoint4(backend)); err != nil {
		t.Fatalf("put rewrite: %v", err)
	}

	// The child inherits this thread's network namespace: exec forks from
	// the locked thread.
	client := func(attr *syscall.SysProcAttr) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), dialEnv+"="+vip.String())
		cmd.SysProcAttr = attr
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		return cmd, &stderr
	}

	// Outside the cgroup nothing rewrites 127.0.0.2, where nothing listens.
	cmd, stderr := client(nil)
	if err := cmd.Run(); err == nil {
		t.Fatalf("client outside the cgroup reached %s: nothing should listen there", vip)
	} else if !strings.Contains(stderr.String(), "connection refused") {
		t.Fatalf("client outside the cgroup: %v: %s", err, stderr)
	}

	// Inside the cgroup the program sends the connection to the listener.
	cmd, stderr = client(&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())})
	if err := cmd.Run(); err != nil {
		t.Fatalf("client in the cgroup dialing %s: %v: %s", vip, err, stderr)
	}
	conn, err := ln.Accept() // already queued: the client connected and wrote
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read from client: %v", err)
	}
	wantCgroup := "/" + strings.TrimPrefix(cgDir, mnt+"/")
	if got := strings.TrimSpace(string(msg)); got != wantCgroup {
		t.Errorf("client reports cgroup %q, want %q", got, wantCgroup)
	}
	if got := conn.LocalAddr().String(); got != backend.String() {
		t.Errorf("connection accepted on %s, want %s", got, backend)
	}
}
