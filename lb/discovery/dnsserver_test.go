package discovery

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// zone is an in-process DNS server on 127.0.0.1 (UDP and TCP, on the same
// ephemeral port) whose answers a test changes between refreshes. It
// answers NXDOMAIN for a name it has no record of, NOERROR with no answer
// for a name that has records of other types only, and SERVFAIL for
// every name while failing is set.
type zone struct {
	addr string

	mu      sync.Mutex
	records map[string][]dns.RR // by lower-case FQDN
	failing bool
}

// newZone starts a zone that stops at the end of the test.
func newZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{records: map[string][]dns.RR{}}
	pc, ln := listenUDPAndTCP(t)
	z.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: z}, {Listener: ln, Handler: z}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return z
}

// listenUDPAndTCP listens on one ephemeral port of 127.0.0.1 for both
// UDP and TCP, as a DNS server does. The UDP port is free for TCP only
// most of the time: another one is drawn when it is not.
func listenUDPAndTCP(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("cannot listen on udp: %s", err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
		lastErr = err
	}
	t.Fatalf("cannot listen on tcp beside udp: %s", lastErr)
	return nil, nil
}

// set replaces every record of name with rrs, given in zone-file syntax
// ("A 10.0.0.1", "AAAA ::1", "SRV 0 0 30000 p0.pdlb.test."); no rrs
// forgets the name (NXDOMAIN).
func (z *zone) set(t *testing.T, name string, rrs ...string) {
	t.Helper()
	name = strings.ToLower(dns.Fqdn(name))
	var parsed []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(name + " 1 IN " + s)
		if err != nil {
			t.Fatalf("bad record %q: %s", s, err)
		}
		parsed = append(parsed, rr)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(parsed) == 0 {
		delete(z.records, name)
		return
	}
	z.records[name] = parsed
}

// fail makes every answer SERVFAIL while on is set.
func (z *zone) fail(on bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.failing = on
}

// ServeDNS answers one query from the records.
func (z *zone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	z.mu.Lock()
	switch {
	case z.failing:
		m.Rcode = dns.RcodeServerFailure
	case len(req.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	default:
		q := req.Question[0]
		rrs, ok := z.records[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
		}
	}
	z.mu.Unlock()
	if _, ok := w.LocalAddr().(*net.UDPAddr); ok {
		// What a real server does with an answer too large for UDP: cut
		// it, set TC, and let the client ask again over TCP.
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}
