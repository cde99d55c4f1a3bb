package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/causeway-net/causeway/lab/netlab"
)

// executor runs `kubectl exec` commands of one container: a host program
// in the pod's network namespace and cgroup, with the container's
// environment, in a session of its own (killed with its process group
// when the client goes away).
type executor struct {
	k         *Kubelet
	pod       *corev1.Pod
	container corev1.Container
}

var _ remotecommand.Executor = (*executor)(nil)

// ExecInContainer implements remotecommand.Executor. A non-zero exit is
// returned as a utilexec.ExitError, which the streaming server reports to
// the client as the command's exit code.
func (e *executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	k := e.k
	path, err := k.cfg.Apps.ExecPath(e.container.Image, cmd[0])
	if err != nil {
		return err
	}
	netns, cgroup := k.sandbox(e.pod)
	env, err := k.env(ctx, e.pod, e.container, e.pod.Status.PodIP)
	if err != nil {
		return err
	}
	args := cmd[1:]
	pid, err := containerPid(e.pod, e.container.Name)
	if err != nil {
		return err
	}
	if mnt := fmt.Sprintf("/proc/%d/ns/mnt", pid); !sameFile(mnt, "/proc/self/ns/mnt") {
		// Into the container's mount namespace, where its volumes,
		// resolv.conf and hosts are.
		args = append([]string{"--mount=" + mnt, "--", path}, args...)
		if path, err = exec.LookPath("nsenter"); err != nil {
			return fmt.Errorf("exec into a container with a mount namespace of its own needs nsenter(1): %w", err)
		}
	}
	p := netlab.Process{
		Netns: netns, Cgroup: cgroup,
		Path: path, Args: args,
		Env:    append(os.Environ(), env...),
		Dir:    e.container.WorkingDir,
		Setsid: true,
	}
	var (
		ptmx   *os.File
		copies = make(chan struct{}, 2)
		wait   int // copies to wait for after the process ended
	)
	if tty {
		var ttyFile *os.File
		ptmx, ttyFile, err = pty.Open()
		if err != nil {
			return fmt.Errorf("open a terminal: %w", err)
		}
		defer ptmx.Close()
		p.Stdin, p.Stdout, p.Stderr, p.Ctty = ttyFile, ttyFile, ttyFile, true
		proc, err := k.cfg.Host.Start(p)
		ttyFile.Close() // the child has it
		if err != nil {
			return err
		}
		go func() {
			for size := range resize {
				_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
		if stdin != nil {
			go io.Copy(ptmx, stdin)
		}
		if stdout != nil {
			wait++
			go func() {
				io.Copy(stdout, ptmx) // ends with EIO once every holder of the terminal closed it
				copies <- struct{}{}
			}()
		}
		return e.wait(ctx, proc, copies, wait)
	}
	var stdinW io.WriteCloser
	if stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		p.Stdin, stdinW = r, w
	}
	// Without a writer the child gets /dev/null; the streaming server
	// hands out only the streams the client asked for.
	if stdout != nil {
		p.Stdout = stdout
	}
	if stderr != nil {
		p.Stderr = stderr
	}
	proc, err := k.cfg.Host.Start(p)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return err
	}
	if stdinW != nil {
		go func() {
			io.Copy(stdinW, stdin)
			stdinW.Close()
		}()
		// A command that exits without reading its input must not
		// wait for the client to close it.
		defer stdinW.Close()
	}
	return e.wait(ctx, proc, copies, wait)
}

// wait waits for the process (killing its process group if ctx ends
// first) and then for n output copies; it turns an exit status into the
// error ExecInContainer returns.
func (e *executor) wait(ctx context.Context, proc *exec.Cmd, copies <-chan struct{}, n int) error {
	pid := proc.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = unix.Kill(-pid, unix.SIGKILL) })
	defer stop()
	err := proc.Wait()
	for range n {
		<-copies
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	code := exit.ExitCode()
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// portForwarder connects `kubectl port-forward` streams to a port on the
// pod's loopback, from inside the pod's network namespace (the node's for
// hostNetwork pods), as the real kubelet does.
type portForwarder struct {
	k   *Kubelet
	pod *corev1.Pod
}

// PortForward implements portforward.PortForwarder.
func (f *portForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d out of range", port)
	}
	netns, _ := f.k.sandbox(f.pod)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := f.k.dialIn(dctx, netns, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, stream)
		if c, ok := conn.(interface{ CloseWrite() error }); ok {
			c.CloseWrite()
		}
	}()
	if _, err := io.Copy(stream, conn); err != nil {
		return fmt.Errorf("copy from pod port %d: %w", port, err)
	}
	return nil
}

// containerPid is the process of a running container, from its status.
func containerPid(pod *corev1.Pod, name string) (int, error) {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != name || s.State.Running == nil {
			continue
		}
		if pid, ok := ContainerPID(s.ContainerID); ok {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("container %s of pod %s/%s has no running process", name, pod.Namespace, pod.Name)
}

// sameFile reports whether two paths name the same file (namespace
// links: the same namespace).
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
