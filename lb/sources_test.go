package lb

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb/discovery"
)

// A decode given on the command line that DNS names too stays when DNS
// stops naming it: a worker leaves when no source gives it any more. The
// worker API's DELETE removes it whatever its sources (issue 23 §1).
func TestWorkerStaysWhileASourceGivesIt(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		srv := h.start(adminConfig())
		const d0 = "http://decode-0:30010"
		b := srv.decodes.find(d0)
		sources := func() []string {
			t.Helper()
			list := h.do(fasthttp.MethodGet, workersPath, "", "Authorization", adminAuth)
			var names []string
			for _, s := range workerOf(t, list.body, d0).Get("sources").Array() {
				names = append(names, s.String())
			}
			return names
		}

		if again, err := srv.addWorker(roleDecode, PrefillSpec{URL: d0}, sourceDNS); err != nil || again != b {
			t.Fatalf("DNS naming a decode given at start: got %p, %v; want the same backend", again, err)
		}
		if got := sources(); !slices.Equal(got, []string{"command_line", "dns"}) {
			t.Errorf("sources: got %q; want the command line and DNS", got)
		}
		gone, err := srv.removeWorker(roleDecode, d0, sourceDNS)
		if err != nil || gone || srv.decodes.find(d0) != b || b.leaving.Load() {
			t.Fatalf("DNS no longer naming it: gone %v, %v; want it kept by the command line", gone, err)
		}
		if got := sources(); !slices.Equal(got, []string{"command_line"}) {
			t.Errorf("sources: got %q; want the command line alone", got)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Errorf("through the decode kept: got %d %s; want 200", r.status, r.body)
		}

		if r := h.do(fasthttp.MethodDelete, workersPath+"/"+workerID(roleDecode, d0), "", "Authorization", adminAuth); r.status != fasthttp.StatusAccepted {
			t.Fatalf("DELETE: got %d %s; want 202", r.status, r.body)
		}
		if srv.decodes.find(d0) != nil || !b.leaving.Load() {
			t.Error("DELETE of a worker the command line gives left it a member")
		}
	})
}

// A worker is known by its address, however its URL is spelled: another
// source naming a member in another spelling gives it a source, and makes
// no second backend (whose metric series would collide and panic).
func TestOneWorkerHoweverItsURLIsSpelled(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		srv := h.start(defaultConfig())
		b := srv.decodes.find("http://decode-0:30010")
		for _, u := range []string{"decode-0:30010", "http://decode-0:30010/"} {
			if again, err := srv.addWorker(roleDecode, PrefillSpec{URL: u}, sourceDNS); err != nil || again != b {
				t.Fatalf("adding %q: got %p, %v; want the member %p", u, again, err, b)
			}
		}
		if gone, err := srv.removeWorker(roleDecode, "decode-0:30010", sourceDNS); err != nil || gone || b.givenBy() != sourceStart {
			t.Errorf("DNS no longer naming it: gone %v, %v, sources %s; want it kept by the command line", gone, err, b.givenBy())
		}
		if n := len(srv.decodes.backends()); n != 1 {
			t.Errorf("the decode pool has %d workers; want 1", n)
		}
	})
}

// Discovery dropping a worker the worker API removed already is no
// failure: nothing is left to do, and nothing is counted.
func TestDiscoveryDropsAWorkerTheAPIRemoved(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode})
		srv := h.start(defaultConfig())
		counts := newChangeCounts(srv.ms, `pdlb_test_workers_changed_total`)
		d1 := discovery.Worker{Role: discovery.Decode, URL: "http://decode-1:30010"}
		srv.applyChange(discovery.Change{Added: []discovery.Worker{d1}}, sourceDNS, counts)
		if _, err := srv.removeWorker(roleDecode, d1.URL, sourceAll); err != nil { // the API's DELETE
			t.Fatal(err)
		}
		srv.applyChange(discovery.Change{Removed: []discovery.Worker{d1}}, sourceDNS, counts)
		if got := [3]uint64{counts.added.Get(), counts.removed.Get(), counts.failed.Get()}; got != [3]uint64{1, 0, 0} {
			t.Errorf("added, removed, failed: got %d; want 1, 0, 0", got)
		}
	})
}

// A discovered prefill whose bootstrap port changes (a pod's annotation
// edited, or removed) is re-pointed in place: not drained and taken back,
// and back to learning the port from /server_info when the new one is 0.
func TestDiscoveredPortChangeRepointsInPlace(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 9001})
		srv := h.start(defaultConfig())
		counts := newChangeCounts(srv.ms, `pdlb_test_workers_changed_total`)
		annotated := discovery.Worker{Role: discovery.Prefill, URL: "http://prefill-1:30000", BootstrapPort: 8998}
		srv.applyChange(discovery.Change{Added: []discovery.Worker{annotated}}, sourceDNS, counts)
		b := srv.prefills.find(annotated.URL)
		unannotated := annotated
		unannotated.BootstrapPort = 0
		srv.applyChange(discovery.Change{Removed: []discovery.Worker{annotated}, Added: []discovery.Worker{unannotated}}, sourceDNS, counts)
		if srv.prefills.find(annotated.URL) != b || b.leaving.Load() || counts.removed.Get() != 0 {
			t.Fatalf("a port change drained the prefill (removed counted %d)", counts.removed.Get())
		}
		settled(t, "the registry reads prefill-1", func() bool { return srv.registry.State(b.index).Ready })
		if st := srv.registry.State(b.index); st.Port != 9001 || st.PortSource != "server_info" {
			t.Errorf("after its port went: port %d from %q; want 9001 from server_info", st.Port, st.PortSource)
		}
	})
}

// A prefill given on the command line with its bootstrap port keeps it
// when another source names it without one ("unknown": DNS without an SRV
// record, the API without bootstrap_port).
func TestSecondSourceKeepsTheGivenBootstrapPort(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{BootstrapPort: 9001}, fake.Config{})
		cfg := defaultConfig()
		cfg.Prefill[0].BootstrapPort = 9001
		srv := h.start(cfg)
		b := srv.prefills.backends()[0]
		settled(t, "the registry reads prefill-0", func() bool { return srv.registry.State(b.index).Ready })
		before := srv.registry.State(b.index)
		if _, err := srv.addWorker(rolePrefill, PrefillSpec{URL: b.url}, sourceDNS); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the bubble's clock: a refresh of the registry
		synctest.Wait()
		if after := srv.registry.State(b.index); after.PortSource != before.PortSource || after.Port != 9001 {
			t.Errorf("after DNS named it without a port: port %d from %q; want 9001 from %q, as the command line gave",
				after.Port, after.PortSource, before.PortSource)
		}
	})
}

// With no worker given at all, pdlb starts: /liveness answers 200 and
// /readiness a 503 naming what is missing, until the worker API adds a
// prefill and a decode; requests then go through them (issue 23 §1).
func TestStartEmptyThenFillByTheAPI(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := adminConfig()
		cfg.Prefill, cfg.Decode = nil, nil
		h.start(cfg)

		if r := h.do(fasthttp.MethodGet, "/liveness", ""); r.status != fasthttp.StatusOK {
			t.Errorf("/liveness with no worker: got %d %s; want 200", r.status, r.body)
		}
		ready := h.do(fasthttp.MethodGet, "/readiness", "")
		if ready.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(ready.body), `"a ready prefill"`) ||
			!strings.Contains(string(ready.body), `"a ready decode"`) {
			t.Errorf("/readiness with no worker: got %d %s; want 503 naming the prefill and the decode", ready.status, ready.body)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusServiceUnavailable ||
			!strings.Contains(string(r.body), "pool has no workers") {
			t.Errorf("a request with no worker: got %d %s; want a 503 naming the empty pool", r.status, r.body)
		}
		if r := h.do(fasthttp.MethodGet, "/bootstrap", "", "Authorization", adminAuth); r.status != fasthttp.StatusOK ||
			!gjson.GetBytes(r.body, "prefills").IsArray() || len(gjson.GetBytes(r.body, "prefills").Array()) != 0 {
			t.Errorf("/bootstrap with no prefill: got %d %s; want 200 with an empty list of prefills", r.status, r.body)
		}
		for _, route := range []string{"/v1/models", "/get_model_info", "/model_info"} {
			if r := h.do(fasthttp.MethodGet, route, ""); r.status != fasthttp.StatusServiceUnavailable ||
				!strings.Contains(string(r.body), "the prefill pool has no workers") {
				t.Errorf("%s with no worker: got %d %s; want a 503 naming the empty prefill pool", route, r.status, r.body)
			}
		}

		for _, spec := range []string{
			`{"url": "http://prefill-0:30000", "worker_type": "prefill", "bootstrap_port": 8998}`,
			`{"url": "http://decode-0:30010", "worker_type": "decode"}`,
		} {
			if r := h.post(workersPath, spec, "Authorization", adminAuth); r.status != fasthttp.StatusAccepted {
				t.Fatalf("POST /workers %s: got %d %s; want 202", spec, r.status, r.body)
			}
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "text").String() == "" {
			t.Errorf("once filled by the API: got %d %s; want 200 with a text", r.status, r.body)
		}
		if r := h.do(fasthttp.MethodGet, "/readiness", ""); r.status != fasthttp.StatusOK {
			t.Errorf("/readiness once filled: got %d %s; want 200", r.status, r.body)
		}
	})
}
