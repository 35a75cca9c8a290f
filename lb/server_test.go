package lb

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// An admin listener says where it serves once it listens, as the main one
// does: nothing said that --prometheus-port's or --pprof-addr's was up.
func TestAdminListenerSaysWhere(t *testing.T) {
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
}
