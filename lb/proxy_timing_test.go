package lb

import (
	"testing"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// BenchmarkGenerate measures one non-stream /generate through pdlb and a
// pair of in-memory fakes; allocs/op covers pdlb, the fakes and the client.
func BenchmarkGenerate(b *testing.B) {
	h := newHarness(b)
	h.pair(fake.Config{Tokens: 4}, fake.Config{Tokens: 4})
	h.start(defaultConfig())
	body := []byte(`{"text": "Hello World How are you?", "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://pdlb:8000/generate")
		for pb.Next() {
			req.SetBody(body)
			if err := h.cl.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
				b.Fatalf("got %d %v", resp.StatusCode(), err)
			}
		}
	})
}
