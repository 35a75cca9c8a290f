// Package loopback makes loopback TCP connections for tests of code that
// reads and writes sockets.
package loopback

import "net"

// Pair returns both ends of a new loopback TCP connection: the one dialled
// and the one accepted.
func Pair() (dialed, accepted net.Conn, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	if dialed, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		return nil, nil, err
	}
	if accepted, err = ln.Accept(); err != nil {
		dialed.Close()
		return nil, nil, err
	}
	return dialed, accepted, nil
}
