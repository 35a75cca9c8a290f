package fake

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestNetworkInMemory(t *testing.T) {
	n := NewNetwork()
	ln, err := n.Listen("Host:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Listen("host:1"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("got %v listening twice; want EADDRINUSE", err)
	}
	if _, err := n.Dial("nobody:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("got %v dialing nobody; want ECONNREFUSED", err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := n.Dial("HOST:1")
	if err != nil {
		t.Fatalf("got %v dialing with another case; want a connection", err)
	}
	c.Close()
	within(t, accepted, "the accepted connection").Close()
	if got := ln.Addr().String(); got != "host:1" {
		t.Errorf("got listener address %q; want %q", got, "host:1")
	}
	ln.Close()
	if _, err := n.Dial("host:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("got %v dialing a closed address; want ECONNREFUSED", err)
	}
	ln2, err := n.Listen("host:1")
	if err != nil {
		t.Fatalf("got %v listening again after close; want success", err)
	}
	ln2.Close()
}

func TestCanonicalAddr(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := canonicalAddr(in); got != want {
			t.Errorf("got canonicalAddr(%q) = %q; want %q", in, got, want)
		}
	}
	f("Prefill:8998", "prefill:8998")
	f("[::1]:8998", "[::1]:8998")
	f("[FE80::1]:1", "[fe80::1]:1")
	f("noport", "noport")
	if got := joinHostPort("[::1]", "8998"); got != "[::1]:8998" {
		t.Errorf("got %q; want [::1]:8998", got)
	}
}

// TestCrossProcessKV makes the decode meet a prefill missing from its
// registry, as one in another process is: over HTTP /fake/kv_transfer.
func TestCrossProcessKV(t *testing.T) {
	for _, stream := range []bool{false, true} {
		n, p, d := newPD(t, Config{}, Config{})
		n.removePrefill(p.regKeys, p)
		fields := `"text":"hi","sampling_params":{"max_new_tokens":2}`
		if stream {
			fields += `,"stream":true`
		}
		body := pdBody(fields, "prefill", "null", 11)
		pres, dres := both(t, n, "/generate", body, body)
		if pres.status != 200 || dres.status != 200 {
			t.Fatalf("stream=%v: got %d %d; want 200 200: %s %s", stream, pres.status, dres.status, pres.body, dres.body)
		}
		if got := p.Stats().KVTransferHTTP; got != 1 {
			t.Errorf("stream=%v: got KVTransferHTTP %d; want 1", stream, got)
		}
		checkKV(t, p, 1, 0)
		checkKV(t, d, 1, 0)
	}
}

func TestCrossProcessKVTimeout(t *testing.T) {
	t.Parallel()
	cfg := Config{KVTimeout: 200 * time.Millisecond}
	n, p, d := newPD(t, cfg, cfg)
	n.removePrefill(p.regKeys, p)
	dres := do(t, n, "POST", decodeAddr, "/generate", pdBody(`"text":"hi","rid":"r1"`, "prefill", "8998", 3))
	checkServerError(t, "decode", dres, "Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=3 "+
		"with exception KVTransferError(bootstrap_room=3): Request 3 timed out after ")
	checkKV(t, p, 0, 0)
	checkKV(t, d, 0, 1)
}

// TestTCPNetworks runs a PD pair over loopback TCP on two Networks, so the
// decode's Network has no registry entry for the prefill.
func TestTCPNetworks(t *testing.T) {
	pn, dn := NewTCPNetwork(), NewTCPNetwork()
	p := startServer(t, pn, "127.0.0.1:0", Config{Role: RolePrefill, BootstrapAddr: "127.0.0.1:0"})
	d := startServer(t, dn, "127.0.0.1:0", Config{Role: RoleDecode})
	boot := p.endpoint().bootPort
	if boot == 0 {
		t.Fatal("got bootstrap port 0; want the port picked by the OS")
	}
	info := parseJSON(t, do(t, pn, "GET", p.api.addr, "/server_info", "").body)
	if got := info.GetInt("disaggregation_bootstrap_port"); got != boot {
		t.Errorf("got disaggregation_bootstrap_port %d; want %d", got, boot)
	}
	body := pdBody(`"text":"hi","sampling_params":{"max_new_tokens":1}`, "127.0.0.1", strconv.Itoa(boot), 5)
	done := make(chan result, 1)
	go func() {
		res, _ := roundTrip(pn, "POST", p.api.addr, "/generate", body)
		done <- res
	}()
	dres := do(t, dn, "POST", d.api.addr, "/generate", body)
	pres := within(t, done, "the prefill answer")
	if pres.status != 200 || dres.status != 200 {
		t.Fatalf("got %d %d; want 200 200: %s %s", pres.status, dres.status, pres.body, dres.body)
	}
	if got := p.Stats().KVTransferHTTP; got != 1 {
		t.Errorf("got KVTransferHTTP %d; want 1", got)
	}
}

// TestCloseEndsEverything closes servers with requests in every kind of
// wait and checks that Close is prompt and leaves nothing behind.
func TestCloseEndsEverything(t *testing.T) {
	n := NewNetwork()
	arrived := make(chan string, 8)
	hook := func(path string, _ []byte) { arrived <- path }
	p := New(Config{Role: RolePrefill, OnRequest: hook})
	d := New(Config{Role: RoleDecode, OnRequest: hook})
	a := New(Config{TokenGate: make(chan struct{}), OnRequest: hook})
	for addr, s := range map[string]*Server{prefillAddr: p, decodeAddr: d, "agg:30000": a} {
		if err := s.Start(n, addr); err != nil {
			t.Fatal(err)
		}
	}
	answers := make(chan error, 4)
	post := func(addr, body string) {
		_, err := roundTrip(n, "POST", addr, "/generate", body)
		answers <- err
	}
	go post(prefillAddr, pdBody(`"text":"waits for a decode"`, "prefill", "8998", 1))
	go post(decodeAddr, pdBody(`"text":"waits for a prefill","stream":true`, "prefill", "8998", 2))
	go post(decodeAddr, pdBody(`"text":"waits across processes"`, "prefill", "8998", 3))
	go post("agg:30000", `{"text":"waits at the gate","stream":true}`)
	for range 4 {
		within(t, arrived, "the requests to arrive")
	}
	n.removePrefill(p.regKeys, p) // the third request may now go over HTTP
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, s := range []*Server{a, d, p} {
			if err := s.Close(); err != nil {
				t.Errorf("got %v closing; want nil", err)
			}
		}
	}()
	within(t, closed, "Close to return")
	for range 4 {
		within(t, answers, "the requests to end")
	}
	for _, s := range []*Server{p, d, a} {
		if got := s.Stats().InFlight; got != 0 {
			t.Errorf("got %s InFlight %d after Close; want 0", s.cfg.Role, got)
		}
	}
	if got := p.kv.pending(); got != 0 {
		t.Errorf("got %d rendezvous entries after Close; want 0", got)
	}
	goleak.VerifyNone(t, leakOptions...)
}
