package fake

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// noPolls is a HeartbeatInterval long enough that the background polls
// never run in a test, which calls heartbeatRound itself.
const noPolls = time.Hour

// checkDrops checks a decode's PrefillInfoFetches and PrefillInfoDrops.
func checkDrops(t *testing.T, d *Server, fetches, drops uint64) {
	t.Helper()
	if st := d.Stats(); st.PrefillInfoFetches != fetches || st.PrefillInfoDrops != drops {
		t.Errorf("got PrefillInfoFetches %d, PrefillInfoDrops %d; want %d, %d",
			st.PrefillInfoFetches, st.PrefillInfoDrops, fetches, drops)
	}
}

// Regression: a decode kept the parallel info it cached for a bootstrap
// address forever, so after the prefill there restarted with another DP
// size, its requests waited on the wrong prefill DP rank until the KV
// timeout. Like SGLang's, it now drops the info once HeartbeatMaxFailures
// health polls in a row failed, and fetches it again.
func TestHeartbeatDropsInfoOfRestartedPrefill(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		rounds int // failed poll rounds while the prefill is down
		wantOK bool
	}{
		{"dropped after two failed polls", 2, true},
		// Fewer failures keep the stale info, in SGLang too: room 3 is
		// on prefill DP rank 1 now, the decode waits on rank 0.
		{"kept after one failed poll", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := NewNetwork()
			kv := 300 * time.Millisecond
			p1 := New(Config{Role: RolePrefill, KVTimeout: kv})
			if err := p1.Start(n, prefillAddr); err != nil {
				t.Fatal(err)
			}
			d := startServer(t, n, decodeAddr, Config{Role: RoleDecode, HeartbeatInterval: noPolls, KVTimeout: kv})
			fields := `"text":"a","sampling_params":{"max_new_tokens":1}`
			if pres, dres := both(t, n, "/generate", pdBody(fields, "prefill", "8998", 1), pdBody(fields, "prefill", "8998", 1)); dres.status != 200 {
				t.Fatalf("before the restart: got %d %s (prefill %d %s); want 200", dres.status, dres.body, pres.status, pres.body)
			}
			if err := p1.Close(); err != nil {
				t.Fatal(err)
			}
			for range c.rounds {
				d.heartbeatRound()
			}
			startServer(t, n, prefillAddr, Config{Role: RolePrefill, DPSize: 2, KVTimeout: kv})
			body := pdBody(fields, "prefill", "8998", 3)
			_, dres := both(t, n, "/generate", body, body)
			if ok := dres.status == 200; ok != c.wantOK {
				t.Fatalf("after the restart: got %d %s; want success %v", dres.status, dres.body, c.wantOK)
			}
			if c.wantOK {
				checkDrops(t, d, 2, 1)
			} else {
				checkDrops(t, d, 1, 0)
				if !strings.Contains(dres.body, "in KVPoll.WaitingForInput") {
					t.Errorf("got %s; want the KV timeout", dres.body)
				}
			}
		})
	}
}

// The count of failed polls: a 200 resets it, a drop does not (SGLang's
// heartbeat_failures), and each decode DP rank keeps its own.
func TestHeartbeatFailureCount(t *testing.T) {
	n := NewNetwork()
	p := startServer(t, n, prefillAddr, Config{Role: RolePrefill})
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode, DPSize: 2, HeartbeatInterval: noPolls})
	request := func(room uint64) {
		t.Helper()
		body := pdBody(`"text":"a","sampling_params":{"max_new_tokens":1}`, "prefill", "8998", room)
		if _, dres := both(t, n, "/generate", body, body); dres.status != 200 {
			t.Fatalf("got %d %s; want 200", dres.status, dres.body)
		}
	}
	down := func(down bool) {
		t.Helper()
		if err := p.SetBootstrapDown(down); err != nil {
			t.Fatal(err)
		}
	}
	request(1) // decode DP rank 0 caches the info; rank 1 does not
	checkDrops(t, d, 1, 0)

	down(true)
	d.heartbeatRound()
	down(false)
	d.heartbeatRound() // a 200: the count starts again
	down(true)
	d.heartbeatRound()
	checkDrops(t, d, 1, 0)
	d.heartbeatRound()
	checkDrops(t, d, 1, 1) // rank 0 only: rank 1 had nothing to drop

	down(false)
	request(2) // rank 1 fetches
	request(3) // rank 0 fetches again
	checkDrops(t, d, 3, 1)
	down(true)
	d.heartbeatRound() // rank 0's count is still 2: dropped at once
	checkDrops(t, d, 3, 2)
	d.heartbeatRound()
	checkDrops(t, d, 3, 3)
}

// The items waiting for their KV from a prefill whose info is dropped fail
// at once with SGLang's reason, here with the background polls at a small
// interval and a bootstrap server that answers /health with a 503 but still
// serves /route. The fake-only /fake/kv_transfer it receives shows that the
// decode resolved the prefill DP rank with the cached info and waits.
func TestHeartbeatFailsWaitingItems(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	info := New(Config{Role: RolePrefill}) // answers /route, never started
	var unhealthy atomic.Bool
	waiting := make(chan struct{}, 1)
	release := make(chan struct{})
	serveFunc(t, n, "boot:8998", func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/health":
			if unhealthy.Load() {
				writeText(ctx, fasthttp.StatusServiceUnavailable, "down")
				return
			}
			writeText(ctx, fasthttp.StatusOK, "OK")
		case kvTransferPath:
			waiting <- struct{}{}
			<-release
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, []byte(`{"status":"closing"}`))
		default:
			info.BootstrapHandler(ctx)
		}
	})
	t.Cleanup(func() { close(release) }) // before serveFunc's shutdown
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode, HeartbeatInterval: 5 * time.Millisecond})
	answer := make(chan result, 1)
	go func() {
		res, err := roundTrip(n, "POST", decodeAddr, "/generate", pdBody(`"text":"a"`, "boot", "8998", 5))
		if err != nil {
			res.body = err.Error()
		}
		answer <- res
	}()
	within(t, waiting, "the decode waiting for its KV")
	unhealthy.Store(true)
	res := within(t, answer, "the decode's answer")
	want := "KVTransferError(bootstrap_room=5): Lost connection with prefill instance (bootstrap_addr: boot:8998)"
	if res.status != 500 || !strings.Contains(res.body, want) {
		t.Errorf("got %d %s; want 500 with %q", res.status, res.body, want)
	}
	if st := d.Stats(); st.PrefillInfoDrops != 1 || st.KVTransfersFailed != 1 {
		t.Errorf("got PrefillInfoDrops %d, KVTransfersFailed %d; want 1, 1", st.PrefillInfoDrops, st.KVTransfersFailed)
	}
}

// A decode asks a bootstrap server that is not ready for the prefill's
// parallel info InfoRetries times, InfoRetryInterval apart, then fails the
// request, however long its KV timeout (SGLang's 15 tries 1 s apart, in
// disaggregation/decode.py); the fake used to ask every 100 ms until the
// timeout.
func TestPrefillInfoTries(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	var asks atomic.Int32
	serveFunc(t, n, "boot:8998", func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/route" {
			asks.Add(1)
		}
		writeText(ctx, fasthttp.StatusServiceUnavailable, "Prefill server not fully registered yet (0 workers registered).")
	})
	startServer(t, n, decodeAddr, Config{Role: RoleDecode, InfoRetries: 3, InfoRetryInterval: 10 * time.Millisecond, KVTimeout: time.Minute})
	res, err := roundTrip(n, "POST", decodeAddr, "/generate", pdBody(`"text":"a"`, "boot", "8998", 5))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Could not fetch prefill parallel info from bootstrap_addr: boot:8998"; res.status != 500 || !strings.Contains(res.body, want) {
		t.Errorf("got %d %s; want 500 with %q", res.status, res.body, want)
	}
	if a := asks.Load(); a != 3 {
		t.Errorf("the decode asked %d times; want 3", a)
	}
}
