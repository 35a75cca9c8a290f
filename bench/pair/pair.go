// Package pair is a featureless pairing proxy: it splices the bootstrap
// fields, with a fresh room, into each request's body, sends it to one
// prefill and one decode at once, and answers with the decode's answer.
// A stream's answer is passed on as fasthttp reads it. Nothing else: no
// health checks, metrics, logging, retries, cancellation, timeouts, no
// look inside the events. It is the reference the non-stream targets of
// pdlb's benchmarks are stated against ("a featureless fasthttp pairing
// proxy"), and `make bench` runs it beside pdlb, streams included, so that
// what pdlb's features cost can be told from what pairing itself costs on
// the machine.
package pair

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// Config names the pair, by "host:port".
type Config struct {
	Prefill string
	Decode  string
	// BootstrapPort is the prefill's bootstrap port.
	BootstrapPort int
}

type proxy struct {
	prefill, decode *fasthttp.HostClient
	fields          bootstrap.Fields
	bodies          sync.Pool
}

// Serve answers on ln until ctx is done, then lets the requests in flight
// finish.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	host, _, err := net.SplitHostPort(cfg.Prefill)
	if err != nil {
		return err
	}
	p := &proxy{
		prefill: newClient(cfg.Prefill),
		decode:  newClient(cfg.Decode),
		fields:  bootstrap.Fields{Host: bootstrap.Host(host), Port: cfg.BootstrapPort},
	}
	srv := &fasthttp.Server{Handler: p.handle, NoDefaultContentType: true}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		_ = srv.Shutdown()
	}()
	err = srv.Serve(ln)
	<-stopped
	return err
}

// newClient is a pool of connections to addr. Its one setting drops idle
// connections before the workers' 5 s keep-alive does: a request sent on a
// connection the worker has closed fails, and a prefill leg that fails
// leaves its decode waiting for a KV cache that never comes. (pdlb also
// resends such a request once; this proxy has no such feature.)
func newClient(addr string) *fasthttp.HostClient {
	return &fasthttp.HostClient{Addr: addr, DialDualStack: true, MaxConns: 1 << 16, MaxIdleConnDuration: 4 * time.Second}
}

// handle answers a request with the pair's answer to it, its body
// carrying the bootstrap fields; /health is always 200. The body is built
// in a pooled buffer that goes back to the pool only once both legs have
// returned: they send it without copying it.
func (p *proxy) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/health" {
		return // 200, for scripts that wait for it to start
	}
	buf, _ := p.bodies.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer p.bodies.Put(buf)
	body, err := p.appendBody(buf, ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	p.exchange(ctx, body)
}

// appendBody splices the pair's bootstrap fields, with a fresh room, into
// the client's body, building it in *buf, which keeps the grown buffer for
// the next request.
func (p *proxy) appendBody(buf *[]byte, clientBody []byte) ([]byte, error) {
	f := p.fields
	room := [1]uint64{bootstrap.NewRoom()}
	f.Rooms = room[:]
	body, err := bootstrap.Append((*buf)[:0], clientBody, f)
	*buf = body
	return body, err
}

// exchange sends body to the prefill and the decode at once and answers
// ctx with the decode's answer, once both have returned: a decode waits
// for its prefill's KV cache, and body is theirs until then (SetBodyRaw).
// It releases its requests and responses, but for a streamed answer,
// which ctx releases when fasthttp has sent it.
func (p *proxy) exchange(ctx *fasthttp.RequestCtx, body []byte) {
	preq, dreq := fasthttp.AcquireRequest(), fasthttp.AcquireRequest()
	presp, dresp := fasthttp.AcquireResponse(), fasthttp.AcquireResponse()
	defer func() {
		fasthttp.ReleaseRequest(preq)
		fasthttp.ReleaseRequest(dreq)
		fasthttp.ReleaseResponse(presp)
		if dresp != nil {
			fasthttp.ReleaseResponse(dresp)
		}
	}()
	setLeg(preq, p.prefill, ctx.RequestURI(), body)
	setLeg(dreq, p.decode, ctx.RequestURI(), body)
	prefillDone := make(chan struct{})
	go func() {
		defer close(prefillDone)
		_ = p.prefill.Do(preq, presp)
	}()
	dresp.StreamBody = wantsStream(body)
	err := p.decode.Do(dreq, dresp)
	<-prefillDone
	if err != nil {
		writeError(ctx, fasthttp.StatusBadGateway, "decode: "+err.Error())
		return
	}
	if answer(ctx, dresp) {
		dresp = nil // ctx's now
	}
}

// setLeg makes req the POST of body to uri on hc's backend, body sent
// without a copy.
func setLeg(req *fasthttp.Request, hc *fasthttp.HostClient, uri, body []byte) {
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURIBytes(uri)
	req.Header.SetHost(hc.Addr)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
}

// answer copies the decode's answer, dresp, to ctx. A streamed one is
// handed to ctx instead, to pass on as fasthttp reads it: answer then
// returns true, and the caller must not release dresp.
func answer(ctx *fasthttp.RequestCtx, dresp *fasthttp.Response) (handedOver bool) {
	ctx.SetStatusCode(dresp.StatusCode())
	ctx.Response.Header.SetContentTypeBytes(dresp.Header.ContentType())
	if dresp.BodyStream() != nil {
		// fasthttp writes each read as a chunk, flushed, and closes the
		// stream when done, which gives the response back.
		ctx.SetBodyStream(&streamedBody{resp: dresp}, -1)
		return true
	}
	ctx.SetBody(dresp.Body())
	return false
}

// wantsStream reports whether body asks for a stream ("stream": true at
// any depth). A scan, not a parse: a reference must cost next to nothing.
func wantsStream(body []byte) bool {
	const key = `"stream"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return false
	}
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(body[i+len(key):], " \t\r\n"), []byte(":"))
	return ok && bytes.HasPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte("true"))
}

// streamedBody passes on a response's body stream, and releases the
// response once fasthttp is done with it.
type streamedBody struct{ resp *fasthttp.Response }

func (b *streamedBody) Read(p []byte) (int, error) { return b.resp.BodyStream().Read(p) }

func (b *streamedBody) Close() error {
	err := b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	return err
}

func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	quoted, _ := json.Marshal(msg)
	ctx.SetBodyString(`{"error": {"message": ` + string(quoted) + `, "code": ` + strconv.Itoa(status) + `}}`)
}
