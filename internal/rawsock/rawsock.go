// Package rawsock holds the socket system calls that tests and benchmarks
// make directly (package net hides what they measure, such as IPv4-mapped
// peers), made safe against the signals of the Go runtime.
package rawsock

import "golang.org/x/sys/unix"

// Connect is connect(2) that completes a connect a signal interrupted: the
// Go runtime preempts threads with signals, and on a socket with a send
// timeout the kernel does not restart connect(2) but goes on connecting in
// the background. Connect then waits (2 s at most) until the socket is
// writable and returns the socket's error, or EINPROGRESS when the wait
// ends first, as connect(2) does when its send timeout ends.
func Connect(fd int, sa unix.Sockaddr) error {
	if err := unix.Connect(fd, sa); err != unix.EINTR {
		return err
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	var n int
	if err := IgnoringEINTR(func() (err error) { n, err = unix.Poll(fds, 2000); return err }); err != nil {
		return err
	}
	if n == 0 {
		return unix.EINPROGRESS
	}
	errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if errno != 0 {
		return unix.Errno(errno)
	}
	return nil
}

// IgnoringEINTR calls f until it returns something other than EINTR: with
// SO_SNDTIMEO or SO_RCVTIMEO set, the kernel does not restart socket calls
// that a signal interrupted.
func IgnoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
