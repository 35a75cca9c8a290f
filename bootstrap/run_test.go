package bootstrap

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"pdlb/bench/fake"
)

func TestRegistryRun(t *testing.T) {
	nw := fake.NewNetwork()
	clk := newClock()
	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4, RegisterDelay: time.Minute, Now: clk.Now})
	changes := make(chan *State, 64)
	r := newRegistry(nw, Config{
		// The second target never answers: Run must not wait for it.
		Targets:         []Target{{APIAddr: prefillAPI}, {APIAddr: "nowhere:30000"}},
		RefreshInterval: time.Hour, // only Poke refreshes a ready target
		RetryMin:        time.Millisecond,
		RetryMax:        5 * time.Millisecond,
		OnChange: func(i int, st *State) {
			if i == 0 {
				changes <- st
			}
		},
	})
	before := goleak.IgnoreCurrent()
	var restarted *fake.Server
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		r.Run(stop)
		close(done)
	}()
	defer func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(testDeadline):
			t.Fatal("Run did not return once stop was closed")
		}
		// Run has left nothing behind. Goroutines older than Run are
		// ignored; the prefill started since must be closed first.
		if restarted != nil {
			closePrefill(t, restarted)
		}
		goleak.VerifyNone(t, append(leakOptions, before)...)
	}()

	// Not registered: Run retries with backoff until it is.
	clk.Add(time.Minute)
	st, err := r.WaitReady(testContext(t), 0)
	if err != nil || st.Info != fakeInfo(4, false) || len(st.Ranks) != 4 {
		t.Fatalf("got %+v, %v; want ready with the fake's info and 4 ranks", st, err)
	}
	waitChange(t, changes, func(st *State) bool { return st.Ready && st.Info.DPSize == 4 })

	// Restarted with another DP size: a Poke makes Run notice at once.
	closePrefill(t, p)
	restarted = startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2})
	r.Poke(0)
	got := waitChange(t, changes, func(st *State) bool { return st.Info.DPSize == 2 })
	if !got.Ready || len(got.Ranks) != 2 || got.Generation <= st.Generation {
		t.Errorf("got state %+v; want ready with 2 ranks and a generation above %d", got, st.Generation)
	}
	if all := r.Snapshot(); len(all) != 2 || all[0] != r.State(0) || all[1] != r.State(1) || all[1].Ready {
		t.Errorf("got snapshot %+v; want both targets' latest states, the second not ready", all)
	}
}

// waitChange returns the first State passed to OnChange that satisfies ok.
func waitChange(t *testing.T, changes <-chan *State, ok func(*State) bool) *State {
	t.Helper()
	deadline := time.After(testDeadline)
	for {
		select {
		case st := <-changes:
			if ok(st) {
				return st
			}
		case <-deadline:
			t.Fatal("OnChange was not called with the expected state")
			return nil
		}
	}
}

func TestRegistryMetrics(t *testing.T) {
	nw := fake.NewNetwork()
	set := metrics.NewSet()
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI, Port: 8998}}, Metrics: set})
	check := func(want ...string) {
		t.Helper()
		var b bytes.Buffer
		set.WritePrometheus(&b)
		for _, line := range want {
			if !strings.Contains(b.String(), line+"\n") {
				t.Errorf("got metrics\n%s\nwant the line %q", b.String(), line)
			}
		}
	}
	check(`pdlb_bootstrap_ready{prefill="prefill-0:30000"} 0`,
		`pdlb_bootstrap_dp_size{prefill="prefill-0:30000"} 0`,
		`pdlb_bootstrap_refreshes_total{prefill="prefill-0:30000"} 0`,
		`pdlb_bootstrap_refresh_failures_total{prefill="prefill-0:30000"} 0`)

	if err := r.Refresh(testContext(t), 0); err == nil {
		t.Fatal("got no error refreshing an unreachable prefill")
	}
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})
	mustRefresh(t, r, 0)
	check(`pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`,
		`pdlb_bootstrap_dp_size{prefill="prefill-0:30000"} 4`,
		`pdlb_bootstrap_refreshes_total{prefill="prefill-0:30000"} 2`,
		`pdlb_bootstrap_refresh_failures_total{prefill="prefill-0:30000"} 1`)
}

func TestEscapeLabel(t *testing.T) {
	f := func(s, want string) {
		t.Helper()
		if got := escapeLabel(s); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f("prefill-0:30000", "prefill-0:30000")
	f(`a"b\c`+"\n", `a\"b\\c\n`)
}

// TestRegistryLogsTransitionsOnce checks that a prefill that keeps failing
// logs one line at info or warn per transition, and the rest at debug.
func TestRegistryLogsTransitionsOnce(t *testing.T) {
	nw := fake.NewNetwork()
	clk := newClock()
	var logs bytes.Buffer
	r := newRegistry(nw, Config{
		Targets: []Target{{APIAddr: prefillAPI}},
		Log:     zerolog.New(&logs).Level(zerolog.DebugLevel),
	})
	refresh := func() {
		t.Helper()
		_ = r.Refresh(testContext(t), 0) // the outcome is in the logs
	}

	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4, RegisterDelay: time.Minute, Now: clk.Now})
	refresh() // not registered: the first failure
	refresh() // still not
	clk.Add(time.Minute)
	refresh() // ready
	refresh() // unchanged
	closePrefill(t, p)
	refresh() // gone
	refresh() // still gone

	type line struct {
		Level      string `json:"level"`
		Message    string `json:"message"`
		Prefill    string `json:"prefill"`
		Error      string `json:"error"`
		Port       int    `json:"port"`
		PortSource string `json:"port_source"`
		DPSize     int    `json:"dp_size"`
		Ranks      int    `json:"ranks"`
	}
	var got []line
	for _, raw := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("cannot parse log line %s: %v", raw, err)
		}
		if l.Prefill != prefillAPI {
			t.Errorf("got log line %s; want it to name the prefill %s", raw, prefillAPI)
		}
		got = append(got, l)
	}
	want := []struct{ level, message, err string }{
		{"info", "waiting for the prefill bootstrap server", "not fully registered"},
		{"debug", "prefill bootstrap server still not ready", "not fully registered"},
		{"info", "prefill bootstrap server is ready", ""},
		{"warn", "prefill bootstrap server is not ready", "prefill-0:8998"},
		// Its port came from /server_info, so that is asked again.
		{"debug", "prefill bootstrap server still not ready", "cannot read /server_info of prefill prefill-0:30000"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d log lines %+v; want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if g := got[i]; g.Level != w.level || g.Message != w.message || !strings.Contains(g.Error, w.err) {
			t.Errorf("got log line %d %+v; want %s %q with an error containing %q", i, g, w.level, w.message, w.err)
		}
	}
	if g := got[2]; g.Port != 8998 || g.PortSource != PortFromServerInfo || g.DPSize != 4 || g.Ranks != 4 {
		t.Errorf("got ready line %+v; want port 8998 from server_info, dp_size 4, 4 ranks", g)
	}
}
