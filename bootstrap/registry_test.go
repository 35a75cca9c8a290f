package bootstrap

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

func TestRegistryPort(t *testing.T) {
	// serverInfo answers /server_info as a prefill that reports no
	// bootstrap port would (an old SGLang, or a non-SGLang front).
	serverInfo := func(status int, body string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(status)
			ctx.SetBodyString(body)
		}
	}
	for _, tc := range []struct {
		name       string
		engineAPI  string // where the fake prefill's API listens
		fake       fake.Config
		api        fasthttp.RequestHandler // if set, the API at target.APIAddr instead of the fake's
		target     Target
		wantPort   int
		wantSource string
		wantHost   string // rank_ip
		wantAsked  uint64 // /server_info requests to the fake
	}{{
		name:      "from the command line",
		engineAPI: prefillAPI, fake: fake.Config{BootstrapAddr: "prefill-0:9001"},
		target:   Target{APIAddr: prefillAPI, Port: 9001},
		wantPort: 9001, wantSource: PortFromCLI, wantHost: "prefill-0", wantAsked: 0,
	}, {
		name:      "from /server_info",
		engineAPI: prefillAPI, fake: fake.Config{BootstrapAddr: "prefill-0:9002"},
		target:   Target{APIAddr: prefillAPI},
		wantPort: 9002, wantSource: PortFromServerInfo, wantHost: "prefill-0", wantAsked: 1,
	}, {
		name:      "default when /server_info reports null",
		engineAPI: "engine-0:30000", fake: fake.Config{BootstrapAddr: prefillBoot},
		api:      serverInfo(fasthttp.StatusOK, `{"disaggregation_bootstrap_port":null}`),
		target:   Target{APIAddr: prefillAPI},
		wantPort: DefaultPort, wantSource: PortDefault, wantHost: "prefill-0",
	}, {
		name:      "default when there is no /server_info",
		engineAPI: "engine-0:30000", fake: fake.Config{BootstrapAddr: prefillBoot},
		api:      serverInfo(fasthttp.StatusNotFound, `{"detail":"Not Found"}`),
		target:   Target{APIAddr: prefillAPI},
		wantPort: DefaultPort, wantSource: PortDefault, wantHost: "prefill-0",
	}, {
		name:      "bootstrap host apart from the API",
		engineAPI: prefillAPI, fake: fake.Config{BootstrapAddr: "boot-0:7000"},
		target:   Target{APIAddr: prefillAPI, Host: "boot-0"},
		wantPort: 7000, wantSource: PortFromServerInfo, wantHost: "boot-0", wantAsked: 1,
	}, {
		name:      "IPv6 host in brackets",
		engineAPI: "[fd00::1]:30000",
		target:    Target{APIAddr: "[fd00::1]:30000", Host: "[fd00::1]"},
		wantPort:  DefaultPort, wantSource: PortFromServerInfo, wantHost: "fd00::1", wantAsked: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			nw := fake.NewNetwork()
			tc.fake.DPSize = 2
			p := startPrefill(t, nw, tc.engineAPI, tc.fake)
			if tc.api != nil {
				serveAPI(t, nw, tc.target.APIAddr, tc.api)
			}
			r := newRegistry(nw, Config{Targets: []Target{tc.target}})

			st := mustRefresh(t, r, 0)
			if st.Port != tc.wantPort || st.PortSource != tc.wantSource {
				t.Errorf("got port %d from %q; want %d from %q", st.Port, st.PortSource, tc.wantPort, tc.wantSource)
			}
			if want := fakeRanks(tc.wantHost, tc.wantPort, 2); !slices.Equal(st.Ranks, want) {
				t.Errorf("got ranks %+v; want %+v", st.Ranks, want)
			}
			// A ready target keeps its port: /server_info is asked once.
			mustRefresh(t, r, 0)
			if got := p.Stats().ServerInfo; got != tc.wantAsked {
				t.Errorf("got %d /server_info requests; want %d", got, tc.wantAsked)
			}
		})
	}
}

func TestRegistryNotRegisteredThenReady(t *testing.T) {
	nw := fake.NewNetwork()
	clk := newClock()
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4, RegisterDelay: time.Minute, Now: clk.Now})
	var changes []*State
	r := newRegistry(nw, Config{
		Targets:  []Target{{APIAddr: prefillAPI}},
		Now:      clk.Now,
		OnChange: func(i int, st *State) { changes = append(changes, st) }, // called by Refresh, on this goroutine
	})

	st := r.State(0)
	if st.Ready || st.Generation != 0 || st.Err == "" || !st.Updated.IsZero() {
		t.Fatalf("got initial state %+v; want not ready, generation 0, an error, no update time", st)
	}

	err := r.Refresh(testContext(t), 0)
	if !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), "(0 workers registered)") {
		t.Fatalf("got error %v; want ErrNotRegistered with the worker count", err)
	}
	st = r.State(0)
	if st.Ready || st.Err != err.Error() || st.Port != DefaultPort || st.PortSource != PortFromServerInfo {
		t.Errorf("got state %+v; want not ready on port %d from server_info, with error %q", st, DefaultPort, err)
	}
	// Learning the port is a change; retrying is not.
	if st.Generation != 1 || len(changes) != 1 || changes[0] != st {
		t.Errorf("got generation %d and %d changes; want generation 1 and 1 change", st.Generation, len(changes))
	}
	if !st.Updated.Equal(clk.Now()) {
		t.Errorf("got updated %v; want %v", st.Updated, clk.Now())
	}
	if err := r.Refresh(testContext(t), 0); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("got error %v; want ErrNotRegistered", err)
	}
	if got := r.State(0).Generation; got != 1 || len(changes) != 1 {
		t.Errorf("got generation %d and %d changes after a retry; want 1 and 1", got, len(changes))
	}

	clk.Add(time.Minute)
	st = mustRefresh(t, r, 0)
	if st.Info != fakeInfo(4, false) || !slices.Equal(st.Ranks, fakeRanks("prefill-0", DefaultPort, 4)) || st.Err != "" {
		t.Errorf("got state %+v; want the fake's info and 4 ranks, no error", st)
	}
	if st.Generation != 2 || len(changes) != 2 || changes[1] != st {
		t.Errorf("got generation %d and %d changes once ready; want 2 and 2", st.Generation, len(changes))
	}

	clk.Add(time.Second)
	again := mustRefresh(t, r, 0)
	if again == st || again.Generation != 2 || len(changes) != 2 || !again.Updated.Equal(clk.Now()) {
		t.Errorf("got state %+v and %d changes after an unchanged refresh; want a new snapshot of generation 2, updated %v, and 2 changes",
			again, len(changes), clk.Now())
	}
}

func TestRegistryUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  Target
		wantErr string
	}{
		{name: "API", target: Target{APIAddr: prefillAPI},
			wantErr: "cannot read /server_info of prefill prefill-0:30000: "},
		{name: "bootstrap server", target: Target{APIAddr: prefillAPI, Port: 8998},
			wantErr: "cannot fetch parallel info from bootstrap server prefill-0:8998: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(fake.NewNetwork(), Config{Targets: []Target{tc.target}})
			err := r.Refresh(testContext(t), 0)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("got error %v; want one starting %q", err, tc.wantErr)
			}
			if st := r.State(0); st.Ready || st.Err != err.Error() {
				t.Errorf("got state %+v; want not ready with error %q", st, err)
			}
		})
	}
}

func TestRegistryRestart(t *testing.T) {
	nw := fake.NewNetwork()
	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI}}})
	gen := mustRefresh(t, r, 0).Generation

	// Restarted between two refreshes, with another DP size.
	closePrefill(t, p)
	p = startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2})
	st := mustRefresh(t, r, 0)
	if st.Info.DPSize != 2 || !slices.Equal(st.Ranks, fakeRanks("prefill-0", DefaultPort, 2)) || st.Generation != gen+1 {
		t.Errorf("got state %+v; want dp_size 2, 2 ranks, generation %d", st, gen+1)
	}

	// Gone: not ready, the last info kept.
	closePrefill(t, p)
	err := r.Refresh(testContext(t), 0)
	st = r.State(0)
	if err == nil || st.Ready || !strings.Contains(st.Err, "bootstrap server prefill-0:8998") ||
		st.Info.DPSize != 2 || st.Generation != gen+2 {
		t.Errorf("got error %v and state %+v; want not ready naming prefill-0:8998, dp_size 2, generation %d", err, st, gen+2)
	}

	// Back, with its bootstrap server on another port: /server_info is
	// asked again.
	p = startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4, BootstrapAddr: "prefill-0:9100"})
	st = mustRefresh(t, r, 0)
	if st.Port != 9100 || st.Info.DPSize != 4 || !slices.Equal(st.Ranks, fakeRanks("prefill-0", 9100, 4)) || st.Generation != gen+3 {
		t.Errorf("got state %+v; want port 9100, dp_size 4, 4 ranks, generation %d", st, gen+3)
	}
	if got := p.Stats().ServerInfo; got != 1 {
		t.Errorf("got %d /server_info requests to the restarted prefill; want 1", got)
	}
}

func TestRegistryWaitReady(t *testing.T) {
	nw := fake.NewNetwork()
	clk := newClock()
	startPrefill(t, nw, prefillAPI, fake.Config{RegisterDelay: time.Minute, Now: clk.Now})
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI}, {APIAddr: "nowhere:30000"}}})
	if err := r.Refresh(testContext(t), 0); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("got error %v; want ErrNotRegistered", err)
	}

	type result struct {
		st  *State
		err error
	}
	const waiters = 3
	results := make(chan result, waiters)
	ctx := testContext(t)
	for range waiters {
		go func() {
			st, err := r.WaitReady(ctx, 0)
			results <- result{st, err}
		}()
	}
	select {
	case res := <-results:
		t.Fatalf("got %+v from WaitReady before the target was ready", res)
	default:
	}

	clk.Add(time.Minute)
	ready := mustRefresh(t, r, 0)
	for range waiters {
		select {
		case res := <-results:
			if res.err != nil || res.st != ready {
				t.Errorf("got %+v, %v; want the ready state %p", res.st, res.err, ready)
			}
		case <-time.After(testDeadline):
			t.Fatal("WaitReady did not return once the target was ready")
		}
	}
	if st, err := r.WaitReady(testContext(t), 0); err != nil || st != ready {
		t.Errorf("got %+v, %v from WaitReady on a ready target; want the ready state", st, err)
	}

	// Cancellation, with the target's last error in the message.
	if err := r.Refresh(testContext(t), 1); err == nil {
		t.Fatal("got no error refreshing an unreachable target")
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		st, err := r.WaitReady(ctx, 1)
		done <- result{st, err}
	}()
	cancel()
	select {
	case res := <-done:
		if !errors.Is(res.err, context.Canceled) || !strings.Contains(res.err.Error(), "cannot read /server_info of prefill nowhere:30000") {
			t.Errorf("got error %v; want context.Canceled with the target's error", res.err)
		}
		if res.st != r.State(1) || res.st.Ready {
			t.Errorf("got state %+v; want the latest, not ready", res.st)
		}
	case <-time.After(testDeadline):
		t.Fatal("WaitReady did not return once ctx was cancelled")
	}
}

// Recheck refreshes a target found wrong only if nobody has since: the many
// requests that find a restarted prefill's State stale at once share one
// refresh.
func TestRegistryRecheck(t *testing.T) {
	nw := fake.NewNetwork()
	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})
	clk := newClock()
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI, Port: DefaultPort}}, Now: clk.Now})
	old := mustRefresh(t, r, 0)

	closePrefill(t, p)
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2})
	clk.Add(time.Second)
	if err := r.Recheck(testContext(t), 0, old); err != nil {
		t.Fatal(err)
	}
	st := r.State(0)
	if st.Info.DPSize != 2 || st.Generation != old.Generation+1 || !st.Updated.Equal(clk.Now()) {
		t.Fatalf("got %+v; want the restarted prefill's dp_size 2, refreshed now", st)
	}
	clk.Add(time.Second)
	if err := r.Recheck(testContext(t), 0, old); err != nil || r.State(0) != st {
		t.Fatalf("got %v and %+v; want no second refresh for the same stale State", err, r.State(0))
	}
	// A refresh that finds nothing new still publishes a State: the callers
	// that queued behind it, having read the one before, do not refresh.
	if err := r.Recheck(testContext(t), 0, st); err != nil {
		t.Fatal(err)
	}
	again := r.State(0)
	if again == st || again.Generation != st.Generation {
		t.Fatalf("got %+v; want a new State of the same generation", again)
	}
	clk.Add(time.Second)
	if err := r.Recheck(testContext(t), 0, st); err != nil || r.State(0) != again {
		t.Fatalf("got %v and %+v; want no refresh for a caller behind one that found nothing new", err, r.State(0))
	}
}
