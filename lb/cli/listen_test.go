package cli

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// 0.0.0.0 listens on IPv4 only, as it does for uvicorn; :: on both.
func TestListenHonoursTheAddressFamily(t *testing.T) {
	reachableOverIPv6 := func(addr string) bool {
		ln, err := Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		conn, err := net.DialTimeout("tcp6", net.JoinHostPort("::1", port), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	if !reachableOverIPv6("[::]:0") {
		t.Fatal("[::] was not reachable over IPv6")
	}
	if reachableOverIPv6("0.0.0.0:0") {
		t.Error("0.0.0.0 was reachable over IPv6; want IPv4 only")
	}
}
