package lb

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// dnsZone is an in-process DNS server on 127.0.0.1 (UDP), with A records
// a test changes between refreshes; it answers NXDOMAIN for a name it has
// none of, and NOERROR with no answer for other types of a name it has.
// Started outside a synctest bubble: its server waits on a real socket.
// The fakes it names are in-memory servers on the harness network, listening
// on the addresses the records give ("10.0.0.1:30010"): pdlb dials what DNS
// answers, and the bubble's clock moves, as it would not with a goroutine
// waiting on a socket (inBubble).
type dnsZone struct {
	addr string
	mu   sync.Mutex
	a    map[string][]string // by lower-case FQDN
}

func newDNSZone(t *testing.T) *dnsZone {
	t.Helper()
	primeResolver()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &dnsZone{addr: pc.LocalAddr().String(), a: map[string][]string{}}
	srv := &dns.Server{PacketConn: pc, Handler: z}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return z
}

// primeResolver has Go's resolver read its process-wide configuration
// here, outside any bubble: built inside one, it would belong to that
// bubble, and a lookup in the next would be a fatal error (as package
// discovery's TestMain does).
func primeResolver() {
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no dns while priming")
	}}
	r.LookupNetIP(context.Background(), "ip", "pdlb.invalid.")
}

// set makes addrs the A records of name; none forgets it.
func (z *dnsZone) set(name string, addrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.a[strings.ToLower(dns.Fqdn(name))] = addrs
	if len(addrs) == 0 {
		delete(z.a, strings.ToLower(dns.Fqdn(name)))
	}
}

func (z *dnsZone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	z.mu.Lock()
	q := req.Question[0]
	addrs, ok := z.a[strings.ToLower(q.Name)]
	if !ok {
		m.Rcode = dns.RcodeNameError
	}
	if q.Qtype == dns.TypeA {
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(a)})
		}
	}
	z.mu.Unlock()
	w.WriteMsg(m)
}

// dnsDecodes is defaultConfig with its decodes found at name in z, found
// in turn by round_robin, so that two requests reach two decodes.
func dnsDecodes(z *dnsZone, name string) Config {
	cfg := defaultConfig()
	cfg.Decode = nil
	cfg.DecodePolicy = PolicyRoundRobin
	cfg.DNS = DNSConfig{Decode: []string{name}, Server: z.addr, Refresh: 5 * time.Second, RemoveAfter: 30 * time.Second}
	return cfg
}

// decodeURLs are the URLs of srv's decodes, sorted.
func decodeURLs(srv *Server) []string {
	var urls []string
	for _, b := range srv.decodes.backends() {
		urls = append(urls, b.url)
	}
	slices.Sort(urls)
	return urls
}

// pdlb started with no decode but a name serves once DNS answers; a decode
// added to the answer joins within one refresh and takes requests; one gone
// from the answer stays for RemoveAfter, then leaves, its stream in flight
// finishing (drained) and no new request reaching it (issue 23 §3).
func TestDecodesFromDNS(t *testing.T) {
	z := newDNSZone(t)
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		d1 := h.fake("10.0.0.1:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second, TokenDelay: 2 * time.Second})
		d2 := h.fake("10.0.0.2:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})
		cfg := dnsDecodes(z, "d.pdlb.test:30010")
		srv := h.start(cfg)
		synctest.Wait() // the first refresh: nothing there yet

		ready := h.do(fasthttp.MethodGet, "/readiness", "")
		if ready.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(ready.body), `"a ready decode"`) {
			t.Errorf("/readiness before DNS answers: got %d %s; want 503 naming the decode", ready.status, ready.body)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusServiceUnavailable {
			t.Errorf("before DNS answers: got %d %s; want 503", r.status, r.body)
		}

		z.set("d.pdlb.test", "10.0.0.1")
		time.Sleep(cfg.DNS.Refresh)
		synctest.Wait()
		if r := h.post("/generate", `{"text": "a", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusOK {
			t.Fatalf("once DNS answers: got %d %s; want 200", r.status, r.body)
		}
		if r := h.do(fasthttp.MethodGet, "/readiness", ""); r.status != fasthttp.StatusOK {
			t.Errorf("/readiness once DNS answers: got %d %s; want 200", r.status, r.body)
		}
		// A stream on decode 1 (2 s a token) that outlives its removal.
		st := h.openStream("/generate", `{"text": "s", "stream": true, "sampling_params": {"max_new_tokens": 40}}`)

		z.set("d.pdlb.test", "10.0.0.1", "10.0.0.2")
		time.Sleep(cfg.DNS.Refresh)
		synctest.Wait()
		if got, want := decodeURLs(srv), []string{"http://10.0.0.1:30010", "http://10.0.0.2:30010"}; !slices.Equal(got, want) {
			t.Fatalf("one refresh after a decode joined DNS: got decodes %q; want %q", got, want)
		}
		for range 2 { // round_robin: one of them reaches decode 2
			if r := h.post("/generate", `{"text": "b", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusOK {
				t.Fatalf("with two decodes: got %d %s; want 200", r.status, r.body)
			}
		}
		if got := d2.Stats().GenerateRequests; got != 1 {
			t.Fatalf("the decode found in DNS served %d requests; want 1", got)
		}

		z.set("d.pdlb.test", "10.0.0.2")
		time.Sleep(cfg.DNS.Refresh)
		synctest.Wait()
		if got := decodeURLs(srv); len(got) != 2 {
			t.Fatalf("one refresh after a decode left DNS: got decodes %q; want it kept for RemoveAfter", got)
		}
		time.Sleep(cfg.DNS.RemoveAfter)
		synctest.Wait()
		if got, want := decodeURLs(srv), []string{"http://10.0.0.2:30010"}; !slices.Equal(got, want) {
			t.Fatalf("RemoveAfter after a decode left DNS: got decodes %q; want %q", got, want)
		}
		served1 := d1.Stats().GenerateRequests
		for range 3 {
			if r := h.post("/generate", `{"text": "c", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusOK {
				t.Fatalf("after decode 1 left: got %d %s; want 200", r.status, r.body)
			}
		}
		if got := d1.Stats().GenerateRequests; got != served1 {
			t.Errorf("decode 1 got %d requests after it left; want none", got-served1)
		}
		if !h.hasSeries(`backend="10.0.0.1:30010"`) {
			t.Error("decode 1's series went while its stream was in flight")
		}
		if evs := st.rest(); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "[DONE]") {
			t.Errorf("the stream on the decode gone from DNS: got %q; want it whole, up to [DONE]", evs)
		}
		time.Sleep(drainPoll)
		synctest.Wait()
		if h.hasSeries(`backend="10.0.0.1:30010"`) {
			t.Error("decode 1's series outlived its drain")
		}
		if !h.hasSeries(`pdlb_dns_workers_changed_total{change="added"} 2`) ||
			!h.hasSeries(`pdlb_dns_workers_changed_total{change="removed"} 1`) {
			t.Error("the changes applied are not counted")
		}
	})
}

// Two pdlb replicas on the same fakes and the same DNS hold the same
// decodes one refresh after each change, whatever refresh each started
// at, and both serve (issue 23 §4).
func TestReplicasConvergeOnDNS(t *testing.T) {
	z := newDNSZone(t)
	z.set("d.pdlb.test", "10.0.0.1")
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		for _, addr := range []string{"10.0.0.1:30010", "10.0.0.2:30010", "10.0.0.3:30010"} {
			h.fake(addr, fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})
		}
		cfg := dnsDecodes(z, "d.pdlb.test:30010")
		a := h.start(cfg)
		time.Sleep(2 * time.Second) // b refreshes 2 s after a
		b, post := startReplica(t, h, cfg, "pdlb-b:8000")
		synctest.Wait()

		for _, step := range []struct{ answer, want []string }{
			{[]string{"10.0.0.1", "10.0.0.2"}, []string{"http://10.0.0.1:30010", "http://10.0.0.2:30010"}},
			// 10.0.0.1 stays for RemoveAfter.
			{[]string{"10.0.0.2", "10.0.0.3"}, []string{"http://10.0.0.1:30010", "http://10.0.0.2:30010", "http://10.0.0.3:30010"}},
		} {
			z.set("d.pdlb.test", step.answer...)
			time.Sleep(cfg.DNS.Refresh)
			synctest.Wait()
			if ga, gb := decodeURLs(a), decodeURLs(b); !slices.Equal(ga, step.want) || !slices.Equal(gb, step.want) {
				t.Fatalf("one refresh after DNS answered %q: got replicas with decodes %q and %q; want %q", step.answer, ga, gb, step.want)
			}
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
				t.Errorf("replica a: got %d %s; want 200", r.status, r.body)
			}
			if status := post(`{"text": "a"}`); status != fasthttp.StatusOK {
				t.Errorf("replica b: got %d; want 200", status)
			}
		}
		// The decode gone from DNS leaves both after RemoveAfter.
		time.Sleep(cfg.DNS.RemoveAfter)
		synctest.Wait()
		want := []string{"http://10.0.0.2:30010", "http://10.0.0.3:30010"}
		if ga, gb := decodeURLs(a), decodeURLs(b); !slices.Equal(ga, want) || !slices.Equal(gb, want) {
			t.Fatalf("after RemoveAfter: got replicas with decodes %q and %q; want %q", ga, gb, want)
		}
	})
}

// startReplica runs a second pdlb with cfg on h's network, listening on
// addr, and returns it with a function that posts a body to its /generate
// and returns the status.
func startReplica(t *testing.T, h *harness, cfg Config, addr string) (*Server, func(body string) int) {
	t.Helper()
	cfg.Dial = h.nw.Dial
	srv, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := h.nw.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	cl := &fasthttp.HostClient{Addr: addr, Dial: func(string) (net.Conn, error) { return h.nw.Dial(addr) }}
	t.Cleanup(func() {
		cl.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %s", err)
		}
		<-served
	})
	post := func(body string) int {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://" + addr + "/generate")
		req.SetBodyString(body)
		if err := cl.Do(req, resp); err != nil {
			t.Fatalf("replica %s: %s", addr, err)
		}
		return resp.StatusCode()
	}
	return srv, post
}

// A pool DNS fills may be empty at start; one nothing fills may not, and a
// name or DNS server that cannot be used is refused.
func TestValidateDNSWorkers(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"decodes from DNS", func(c *Config) { c.Decode = nil; c.DNS.Decode = []string{"d.pdlb.test"} }, ""},
		{"prefills from DNS", func(c *Config) { c.Prefill = nil; c.DNS.Prefill = []string{"p.pdlb.test:30000"} }, ""},
		{"no decode, for the API to add", func(c *Config) { c.Decode = nil; c.DNS.Fallback = []string{"f.pdlb.test"} }, ""},
		{"bad name", func(c *Config) { c.DNS.Decode = []string{"d.pdlb.test:http"} }, "invalid DNS discovery"},
		{"bad server", func(c *Config) { c.DNS.Decode = []string{"d.pdlb.test"}; c.DNS.Server = "127.0.0.1" }, "DNS server"},
		{"negative refresh", func(c *Config) { c.DNS.Decode = []string{"d.pdlb.test"}; c.DNS.Refresh = -time.Second }, "refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v; want valid", err)
			case tc.want == "":
				if _, err := New(cfg, zerolog.Nop()); err != nil {
					t.Fatalf("cannot build a server with a pool empty at start: %s", err)
				}
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

// A name that stops answering keeps its decodes, however long, and each
// answer not taken is counted: a DNS outage never empties a pool.
func TestDNSOutageKeepsDecodes(t *testing.T) {
	z := newDNSZone(t)
	z.set("d.pdlb.test", "10.0.0.1")
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		h.fake("10.0.0.1:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})
		cfg := dnsDecodes(z, "d.pdlb.test:30010")
		srv := h.start(cfg)
		synctest.Wait()
		z.set("d.pdlb.test") // NXDOMAIN from now on
		time.Sleep(cfg.DNS.RemoveAfter + cfg.DNS.Refresh)
		synctest.Wait()
		if got := decodeURLs(srv); !slices.Equal(got, []string{"http://10.0.0.1:30010"}) {
			t.Fatalf("after an outage of RemoveAfter: got decodes %q; want the last found kept", got)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Errorf("during the outage: got %d %s; want 200", r.status, r.body)
		}
		if got := h.metric("pdlb_dns_kept_total"); got == "" || got == "0" {
			t.Errorf("got pdlb_dns_kept_total %q; want the answers not taken counted", got)
		}
	})
}
