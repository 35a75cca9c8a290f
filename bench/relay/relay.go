// Package relay is a featureless TCP relay: each connection it accepts is
// piped to an upstream address, with plain reads and writes and nothing
// else. It is the floor of any proxy, one more hop on the path, which
// `make bench` puts beside pdlb so that what pdlb's features cost can be
// told from what the hop itself costs on the machine. Given several
// upstreams it takes them in turn, connection by connection, as an L4
// balancer (a Kubernetes Service) spreads clients over pdlb replicas:
// `make bench-routing` runs two replicas behind it.
package relay

import (
	"errors"
	"net"
	"sync"
)

// bufSize is each direction's buffer: an SSE event or a small request fits.
const bufSize = 4 << 10

// Serve relays every connection accepted on ln to one of upstreams, each in
// turn, until ln is closed, then closes the connections it relays and
// waits for them to end.
func Serve(ln net.Listener, upstreams ...string) error {
	if len(upstreams) == 0 {
		return errors.New("relay: no upstream")
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		clients = make(map[net.Conn]struct{})
	)
	defer func() {
		mu.Lock()
		for c := range clients {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for next := 0; ; next = (next + 1) % len(upstreams) {
		client, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		mu.Lock()
		clients[client] = struct{}{}
		mu.Unlock()
		upstream := upstreams[next]
		wg.Go(func() {
			relay(client, upstream)
			mu.Lock()
			delete(clients, client)
			mu.Unlock()
		})
	}
}

// relay pipes client to a new connection to upstream and back. The client's
// end of input is passed on as a half close; the upstream's end closes both.
func relay(client net.Conn, upstream string) {
	defer client.Close()
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		pipe(up, client)
		if tcp, ok := up.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}()
	pipe(client, up)
}

// pipe copies src to dst until either fails. It reads and writes itself:
// io.Copy would splice(2) through a pipe, which costs more than it saves
// on small messages.
func pipe(dst, src net.Conn) {
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
