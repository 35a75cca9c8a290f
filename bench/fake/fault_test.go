package fake

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

// keepAlive is a client connection kept open across requests.
type keepAlive struct {
	conn net.Conn
	br   *bufio.Reader
	addr string
}

// dialKeepAlive connects to addr until the end of the test.
func dialKeepAlive(t *testing.T, n *Network, addr string) *keepAlive {
	t.Helper()
	conn, err := n.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(testDeadline)); err != nil {
		t.Fatal(err)
	}
	return &keepAlive{conn: conn, br: bufio.NewReader(conn), addr: addr}
}

// do sends a request on the connection and reads its answer. It does not
// use t, so it may run on any goroutine.
func (k *keepAlive) do(method, path, body string) (result, error) {
	if err := writeRequest(k.conn, method, k.addr, path, body); err != nil {
		return result{}, err
	}
	return readResult(k.br)
}

// readResult reads an answer, its body whole.
func readResult(br *bufio.Reader) (result, error) {
	var resp fasthttp.Response
	if err := resp.Read(br); err != nil {
		return result{}, fmt.Errorf("cannot read the answer: %w", err)
	}
	return result{resp.StatusCode(), string(resp.Header.ContentType()), string(resp.Body())}, nil
}

// answer is a request's result, or why it has none.
type answer struct {
	res result
	err error
}

// answerAfter sends a request and reads its answer on a goroutine of its
// own, failing if the first byte of it comes before cleared is set.
func answerAfter(cleared *atomic.Bool, n *Network, method, addr, path, body string) <-chan answer {
	answers := make(chan answer, 1)
	go func() {
		res, err := readAfter(cleared, n, method, addr, path, body)
		answers <- answer{res, err}
	}()
	return answers
}

// readAfter is answerAfter's request. It does not use t.
func readAfter(cleared *atomic.Bool, n *Network, method, addr, path, body string) (result, error) {
	conn, br, err := send(n, method, addr, path, body)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	if _, err := br.Peek(1); err != nil {
		return result{}, fmt.Errorf("got no answer: %w", err)
	}
	if !cleared.Load() {
		return result{}, errors.New("got a byte before the fault was cleared")
	}
	return readResult(br)
}

// withHooks returns cfg reporting the faults that act and the requests
// whose client goes away on the returned channels.
func withHooks(cfg Config) (Config, <-chan FaultKind, <-chan string) {
	faults, gone := make(chan FaultKind, 64), make(chan string, 64)
	cfg.OnFault = func(k FaultKind) { faults <- k }
	cfg.OnClientGone = func(rid string) { gone <- rid }
	return cfg, faults, gone
}

// expectFault waits for a fault to act and checks its kind.
func expectFault(t *testing.T, faults <-chan FaultKind, want FaultKind) {
	t.Helper()
	if got := within(t, faults, "a fault to act"); got != want {
		t.Errorf("got fault %v; want %v", got, want)
	}
}

func setFault(t *testing.T, s *Server, f Fault) {
	t.Helper()
	if err := s.SetFault(f); err != nil {
		t.Fatalf("cannot set fault %v: %v", f.Kind, err)
	}
}

// checkStats checks the fault counters and that nothing is left in flight.
func checkStats(t *testing.T, s *Server, faults, gone uint64) {
	t.Helper()
	st := s.Stats()
	if st.FaultsInjected != faults || st.ClientGone != gone || st.InFlight != 0 {
		t.Errorf("got FaultsInjected %d, ClientGone %d, InFlight %d; want %d, %d, 0",
			st.FaultsInjected, st.ClientGone, st.InFlight, faults, gone)
	}
}

// checkHealed checks the server answers a generate request as usual.
func checkHealed(t *testing.T, n *Network, addr string) {
	t.Helper()
	res := do(t, n, "POST", addr, "/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1}}`)
	if got := decodeText(t, "/generate", res.body); res.status != 200 || got != " tok0" {
		t.Errorf("got %d %q once healed; want 200 %q", res.status, got, " tok0")
	}
}

func TestFaultRefuse(t *testing.T) {
	gate := make(chan struct{})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", Config{TokenGate: gate})
	kept := dialKeepAlive(t, n, "agg:30000")
	if res, err := kept.do("GET", "/health", ""); err != nil || res.status != 200 {
		t.Fatalf("got %d, %v; want 200", res.status, err)
	}
	inFlight, err := openSSE(n, "agg:30000", "/generate", `{"text":"hi","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.conn.Close()
	setFault(t, s, Fault{Kind: FaultRefuse})
	if _, err := n.Dial("agg:30000"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("got %v dialing a refusing server; want ECONNREFUSED", err)
	}
	if res, err := kept.do("GET", "/health", ""); err == nil {
		t.Errorf("got %d on a kept-alive connection after FaultRefuse; want it closed", res.status)
	}
	if evs, err := inFlight.all(); err == nil {
		t.Errorf("got the whole stream %q after FaultRefuse; want it broken", evs)
	}
	setFault(t, s, Fault{Kind: FaultRefuse}) // again: nothing more to do
	setFault(t, s, Fault{})
	close(gate) // every token passes from now on
	checkHealed(t, n, "agg:30000")
	if got := s.Stats().ClientGone; got != 0 {
		t.Errorf("got ClientGone %d; want 0: the server closed the connections", got)
	}
}

func TestFaultRefuseNeedsStart(t *testing.T) {
	s := New(Config{})
	if err := s.SetFault(Fault{Kind: FaultRefuse}); err == nil {
		t.Error("got nil refusing on a server never started; want an error")
	}
	if err := s.SetBootstrapDown(true); err == nil {
		t.Error("got nil taking the bootstrap server of a non-prefill down; want an error")
	}
	s.Close()
	if err := s.SetFault(Fault{Kind: FaultRefuse}); err != nil {
		t.Errorf("got %v setting a fault after Close; want nil", err)
	}
}

func TestBootstrapDown(t *testing.T) {
	n := NewNetwork()
	p := startServer(t, n, prefillAddr, Config{Role: RolePrefill})
	if err := p.SetBootstrapDown(true); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Dial("prefill:8998"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("got %v dialing a bootstrap server down; want ECONNREFUSED", err)
	}
	if res := do(t, n, "GET", prefillAddr, "/health", ""); res.status != 200 {
		t.Errorf("got API health %d with the bootstrap server down; want 200", res.status)
	}
	if err := p.SetBootstrapDown(false); err != nil {
		t.Fatal(err)
	}
	if res := do(t, n, "GET", "prefill:8998", "/health", ""); res.status != 200 || res.body != "OK" {
		t.Errorf("got %d %q from the bootstrap server back up; want 200 OK", res.status, res.body)
	}
}

func TestFaultError(t *testing.T) {
	const internal = `{"object":"error","message":"Internal Server Error","type":"500","param":null,"code":500}`
	cases := []struct {
		name       string
		fault      Fault
		path, body string
		status     int
		want       string
	}{
		{"generate", Fault{Kind: FaultError}, "/generate", `{"text":"hi"}`, 500, internal},
		{"generate stream", Fault{Kind: FaultError}, "/generate", `{"text":"hi","stream":true}`, 500, internal},
		{"completions", Fault{Kind: FaultError, Status: 503, Message: "overloaded"}, "/v1/completions", `{"prompt":"hi"}`, 503,
			`{"object":"error","message":"overloaded","type":"503","param":null,"code":503}`},
		{"chat with a bad body", Fault{Kind: FaultError, Status: 502}, "/v1/chat/completions", `not json`, 502,
			`{"object":"error","message":"Bad Gateway","type":"502","param":null,"code":502}`},
		{"health spared", Fault{Kind: FaultError}, "/health", "", 200, ""},
		{"health", Fault{Kind: FaultError, Status: 500, Health: true}, "/health_generate", "", 503, ""},
	}
	cfg, faults, _ := withHooks(Config{})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", cfg)
	injected := uint64(0)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setFault(t, s, c.fault)
			method := "POST"
			if c.body == "" {
				method = "GET"
			}
			res := do(t, n, method, "agg:30000", c.path, c.body)
			if res.status != c.status || res.body != c.want {
				t.Errorf("got %d %s; want %d %s", res.status, res.body, c.status, c.want)
			}
			if c.status != 200 {
				expectFault(t, faults, FaultError)
				injected++
			}
			if c.want != "" && res.contentType != contentJSON {
				t.Errorf("got content type %q; want %q", res.contentType, contentJSON)
			}
		})
	}
	setFault(t, s, Fault{})
	checkHealed(t, n, "agg:30000")
	if res := do(t, n, "GET", "agg:30000", "/health", ""); res.status != 200 {
		t.Errorf("got health %d once healed; want 200", res.status)
	}
	checkStats(t, s, injected, 0)
}

func TestFaultValidate(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	for _, f := range []Fault{{Kind: faultKinds}, {Kind: FaultError, Status: 200}, {Kind: FaultError, Status: 600}} {
		if err := s.SetFault(f); err == nil {
			t.Errorf("got nil setting %+v; want an error", f)
		}
	}
	if got := s.Fault(); got != (Fault{}) {
		t.Errorf("got fault %+v after refused ones; want none", got)
	}
}

// TestFaultHang holds each request before its first byte, checks it is not
// in flight, then clears the fault and reads a normal answer.
func TestFaultHang(t *testing.T) {
	cases := []struct {
		name, method, path, body string
		health                   bool
		want                     string // in the answer's body
	}{
		{"generate", "POST", "/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1}}`, false, `"text":" tok0"`},
		{"stream", "POST", "/v1/completions", `{"prompt":"hi","max_tokens":1,"stream":true}`, false, "data: [DONE]"},
		{"health", "GET", "/health", "", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, faults, _ := withHooks(Config{})
			n := NewNetwork()
			s := startServer(t, n, "agg:30000", cfg)
			setFault(t, s, Fault{Kind: FaultHang, Health: c.health})
			var cleared atomic.Bool
			answers := answerAfter(&cleared, n, c.method, "agg:30000", c.path, c.body)
			expectFault(t, faults, FaultHang)
			if got := s.Stats().InFlight; got != 0 {
				t.Errorf("got InFlight %d while held; want 0", got)
			}
			if !c.health {
				if res := do(t, n, "GET", "agg:30000", "/health", ""); res.status != 200 {
					t.Errorf("got health %d with a hang not marked Health; want 200", res.status)
				}
			}
			cleared.Store(true)
			setFault(t, s, Fault{})
			a := within(t, answers, "the held request's answer")
			if a.err != nil || a.res.status != 200 || !strings.Contains(a.res.body, c.want) {
				t.Errorf("got %d %q, %v; want 200 with %s", a.res.status, a.res.body, a.err, c.want)
			}
			checkStats(t, s, 1, 0)
		})
	}
}

func TestFaultHangClientGone(t *testing.T) {
	cfg, faults, gone := withHooks(Config{})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", cfg)
	setFault(t, s, Fault{Kind: FaultHang})
	conn, _, err := send(n, "POST", "agg:30000", "/generate", `{"text":"hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	expectFault(t, faults, FaultHang)
	conn.Close()
	if rid := within(t, gone, "the held request to notice its client gone"); rid != "" {
		t.Errorf("got rid %q; want \"\" for a request never parsed", rid)
	}
	checkStats(t, s, 1, 1)
}

// TestFaultCutStream reads the events a stream sends before its cut, then
// checks the stream ends without [DONE] or a chunked terminator.
func TestFaultCutStream(t *testing.T) {
	cases := []struct {
		name, path, body string
		events, want     int
	}{
		{"default", "/generate", `{"text":"hi","stream":true}`, 0, 1},
		{"completions", "/v1/completions", `{"prompt":"hi","stream":true}`, 2, 2},
		{"header only", "/v1/chat/completions", `{"messages":[],"stream":true}`, -1, 0},
		{"all but DONE", "/generate", `{"text":"hi","stream":true}`, 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, faults, _ := withHooks(Config{Tokens: 3})
			n := NewNetwork()
			s := startServer(t, n, "agg:30000", cfg)
			setFault(t, s, Fault{Kind: FaultCut, Events: c.events})
			st, err := openSSE(n, "agg:30000", c.path, c.body)
			if err != nil {
				t.Fatal(err)
			}
			defer st.conn.Close()
			evs, err := st.all()
			if err == nil || len(evs) != c.want {
				t.Errorf("got %d events %q, %v; want %d then a broken stream", len(evs), evs, err, c.want)
			}
			for _, ev := range evs {
				if ev == "[DONE]" {
					t.Errorf("got [DONE] in a cut stream: %q", evs)
				}
			}
			expectFault(t, faults, FaultCut)
			setFault(t, s, Fault{})
			if _, evs, err := stream(n, "agg:30000", c.path, c.body); err != nil || len(evs) == 0 || evs[len(evs)-1] != "[DONE]" {
				t.Errorf("got %q, %v once healed; want a stream ending with [DONE]", evs, err)
			}
		})
	}
}

// TestFaultCutAnswer cuts a decode's non-stream answer: its KV transfer is
// done, and its client gets not a byte.
func TestFaultCutAnswer(t *testing.T) {
	cfg, faults, _ := withHooks(Config{})
	n, p, d := newPD(t, Config{}, cfg)
	setFault(t, d, Fault{Kind: FaultCut, Events: 5}) // Events spares no part of a non-stream answer
	body := pdBody(`"text":"hi","sampling_params":{"max_new_tokens":2}`, "prefill", "8998", 7)
	got := make(chan []byte, 1)
	go func() {
		conn, br, err := send(n, "POST", decodeAddr, "/generate", body)
		if err != nil {
			got <- []byte(err.Error())
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(br)
		got <- b
	}()
	if res := do(t, n, "POST", prefillAddr, "/generate", body); res.status != 200 {
		t.Errorf("got prefill %d %s; want 200", res.status, res.body)
	}
	if b := within(t, got, "the decode's cut answer"); len(b) != 0 {
		t.Errorf("got %q from a cut decode; want no byte", b)
	}
	expectFault(t, faults, FaultCut)
	checkKV(t, p, 1, 0)
	checkKV(t, d, 1, 0)
	setFault(t, d, Fault{})
	if res := do(t, n, "GET", decodeAddr, "/health", ""); res.status != 200 {
		t.Errorf("got health %d once healed; want 200", res.status)
	}
}

// TestFaultStallStream holds a stream after its first event and checks no
// further event comes before the fault is cleared.
func TestFaultStallStream(t *testing.T) {
	cfg, faults, _ := withHooks(Config{Tokens: 3})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", cfg)
	setFault(t, s, Fault{Kind: FaultStall})
	var cleared atomic.Bool
	type outcome struct {
		evs []string
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		st, err := openSSE(n, "agg:30000", "/generate", `{"text":"hi","stream":true}`)
		if err != nil {
			out <- outcome{err: err}
			return
		}
		defer st.conn.Close()
		first, _, err := st.next()
		if err != nil {
			out <- outcome{err: err}
			return
		}
		second, _, err := st.next()
		if err == nil && !cleared.Load() {
			err = fmt.Errorf("got event %s before the fault was cleared", second)
		}
		rest, err2 := st.all()
		out <- outcome{append([]string{first, second}, rest...), errors.Join(err, err2)}
	}()
	expectFault(t, faults, FaultStall)
	cleared.Store(true)
	setFault(t, s, Fault{})
	o := within(t, out, "the stalled stream")
	if o.err != nil || len(o.evs) != 4 || !strings.Contains(o.evs[2], `"text":" tok0 tok1 tok2"`) || o.evs[3] != "[DONE]" {
		t.Errorf("got %q, %v; want 3 chunks and [DONE]", o.evs, o.err)
	}
	checkStats(t, s, 1, 0)
}

func TestFaultStallAnswer(t *testing.T) {
	cfg, faults, _ := withHooks(Config{})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", cfg)
	setFault(t, s, Fault{Kind: FaultStall, Events: -1})
	var cleared atomic.Bool
	answers := answerAfter(&cleared, n, "POST", "agg:30000", "/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1}}`)
	expectFault(t, faults, FaultStall)
	if got := s.Stats().InFlight; got != 1 {
		t.Errorf("got InFlight %d while stalled; want 1", got)
	}
	cleared.Store(true)
	setFault(t, s, Fault{})
	a := within(t, answers, "the stalled answer")
	if a.err != nil || a.res.status != 200 || !strings.Contains(a.res.body, `"text":" tok0"`) {
		t.Errorf("got %d %q, %v; want 200 and tok0", a.res.status, a.res.body, a.err)
	}
	checkStats(t, s, 1, 0)
}

func TestFaultStallClientGone(t *testing.T) {
	cfg, faults, gone := withHooks(Config{Tokens: 3})
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", cfg)
	setFault(t, s, Fault{Kind: FaultStall, Events: 2})
	st, err := openSSE(n, "agg:30000", "/v1/completions", `{"prompt":"hi","rid":"s1","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	expectFault(t, faults, FaultStall)
	st.conn.Close()
	if rid := within(t, gone, "the stalled stream to notice its client gone"); rid != "s1" {
		t.Errorf("got rid %q; want s1", rid)
	}
	checkStats(t, s, 1, 1)
}

// TestCloseWithFault closes a server with each fault set, a request held
// where the fault holds one, and checks Close returns and leaves no
// goroutine behind.
func TestCloseWithFault(t *testing.T) {
	for _, f := range []Fault{
		{Kind: FaultRefuse}, {Kind: FaultError, Health: true}, {Kind: FaultHang, Health: true},
		{Kind: FaultCut}, {Kind: FaultStall},
	} {
		t.Run(f.Kind.String(), func(t *testing.T) {
			cfg, faults, _ := withHooks(Config{Tokens: 2})
			n := NewNetwork()
			s := New(cfg)
			if err := s.Start(n, "agg:30000"); err != nil {
				t.Fatal(err)
			}
			setFault(t, s, f)
			held := f.Kind == FaultHang || f.Kind == FaultStall
			ended := make(chan error, 1)
			if held {
				go func() {
					_, _, err := stream(n, "agg:30000", "/generate", `{"text":"hi","stream":true}`)
					ended <- err
				}()
				expectFault(t, faults, f.Kind)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			if err := within(t, closed, "Close to return"); err != nil {
				t.Errorf("got %v closing; want nil", err)
			}
			if held {
				err := within(t, ended, "the held request to end")
				if f.Kind == FaultHang && err == nil {
					t.Error("got an answer to a request held until Close; want its connection cut")
				}
			}
			goleak.VerifyNone(t, leakOptions...)
		})
	}
}

// TestCloseIdleConnections closes a connection idle after a request while
// another serves one; the latter answers and stays open.
func TestCloseIdleConnections(t *testing.T) {
	gate := make(chan struct{})
	arrived := make(chan string, 8)
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", Config{Tokens: 1, TokenGate: gate,
		OnRequest: func(path string, _ []byte) { arrived <- path }})
	idle := dialKeepAlive(t, n, "agg:30000")
	if res, err := idle.do("GET", "/health", ""); err != nil || res.status != 200 {
		t.Fatalf("got %d, %v; want 200", res.status, err)
	}
	within(t, arrived, "the health check")
	busy := dialKeepAlive(t, n, "agg:30000")
	if err := writeRequest(busy.conn, "POST", busy.addr, "/generate", `{"text":"hi"}`); err != nil {
		t.Fatal(err)
	}
	if path := within(t, arrived, "the generate request"); path != "/generate" {
		t.Fatalf("got request %s; want /generate", path)
	}
	if got := s.CloseIdleConnections(); got != 1 {
		t.Errorf("got %d connections closed; want 1", got)
	}
	if res, err := idle.do("GET", "/health", ""); err == nil {
		t.Errorf("got %d on the idle connection after CloseIdleConnections; want it closed", res.status)
	}
	release(t, gate)
	res, err := readResult(busy.br)
	if err != nil || res.status != 200 || !strings.Contains(res.body, `"text":" tok0"`) {
		t.Errorf("got %d %q, %v from the busy connection; want 200 and tok0", res.status, res.body, err)
	}
	if res, err := busy.do("GET", "/health", ""); err != nil || res.status != 200 {
		t.Errorf("got %d, %v on the busy connection afterwards; want 200: it stays open", res.status, err)
	}
}

// TestGenerateWhileStarting serves generate requests while /health still
// answers 503, as SGLang's generate routes ignore the Starting status.
func TestGenerateWhileStarting(t *testing.T) {
	clk := newClock()
	n := NewNetwork()
	startServer(t, n, "agg:30000", clk.config(Config{StartDelay: time.Minute}))
	if res := do(t, n, "GET", "agg:30000", "/health", ""); res.status != 503 {
		t.Errorf("got health %d while starting; want 503", res.status)
	}
	checkHealed(t, n, "agg:30000")
}

// TestClientGoneAbortsKVWait closes the client of a decode request waiting
// for its KV cache and checks the request ends at once, leaving the
// prefill's rendezvous.
func TestClientGoneAbortsKVWait(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			cfg, _, gone := withHooks(Config{OnRequest: func(string, []byte) { arrived <- struct{}{} }})
			n, p, d := newPD(t, Config{}, cfg)
			fields := fmt.Sprintf(`"text":"hi","rid":"g1","stream":%v`, stream)
			conn, _, err := send(n, "POST", decodeAddr, "/generate", pdBody(fields, "prefill", "8998", 5))
			if err != nil {
				t.Fatal(err)
			}
			within(t, arrived, "the decode request")
			conn.Close()
			if rid := within(t, gone, "the decode to notice its client gone"); rid != "g1" {
				t.Errorf("got rid %q; want g1", rid)
			}
			checkStats(t, d, 0, 1)
			if got := d.Stats().Aborts; got != 0 {
				t.Errorf("got Aborts %d; want 0: no /abort_request came", got)
			}
			checkKV(t, p, 0, 0)
			checkKV(t, d, 0, 0)
		})
	}
}

// TestWatchKeepsPipelinedRequest sends a second request on a connection
// while the first waits: the byte the watch reads ahead must reach the
// second request, and nobody counts as gone.
func TestWatchKeepsPipelinedRequest(t *testing.T) {
	gate := make(chan struct{})
	arrived := make(chan string, 4)
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", Config{Tokens: 1, TokenGate: gate,
		OnRequest: func(path string, _ []byte) { arrived <- path }})
	k := dialKeepAlive(t, n, "agg:30000")
	if err := writeRequest(k.conn, "POST", k.addr, "/generate", `{"text":"hi"}`); err != nil {
		t.Fatal(err)
	}
	within(t, arrived, "the first request")
	if err := writeRequest(k.conn, "GET", k.addr, "/v1/models", ""); err != nil {
		t.Fatal(err)
	}
	release(t, gate)
	first, err := readResult(k.br)
	if err != nil || first.status != 200 || !strings.Contains(first.body, `"text":" tok0"`) {
		t.Errorf("got first %d %q, %v; want 200 and tok0", first.status, first.body, err)
	}
	second, err := readResult(k.br)
	if err != nil || second.status != 200 || !strings.Contains(second.body, `"object":"list"`) {
		t.Errorf("got second %d %q, %v; want the model list", second.status, second.body, err)
	}
	checkStats(t, s, 0, 0)
}

// TestFaultRefuseTCP refuses on a real port and listens on it again.
func TestFaultRefuseTCP(t *testing.T) {
	n := NewTCPNetwork()
	s := startServer(t, n, "127.0.0.1:0", Config{})
	addr := s.api.addr
	setFault(t, s, Fault{Kind: FaultRefuse})
	if c, err := n.Dial(addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("got %v dialing a refusing server on TCP; want ECONNREFUSED", err)
	}
	setFault(t, s, Fault{})
	checkHealed(t, n, addr)
}
