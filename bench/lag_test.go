package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// TestRunEventLag streams events stamped 30 ms before they are written,
// but one: each stamped event must show at least that lag, and only
// stamped ones count for it, while every event counts for events/s.
func TestRunEventLag(t *testing.T) {
	const (
		behind   = 30 * time.Millisecond
		requests = 4
	)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := range 3 {
				stamp := fmt.Sprintf(`,"meta_info":{"sent_unix_nano":%d}`, time.Now().Add(-behind).UnixNano())
				if i == 1 {
					stamp = "" // as from a real server
				}
				fmt.Fprintf(w, "data: {\"text\":\"t%d\"%s}\n\n", i, stamp)
				if err := w.Flush(); err != nil {
					return
				}
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
	})
	cfg.Stream = true
	cfg.Requests = requests
	rep := run(t, cfg)

	checkCounts(t, rep, requests, requests)
	if rep.Events != 3*requests || rep.EventsPerSec <= 0 {
		t.Fatalf("got %d events, %.1f/s; want %d, a positive rate", rep.Events, rep.EventsPerSec, 3*requests)
	}
	if rep.EventLag.Count != 2*requests {
		t.Fatalf("got %d lag samples; want %d, one per stamped event", rep.EventLag.Count, 2*requests)
	}
	if rep.EventLag.Min < behind || rep.EventLag.Max > behind+cfg.Timeout {
		t.Fatalf("got event lag %+v; want every sample in [%v, %v]", rep.EventLag, behind, behind+cfg.Timeout)
	}
}

// TestRunFakeEventLag runs against the fake servers, whose every event but
// [DONE] carries sent_unix_nano, on each route.
func TestRunFakeEventLag(t *testing.T) {
	for _, tc := range []struct {
		route  string
		events int64 // per request, [DONE] excluded
	}{
		{RouteGenerate, 5},
		{RouteCompletions, 5 + 2},     // the finish and usage chunks
		{RouteChatCompletions, 5 + 3}, // the role, finish and usage chunks
	} {
		t.Run(tc.route, func(t *testing.T) {
			n := fake.NewNetwork()
			s := fake.New(fake.Config{})
			if err := s.Start(n, "agg.test:80"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			rep := run(t, Config{
				URL: "http://agg.test", Route: tc.route, Stream: true, Requests: 6, Concurrency: 2,
				MaxNewTokens: Fixed(5), Timeout: 5 * time.Second, Dial: func(_ context.Context, addr string) (net.Conn, error) { return n.Dial(addr) },
			})
			checkCounts(t, rep, 6, 6)
			if rep.Events != 6*tc.events || int64(rep.EventLag.Count) != rep.Events || rep.OutputTokens != 30 {
				t.Fatalf("got %d events, %d lag samples, %d tokens; want %d, %d, 30",
					rep.Events, rep.EventLag.Count, rep.OutputTokens, 6*tc.events, 6*tc.events)
			}
		})
	}
}
