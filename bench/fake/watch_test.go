package fake

import (
	"errors"
	"net"
	"testing"

	"github.com/valyala/fasthttp/fasthttputil"
)

// A connection the server closed reads nothing more, even what its peer
// sent before the close: in memory as on a socket, so a request that was on
// its way when CloseIdleConnections closed the connection is never served
// without an answer (the load balancer resends it, and it must run once).
func TestClosedConnReadsNothing(t *testing.T) {
	pipe := fasthttputil.NewPipeConns()
	client, server := pipe.Conn1(), &watchConn{Conn: pipe.Conn2()}
	defer client.Close()
	if _, err := client.Write([]byte("POST /generate HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	var b [64]byte
	if n, err := server.Read(b[:]); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read %d bytes (%q), err %v, after the server closed; want 0, net.ErrClosed", n, b[:n], err)
	}
}
