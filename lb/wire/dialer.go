package wire

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// Dialer reaches workers: their calls (through Dialers), health checks and
// bootstrap servers. It dials TCP over IPv4 and IPv6, as workers may listen
// on either, or with the dial given in its place (tests pass in-memory
// listeners). It keeps a name's addresses for seconds, not fasthttp's
// default minute: a worker that restarts (a Kubernetes pod) comes back at a
// new address, and pdlb would dial the old one, and take the worker for
// down, meanwhile.
type Dialer struct {
	tcp  fasthttp.TCPDialer
	dial fasthttp.DialFunc
}

// NewDialer makes a Dialer that dials with dial, or over TCP when it is
// nil.
func NewDialer(dial fasthttp.DialFunc) *Dialer {
	return &Dialer{tcp: fasthttp.TCPDialer{DNSCacheDuration: 5 * time.Second}, dial: dial}
}

// probeDialTimeout bounds the dials of health checks and the bootstrap
// registry, which bound their whole calls themselves.
const probeDialTimeout = 5 * time.Second

// Dial is a fasthttp.DialFunc for the health checks and the bootstrap
// registry: it connects within probeDialTimeout.
func (d *Dialer) Dial(addr string) (net.Conn, error) {
	if d.dial != nil {
		return d.dial(addr)
	}
	return d.tcp.DialDualStackTimeout(addr, probeDialTimeout)
}

// DialTimeout is a fasthttp.DialFuncWithTimeout: it connects to addr within
// timeout, for calls that bound their dial (the load polls).
func (d *Dialer) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.dial != nil {
		return d.dial(addr)
	}
	return d.tcp.DialDualStackTimeout(addr, timeout)
}

// DialWorker is a fasthttp.DialFuncWithTimeout for a worker's calls, which
// Dialers runs: its connections remember their deadlines and send each
// request with the first read of its answer (workerConn).
func (d *Dialer) DialWorker(addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := d.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return newWorkerConn(conn), nil
}
