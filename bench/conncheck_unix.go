//go:build unix

package bench

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the target has closed or reset an idle
// connection, without blocking and without taking a byte from it: a
// MSG_PEEK read on the socket, which Go keeps non-blocking (the MySQL
// driver's connCheck does the same). It reports false when it cannot tell,
// for a connection that is not a socket, and when bytes are waiting.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		switch {
		case err == nil:
			closed = n == 0 // EOF
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default:
			closed = true // ECONNRESET and the like
		}
		return true // never wait for the socket to become readable
	})
	return err == nil && closed
}
