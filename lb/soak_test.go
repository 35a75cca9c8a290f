package lb

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// TestSoak runs mixed traffic through pdlb while workers are killed and
// restarted at random, and checks that every request got a complete answer
// or a clear error in time: none lost, none hung. It runs under `make soak`
// (PDLB_SOAK=1; PDLB_SOAK_DURATION, default 1m), not in `make test`; with
// PDLB_SOAK_TCP=1, pdlb reaches the workers over loopback TCP.
func TestSoak(t *testing.T) {
	if os.Getenv("PDLB_SOAK") == "" {
		t.Skip("set PDLB_SOAK=1 (make soak) to run the soak test")
	}
	duration := time.Minute
	if d, err := time.ParseDuration(os.Getenv("PDLB_SOAK_DURATION")); err == nil {
		duration = d
	}
	h := newHarness(t)
	h.tcpWorkers = os.Getenv("PDLB_SOAK_TCP") != ""
	workers := []struct {
		addr string
		cfg  fake.Config
	}{
		{"prefill-0:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 8998}},
		{"prefill-1:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 8998}},
		{"decode-0:30010", fake.Config{Role: fake.RoleDecode}},
		{"decode-1:30010", fake.Config{Role: fake.RoleDecode}},
		{"agg-0:30020", fake.Config{Role: fake.RoleAggregated}},
	}
	servers := make([]*fake.Server, len(workers))
	var mu sync.Mutex // guards servers against the chaos goroutine
	for i, w := range workers {
		w.cfg.KVTimeout, w.cfg.TokenDelay, w.cfg.Tokens = 2*time.Second, time.Millisecond, 8
		workers[i].cfg = w.cfg
		servers[i] = h.fake(w.addr, w.cfg)
	}
	cfg := Config{
		Prefill:        []PrefillSpec{{URL: "http://prefill-0:30000", BootstrapPort: 8998}, {URL: "http://prefill-1:30000", BootstrapPort: 8998}},
		Decode:         []string{"http://decode-0:30010", "http://decode-1:30010"},
		Fallback:       []string{"http://agg-0:30020"},
		RequestTimeout: 10 * time.Second,
		HealthCheck:    HealthCheckConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond},
		Breaker:        BreakerConfig{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second},
	}
	srv := h.start(cfg)

	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
			}
			i := rand.IntN(len(workers))
			mu.Lock()
			_ = servers[i].Close()
			mu.Unlock()
			select {
			case <-stop:
			case <-time.After(time.Duration(rand.IntN(300)) * time.Millisecond):
			}
			s := fake.New(workers[i].cfg)
			if err := s.Start(h.nw, workers[i].addr); err != nil {
				t.Errorf("cannot restart %s: %s", workers[i].addr, err)
				return
			}
			mu.Lock()
			servers[i] = s
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range servers {
			_ = s.Close()
		}
	})

	var tally soakTally
	deadline := time.Now().Add(duration)
	var clients sync.WaitGroup
	for range 16 {
		clients.Go(func() {
			for time.Now().Before(deadline) {
				tally.add(h.soakRequest(cfg.RequestTimeout + 5*time.Second))
			}
		})
	}
	clients.Wait()
	close(stop)
	chaos.Wait()
	// A prefill may outlive its decode by orphanPrefillGrace: one that was
	// still waiting for a KV claim that never came when its decode ended.
	waitIdleWithin(t, srv, orphanPrefillGrace+time.Second)
	t.Logf("soak over %s: %s", duration, tally.String())
	for _, kind := range tally.errorKinds() {
		t.Logf("  %s", kind)
	}
	if tally.lost.Load() != 0 || tally.hung.Load() != 0 || tally.complete.Load() == 0 {
		t.Fatalf("lost %d, hung %d, complete %d", tally.lost.Load(), tally.hung.Load(), tally.complete.Load())
	}
}

// soakResult is how one soak request ended, from the client's side.
type soakResult int

const (
	soakComplete soakResult = iota
	soakClearError
	soakLost
	soakHung
)

type soakTally struct {
	sent, complete, clearError, lost, hung atomic.Int64
	// errors counts the clear errors by what they said (errorKind): the
	// ones a change to pdlb could avoid show up there.
	mu     sync.Mutex
	errors map[string]int
}

func (t *soakTally) add(r soakResult, kind string) {
	t.sent.Add(1)
	[]*atomic.Int64{&t.complete, &t.clearError, &t.lost, &t.hung}[r].Add(1)
	if r == soakClearError {
		t.mu.Lock()
		if t.errors == nil {
			t.errors = map[string]int{}
		}
		t.errors[kind]++
		t.mu.Unlock()
	}
}

// errorKinds lists the clear errors by kind, the most frequent first.
func (t *soakTally) errorKinds() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kinds := slices.SortedFunc(maps.Keys(t.errors), func(a, b string) int {
		return cmp.Or(t.errors[b]-t.errors[a], strings.Compare(a, b))
	})
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%5d × %s", t.errors[k], k)
	}
	return kinds
}

func (t *soakTally) String() string {
	return fmt.Sprintf("sent %d, answered complete %d, answered with a clear error %d, lost %d, hung %d",
		t.sent.Load(), t.complete.Load(), t.clearError.Load(), t.lost.Load(), t.hung.Load())
}

// soakBody is one request of the soak's mix: its route, its body, and an
// X-PD-Mode header when not empty.
type soakBody struct{ path, body, pdMode string }

// stream reports whether sb's answer is a stream.
func (sb soakBody) stream() bool { return strings.Contains(sb.body, `"stream": true`) }

var soakBodies = []soakBody{
	{path: "/generate", body: `{"text": "soak", "sampling_params": {"max_new_tokens": 8}}`},
	{path: "/generate", body: `{"text": "soak", "sampling_params": {"max_new_tokens": 8}, "stream": true}`},
	{path: "/v1/chat/completions", body: `{"messages": [{"role": "user", "content": "soak"}], "max_tokens": 8, "stream": true}`},
	{path: "/v1/completions", body: `{"prompt": "soak", "max_tokens": 8}`},
}

// soakRequest sends one random request and classifies its answer; a clear
// error's kind comes with it.
func (h *harness) soakRequest(timeout time.Duration) (soakResult, string) {
	r, kind, _ := h.soakSend(soakBodies[rand.IntN(len(soakBodies))], timeout)
	return r, kind
}

// soakSend sends sb and classifies its answer; a clear error's kind comes
// with it, and the body of any answer not complete.
func (h *harness) soakSend(sb soakBody, timeout time.Duration) (soakResult, string, []byte) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://pdlb:8000" + sb.path)
	req.SetBodyString(sb.body)
	if sb.pdMode != "" {
		req.Header.Set(headerPDMode, sb.pdMode)
	}
	err := h.cl.DoTimeout(req, resp, timeout)
	switch {
	case errors.Is(err, fasthttp.ErrTimeout):
		return soakHung, "", []byte(err.Error())
	case err != nil:
		return soakLost, "", []byte(err.Error())
	}
	r := classifyAnswer(resp.StatusCode(), resp.Body(), sb.stream())
	switch r {
	case soakComplete:
		return r, "", nil
	case soakClearError:
		return r, errorKind(resp.StatusCode(), resp.Body()), bytes.Clone(resp.Body())
	}
	return r, "", bytes.Clone(resp.Body())
}

// errorKind sums up a clear error: its status, or "stream" for an error
// event or an abort in a 200 stream, and the start of its first message,
// which names the failure before any request's own figures.
func errorKind(status int, body []byte) string {
	kind := strconv.Itoa(status)
	var msg string
	if status == fasthttp.StatusOK {
		kind, msg = "stream", "an abort"
		if !bytes.HasPrefix(body, []byte("data: ")) { // an aborted answer, not a stream
			kind = "200"
			if m := gjson.GetBytes(body, "meta_info.finish_reason.message"); m.Exists() {
				msg = m.String()
			}
		}
		for line := range bytes.Lines(body) {
			data, ok := bytes.CutPrefix(line, []byte("data: "))
			if m := gjson.GetBytes(data, "error.message"); ok && m.Exists() {
				msg = m.String()
				break
			}
			if m := gjson.GetBytes(data, "meta_info.finish_reason.message"); ok && m.Exists() {
				msg = m.String()
				break
			}
		}
	} else if msg = gjson.GetBytes(body, "error.message").String(); msg == "" {
		msg = gjson.GetBytes(body, "message").String()
	}
	if len(msg) > 48 {
		msg = msg[:48] + "…"
	}
	return kind + " " + msg
}

// classifyAnswer tells a complete answer from a clear error from a broken
// one. A stream must end with [DONE], after at most one error event; an
// answer that says it was aborted is a clear error.
func classifyAnswer(status int, body []byte, stream bool) soakResult {
	if status != fasthttp.StatusOK {
		if gjson.GetBytes(body, "error.message").Exists() || gjson.GetBytes(body, "message").Exists() {
			return soakClearError
		}
		return soakLost
	}
	if !stream {
		switch {
		case !gjson.ValidBytes(body) || gjson.GetBytes(body, "error").Exists():
			return soakLost
		case bytes.Contains(body, []byte(`"type":"abort"`)) || bytes.Contains(body, []byte(`"finish_reason":"abort"`)):
			return soakClearError // answered whole, but aborted
		}
		return soakComplete
	}
	if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		return soakLost
	}
	if bytes.Contains(body, []byte(`data: {"error"`)) || bytes.Contains(body, []byte(`"type":"abort"`)) {
		return soakClearError
	}
	return soakComplete
}

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{502, `{"error": {"message": "cannot reach prefill backend prefill-0:30000: dial memory prefill-0:30000: refused"}}`,
			"502 cannot reach prefill backend prefill-0:30000: di…"},
		{400, `{"object": "error", "message": "bad", "code": 400}`, "400 bad"},
		{200, "data: {\"text\":\"a\"}\n\ndata: {\"error\":{\"message\":\"decode backend d ended the stream early\"}}\n\ndata: [DONE]\n\n",
			"stream decode backend d ended the stream early"},
		{200, "data: {\"meta_info\":{\"finish_reason\":{\"type\":\"abort\",\"message\":\"Aborted by AbortReq.\"}}}\n\ndata: [DONE]\n\n",
			"stream Aborted by AbortReq."},
		{200, "data: {\"choices\":[{\"finish_reason\":\"abort\"}]}\n\ndata: [DONE]\n\n", "stream an abort"},
		{200, `{"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "Aborted by AbortReq."}}}`, "200 Aborted by AbortReq."},
		{200, `{"choices": [{"finish_reason": "abort"}]}`, "200 an abort"},
	} {
		if got := errorKind(c.status, []byte(c.body)); got != c.want {
			t.Errorf("errorKind(%d, %q) = %q; want %q", c.status, c.body, got, c.want)
		}
	}
}
