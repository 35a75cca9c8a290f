package bench

import (
	"cmp"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRunRouteInURL sends a request to URLs with and without a route: a
// URL ending in a route is that route's (it was sent to /generate/generate
// and every request failed with a 404, issue 20), other paths are prefixes,
// and a final /v1 is the OpenAI routes' own.
func TestRunRouteInURL(t *testing.T) {
	f := func(url, route, wantPath string) {
		t.Helper()
		rc := &recorder{}
		cfg := serve(t, jsonHandler(rc, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`))
		cfg.URL, cfg.Route, cfg.Requests = url, route, 1
		rep := run(t, cfg)
		if len(rc.paths) != 1 || rc.paths[0] != wantPath {
			t.Fatalf("%s with route %q: the target got paths %q; want %q", url, route, rc.paths, wantPath)
		}
		wantRoute := cmp.Or(route, URLRoute(url), RouteGenerate)
		if rep.Route != wantRoute || rep.Endpoint != "http://fake.test"+wantPath || rep.URL != url {
			t.Fatalf("%s with route %q: got report route %q, endpoint %q, url %q; want %q, %q, %q",
				url, route, rep.Route, rep.Endpoint, rep.URL, wantRoute, "http://fake.test"+wantPath, url)
		}
		// The body is the route's, not /generate's.
		cfg.Route = wantRoute
		cfg = cfg.withDefaults()
		if err := checkBody(cfg, rc.bodies[0]); err != nil {
			t.Fatalf("%s with route %q: %v", url, route, err)
		}
	}
	f("http://fake.test", "", "/generate")
	f("http://fake.test/", RouteCompletions, "/v1/completions")
	f("http://fake.test/generate", "", "/generate")
	f("http://fake.test/generate/", "", "/generate")
	f("http://fake.test/generate", RouteGenerate, "/generate")
	f("http://fake.test/v1/completions", "", "/v1/completions")
	f("http://fake.test/v1/chat/completions", RouteChatCompletions, "/v1/chat/completions")
	f("http://fake.test/prefix/", "", "/prefix/generate")
	f("http://fake.test/prefix", RouteChatCompletions, "/prefix/v1/chat/completions")
	f("http://fake.test/prefix/v1/completions", "", "/prefix/v1/completions")
	f("http://fake.test/v1", RouteCompletions, "/v1/completions")
	f("http://fake.test/prefix/v1/", RouteChatCompletions, "/prefix/v1/chat/completions")
	f("http://fake.test/v1/v1/completions", "", "/v1/v1/completions") // as written
	f("http://fake.test/mygenerate", "", "/mygenerate/generate")      // not a route
}

// TestRouteConflicts refuses a URL whose route is not the one asked for,
// an OpenAI base URL with /generate, and targets of a comparison that end
// in different routes, before any request.
func TestRouteConflicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		route   string
		targets []Target
		want    string
	}{
		{"url and route", RouteCompletions, []Target{{"a", "http://x:8000/generate"}},
			`url "http://x:8000/generate" ends in route /generate, but the route asked for is /v1/completions: give the url without its route, or ask for /generate`},
		{"OpenAI base url", "", []Target{{"a", "http://x/v1"}},
			`url "http://x/v1" ends in /v1, an OpenAI base url, but the route asked for is /generate: ask for /v1/completions or /v1/chat/completions, or leave /v1 out`},
		{"two targets", "", []Target{{"a", "http://x/"}, {"b", "http://y/v1/completions"}, {"c", "http://z/v1/chat/completions/"}},
			`url "http://z/v1/chat/completions/" ends in route /v1/chat/completions, but url "http://y/v1/completions" in /v1/completions: every target is sent the same requests`},
		{"a target and the route", RouteGenerate, []Target{{"a", "http://x/"}, {"b", "http://y/v1/completions"}},
			`url "http://y/v1/completions" ends in route /v1/completions, but the route asked for is /generate`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dialled atomic.Bool
			cfg := Config{Route: tc.route, Requests: 1, Duration: minRound, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				dialled.Store(true)
				return refused(ctx, addr)
			}}
			var err error
			if len(tc.targets) == 1 {
				cfg.URL = tc.targets[0].URL
				_, err = Run(t.Context(), cfg)
			} else {
				cfg.Requests = 0
				_, err = Compare(t.Context(), cfg, tc.targets)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v; want %q", err, tc.want)
			}
			if dialled.Load() {
				t.Fatal("the run dialled the target; want a refusal before any request")
			}
		})
	}
}
