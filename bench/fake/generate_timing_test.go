package fake

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkHandlerGenerate measures one aggregated /generate through
// Handler alone: parsing and answer writing, no network.
func BenchmarkHandlerGenerate(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	body := []byte(`{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":16,"temperature":0}}`)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/generate")
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.SetBody(body)
		s.Handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("got %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		ctx.Response.Reset()
	}
}

// BenchmarkPDGenerate measures a PD request through an in-memory prefill
// and decode pair: both legs sent concurrently, as a load balancer does.
func BenchmarkPDGenerate(b *testing.B) {
	n := NewNetwork()
	p, d := New(Config{Role: RolePrefill}), New(Config{Role: RoleDecode})
	for addr, s := range map[string]*Server{prefillAddr: p, decodeAddr: d} {
		if err := s.Start(n, addr); err != nil {
			b.Fatal(err)
		}
		defer s.Close()
	}
	pc, dc := benchClient(n, prefillAddr), benchClient(n, decodeAddr)
	defer pc.CloseIdleConnections()
	defer dc.CloseIdleConnections()
	var room atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := pdBody(`"text":"hello","sampling_params":{"max_new_tokens":16}`, "prefill", "8998", room.Add(1))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				benchPost(b, pc, body)
			}()
			benchPost(b, dc, body)
			wg.Wait()
		}
	})
}

// benchClient is a pooled client whose pool goroutine ends soon after its
// connections are closed.
func benchClient(n *Network, addr string) *fasthttp.HostClient {
	return &fasthttp.HostClient{Addr: addr, Dial: n.Dial, MaxConns: 1024, MaxIdleConnDuration: 100 * time.Millisecond}
}

func benchPost(b *testing.B, c *fasthttp.HostClient, body string) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + c.Addr + "/generate")
	req.SetBodyString(body)
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		b.Errorf("got %v, status %s: %s", err, strconv.Itoa(resp.StatusCode()), resp.Body())
	}
}
