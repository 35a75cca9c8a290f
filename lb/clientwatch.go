package lb

import "net"

// clientWatch is a watch of a client connection for a wait outside an
// exchange (a request waiting for its pair's warm-up): c is closed if the
// client goes away before stop.
type clientWatch struct {
	c    chan struct{}
	conn *clientConn
}

// watchClient watches conn if it is a client connection pdlb accepted (in
// tests it may be another kind, which is not watched).
func watchClient(conn net.Conn) clientWatch {
	w := clientWatch{c: make(chan struct{})}
	if cc, ok := conn.(*clientConn); ok {
		w.conn = cc
		cc.watch(func() { close(w.c) })
	}
	return w
}

// stop ends the watch and gives the connection back to fasthttp.
func (w clientWatch) stop() {
	if w.conn != nil {
		w.conn.unwatch()
	}
}
