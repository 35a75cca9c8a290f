package wire

import (
	"net"
	"os"
	"syscall"
)

// rawConn returns c's raw connection, or nil for one without a descriptor
// (an in-memory connection in tests).
func rawConn(c net.Conn) syscall.RawConn {
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}

// readNow reads what the socket fd holds into p, again if a signal
// interrupted the read. ready is false when nothing has come yet: a
// RawConn callback then asks the poller to wait.
func readNow(fd uintptr, p []byte) (n int, ready bool, err error) {
	for {
		n, err = syscall.Read(int(fd), p)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.EAGAIN:
		return 0, false, nil
	case err != nil:
		return 0, true, err
	}
	return n, true, nil
}

// socketError wraps the failed system call op on conn as the net package
// wraps its own failures.
func socketError(conn net.Conn, op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// twoWrites sends two slices to a connection in one writev (one system
// call on a socket). It lives in the connection it serves: a net.Buffers
// local to the call would escape, an allocation a write.
type twoWrites struct {
	vec  [2][]byte
	bufs net.Buffers
}

// send writes a, then b, to conn and returns how much of b went out.
func (w *twoWrites) send(conn net.Conn, a, b []byte) (int, error) {
	w.vec = [2][]byte{a, b}
	w.bufs = w.vec[:]
	n, err := w.bufs.WriteTo(conn)
	w.vec, w.bufs = [2][]byte{}, nil // no reference to the callers' buffers
	return max(int(n)-len(a), 0), err
}
