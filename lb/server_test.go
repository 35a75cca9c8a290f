package lb

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb/wire"
)

// An admin listener says where it serves once it listens, as the main one
// does: nothing said that --prometheus-port's or --pprof-addr's was up.
func TestAdminListenerSaysWhere(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, pprof := range []bool{false, true} {
			h := newHarness(t)
			var logs syncBuffer
			srv := h.startLogged(defaultConfig(), zerolog.New(&logs).Level(zerolog.InfoLevel))
			ln, err := h.nw.Listen("admin:6060")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.ServeAdmin(ln, pprof) }()
			cl := &fasthttp.HostClient{Addr: "admin:6060", Dial: h.nw.Dial}
			// The line is written before the listener takes its first request.
			if status, _, err := cl.Get(nil, "http://admin:6060/metrics"); err != nil || status != fasthttp.StatusOK {
				t.Fatalf("got /metrics %d, %v; want 200", status, err)
			}
			cl.CloseIdleConnections()
			n := 0
			for line := range strings.Lines(logs.String()) {
				if gjson.Get(line, "message").String() != "serving admin" {
					continue
				}
				n++
				if gjson.Get(line, "addr").String() != "admin:6060" || gjson.Get(line, "pprof").Bool() != pprof ||
					gjson.Get(line, "level").String() != "info" {
					t.Errorf("got %s; want an info line with addr admin:6060 and pprof %v", line, pprof)
				}
			}
			if n != 1 {
				t.Errorf("pprof %v: got %d lines saying the admin listener serves; want 1:\n%s", pprof, n, logs.String())
			}
		}
	})
}

// pdlb's refusals (401, 404, 405) are timed from the request's start as
// the served requests are: they were recorded as taking exactly 0, in
// their access lines and in pdlb_request_duration_seconds.
func TestRefusalsAreTimed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.APIKey = "k-31"
		cfg.AccessLog = true
		// A clock that moves a millisecond each time it is read: every span
		// between two readings is positive, whatever the machine's speed.
		base, ticks := time.Now(), atomic.Int64{}
		cfg.Now = func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
		var logs syncBuffer
		h.startLogged(cfg, zerolog.New(&logs))
		key := "Bearer " + cfg.APIKey
		for _, c := range []struct {
			method, path, auth string
			want               int
		}{
			{fasthttp.MethodGet, "/nothing", key, fasthttp.StatusNotFound},
			{fasthttp.MethodGet, "/v1/completions", key, fasthttp.StatusMethodNotAllowed},
			{fasthttp.MethodPost, "/generate", "", fasthttp.StatusUnauthorized},
		} {
			if r := h.do(c.method, c.path, "", "Authorization", c.auth); r.status != c.want {
				t.Fatalf("%s %s: got %d %s; want %d", c.method, c.path, r.status, r.body, c.want)
			}
		}
		n := 0
		for line := range strings.Lines(logs.String()) {
			if gjson.Get(line, "message").String() != "request" {
				continue
			}
			n++
			if gjson.Get(line, "took").Float() <= 0 {
				t.Errorf("got access line %s; want a duration above 0", line)
			}
		}
		if n != 3 {
			t.Errorf("got %d access lines; want 3:\n%s", n, logs.String())
		}
		for _, route := range []string{"other", "/v1/completions", "/generate"} {
			name := `pdlb_request_duration_seconds_sum{route="` + route + `"}`
			if sum, err := strconv.ParseFloat(h.metric(name), 64); err != nil || sum <= 0 {
				t.Errorf("got %s %q; want a sum above 0", name, h.metric(name))
			}
		}
	})
}

// The answers fasthttp writes in two pieces, whose first wire.ClientConn holds
// back to send both in one writev: a body set whole of at least the write
// buffer, and a large answer's body stream; not a smaller body, nor
// another body stream (a stream's relay writes its own chunks).
func TestTakesTwoWrites(t *testing.T) {
	var resp fasthttp.Response
	for _, tc := range []struct {
		name string
		set  func()
		want bool
	}{
		{"a small body", func() { resp.SetBodyString("{}") }, false},
		{"a body of the write buffer", func() { resp.SetBody(make([]byte, wire.ClientWriteBufferSize)) }, true},
		{"a large answer", func() { resp.SetBodyStream(&answerBody{}, largeAnswer+1) }, true},
		{"another body stream", func() { resp.SetBodyStream(strings.NewReader("data: {}\n\n"), -1) }, false},
	} {
		resp.Reset()
		tc.set()
		if got := takesTwoWrites(&resp); got != tc.want {
			t.Errorf("%s: got %v; want %v", tc.name, got, tc.want)
		}
	}
}
