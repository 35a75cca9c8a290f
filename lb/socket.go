package lb

import (
	"net"
	"os"
	"syscall"
)

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
