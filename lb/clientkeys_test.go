package lb

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"pdlb/bench/fake"
	"pdlb/bootstrap"
)

// kvFields are the members that steer a KV transfer: pdlb writes them, or
// none, and a client's never reaches a worker.
var kvFields = []string{"bootstrap_host", "bootstrap_port", "bootstrap_room", "do_local_prefill"}

// hostileKVBody spells the fields pdlb owns as a worker's json.loads reads
// them but no byte comparison does, beside one plain spelling. Issue 19:
// "bootstrap\u005fhost" reached a decode on the decode-only path, pointed
// its KV handshake at the client's address, and six such requests ejected
// the decode for everyone.
const hostileKVBody = `{"text": "a", "sampling_params": {"max_new_tokens": 2, "bootstrap_room": 5}, ` +
	`"bootstrap\u005fhost": "evil.example", "bootstrap\u005fport": 1, "bootstrap\u005Froom": 7, ` +
	`"\u0062ootstrap_host": "evil2", "bootstrap_host": "evil3", "bootstr\u0061p_room": [7], ` +
	`"do\u005flocal\u005fprefill": true, "x": 1.50}`

// Every worker gets the fields pdlb owns from pdlb alone, whatever the
// path: under any spelling of its key, a client's bootstrap field or
// do_local_prefill is removed, not merely shadowed by pdlb's own.
func TestClientKVFieldsNeverReachWorkers(t *testing.T) {
	pd := map[string]string{"bootstrap_host": `"prefill-0"`, "bootstrap_port": `8998`, "bootstrap_room": `42`}
	for _, c := range []struct {
		name, path string
		header     []string
		local      bool     // --decode-local-prefill
		roles      []string // the workers that get the request
	}{
		{"pd", "/generate", nil, false, []string{"prefill", "decode"}},
		{"pd chat", "/v1/chat/completions", nil, false, []string{"prefill", "decode"}},
		{"fallback", "/generate", []string{headerPDMode, "decode-only"}, false, []string{"fallback"}},
		{"local prefill", "/generate", []string{headerPDMode, "decode-only"}, true, []string{"decode"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				got := map[string]*bodies{"prefill": {}, "decode": {}, "fallback": {}}
				h.pair(fake.Config{OnRequest: got["prefill"].record}, fake.Config{ConditionalAgg: true, OnRequest: got["decode"].record})
				h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated, OnRequest: got["fallback"].record})
				cfg := fallbackConfig()
				cfg.DecodeLocalPrefill = c.local
				cfg.NewRoom = func() uint64 { return 42 }
				srv := h.start(cfg)
				body := hostileKVBody
				if c.path == "/v1/chat/completions" {
					body = strings.Replace(body, `"text": "a"`, `"messages": [{"role": "user", "content": "a"}]`, 1)
				}
				if r := h.post(c.path, body, c.header...); r.status != fasthttp.StatusOK {
					t.Fatalf("got %d %s", r.status, r.body)
				}
				waitIdle(t, srv)
				for role, b := range got {
					want := 0
					if slices.Contains(c.roles, role) {
						want = 1
					}
					if n := b.count(); n != want {
						t.Fatalf("the %s got %d requests; want %d", role, n, want)
					}
					if want == 0 {
						continue
					}
					owned := pd
					switch {
					case role == "fallback":
						owned = nil
					case c.local:
						owned = map[string]string{"do_local_prefill": "true"}
					}
					checkWorkerBody(t, role, []byte(body), b.only(t), owned)
				}
			})
		})
	}
}

func (b *bodies) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.all)
}

// checkWorkerBody fails t unless body, which the worker who got from pdlb
// for the client's body client, has each field of kvFields exactly when
// want gives it: once under any spelling, with want's value. Every other
// field must read as in client. Values are read with the fake's reader,
// whose rules are Python's json.loads.
func checkWorkerBody(t *testing.T, who string, client, body []byte, want map[string]string) {
	t.Helper()
	counts := map[string]int{}
	for _, name := range decodedKeys(t, body) {
		counts[name]++
	}
	sent, err := fake.LoadJSON(body)
	if err != nil {
		t.Fatalf("the %s got %s, which a worker cannot load: %s", who, body, err)
	}
	for _, name := range kvFields {
		v := sent.Get(name)
		w, wanted := want[name]
		switch {
		case !wanted && (counts[name] != 0 || v != nil):
			t.Fatalf("the %s got %s, where a worker reads %s %s; want no such field", who, body, name, v)
		case wanted && counts[name] != 1:
			t.Fatalf("the %s got %s, with %d members that decode to %s; want pdlb's alone", who, body, counts[name], name)
		case wanted && (v == nil || string(v.MarshalTo(nil)) != w):
			t.Fatalf("the %s got %s, where a worker reads %s %s; want %s", who, body, name, v, w)
		}
	}
	in, err := fake.LoadJSON(client)
	if err != nil {
		t.Fatalf("cannot load %s: %s", client, err)
	}
	others := func(v *fastjson.Object) map[string]string {
		m := map[string]string{}
		v.Visit(func(k []byte, e *fastjson.Value) {
			if !slices.Contains(kvFields, string(k)) {
				m[string(k)] = string(e.MarshalTo(nil))
			}
		})
		return m
	}
	if g, w := others(sent.GetObject()), others(in.GetObject()); !maps.Equal(g, w) {
		t.Fatalf("the %s reads the client's other fields as %v; want %v", who, g, w)
	}
}

// decodedKeys lists the keys of the top-level members of the object b,
// duplicates included, decoded as every JSON reader decodes them.
func decodedKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("cannot decode %s: %s", b, err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("cannot decode %s: %s", b, err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("cannot decode %s: %s", b, err)
		}
		keys = append(keys, k.(string))
	}
	return keys
}

// pdlb reads every top-level key it routes by as the workers read it:
// decoded, the last duplicate winning. Else a client could show pdlb one
// request and the workers another (issue 19): a stream relayed as a plain
// answer, or a disagg_prefill_dp_rank that skips the wait for a warm pair
// (the first-request bug: see package bootstrap's documentation) and the
// range check.
func TestRoutingKeysReadAsWorkersRead(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		h.start(defaultConfig())
		go func() { gate <- struct{}{} }() // the first token
		// Taken for no stream, the answer would come only once the
		// generation is over: this failure deadline ends it.
		stuck := time.AfterFunc(5*time.Second, func() { close(gate) })
		s := h.openStream("/generate", `{"text": "a", "stream": false, "stre\u0061m": true, "sampling_params": {"max_new_tokens": 3}}`)
		ev := s.next()
		if !stuck.Stop() {
			t.Fatalf("got %d %q only once the generation was over; want a stream", s.status, ev)
		}
		close(gate)
		if rest := s.rest(); s.status != fasthttp.StatusOK || rest[len(rest)-1] != "data: [DONE]\n\n" {
			t.Fatalf("got %d %q %q; want a stream", s.status, ev, rest)
		}

		r := h.post("/generate", `{"text": "a", "stream": true, "stre\u0061m": false, "sampling_params": {"max_new_tokens": 3}}`)
		if r.status != fasthttp.StatusOK || !bytes.HasPrefix(r.header.ContentType(), []byte("application/json")) || !json.Valid(r.body) {
			t.Fatalf("got %d %s %q; want a JSON answer", r.status, r.header.ContentType(), r.body)
		}
	})
	t.Run("prefill DP rank", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h := newHarness(t)
			_, d := h.dpPair()
			h.start(warmConfig())
			// The first request of a cold pair: pdlb must wait for the warm-up.
			r := h.post("/generate", `{"text": "a", "disagg\u005fprefill\u005fdp\u005frank": 1}`)
			if r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			if n := d.Stats().FirstRequestFailures; n != 0 {
				t.Fatalf("the decode failed %d requests for want of a warm-up", n)
			}
			r = h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 1, "disagg\u005fprefill\u005fdp\u005frank": 9}`)
			if r.status != fasthttp.StatusBadRequest || !strings.Contains(string(r.body), "out of range") {
				t.Fatalf("got %d %s; want pdlb's 400 for a rank out of range", r.status, r.body)
			}
		})
	})
}

// When pdlb cancels a leg, it aborts the request the worker runs: the rid
// the worker reads, the last duplicate of the decoded key, not the first
// that a path lookup finds.
func TestAbortNamesTheRIDTheWorkerRuns(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var served atomic.Int32
		decodeHasIt := make(chan struct{}, 1)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			<-decodeHasIt // fail only once the decode works on the request
			failing(&served, fasthttp.StatusServiceUnavailable, `{}`)(ctx)
		})
		var aborts bodies
		h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second,
			OnRequest: func(path string, body []byte) {
				switch path {
				case "/generate":
					decodeHasIt <- struct{}{}
				case "/abort_request":
					aborts.record(path, body)
				}
			}})
		cfg := defaultConfig()
		cfg.DisableRetries = true
		srv := h.start(cfg)
		if r := h.post("/generate", `{"text": "a", "rid": "decoy-rid", "r\u0069d": "request-7"}`); r.status != fasthttp.StatusServiceUnavailable {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		waitIdle(t, srv) // includes the abort
		v, err := fake.LoadJSON(aborts.only(t))
		if err != nil {
			t.Fatal(err)
		}
		if rid := string(v.GetStringBytes("rid")); rid != "request-7" {
			t.Fatalf("pdlb aborted rid %q; want request-7, the request the decode runs", rid)
		}
		waitFor(t, "the decode to drop the aborted request", func() bool { return h.decode.Stats().InFlight == 0 })
	})
}

// An /abort_request marks the exchanges whose rid it names as the workers
// read both bodies, so that the one they abort is not retried, and no
// other loses its retries.
func TestMarkAbortedReadsAsWorkersRead(t *testing.T) {
	srv, err := New(defaultConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	f := func(sent, abort string, want bool) {
		t.Helper()
		r, err := bootstrap.Parse([]byte(sent))
		if err != nil {
			t.Fatal(err)
		}
		x := &exchange{rid: string(r.RID.Of([]byte(sent)))}
		srv.flight = []*exchange{x}
		srv.markAborted([]byte(abort))
		if got := x.abortedByClient.Load(); got != want {
			t.Fatalf("an exchange that sent %s, after /abort_request %s: got marked %v; want %v", sent, abort, got, want)
		}
	}
	f(`{"text": "a", "rid": "decoy-rid", "r\u0069d": "real-rid"}`, `{"rid": "real-rid"}`, true)
	f(`{"text": "a", "rid": "decoy-rid", "r\u0069d": "real-rid"}`, `{"rid": "decoy-rid"}`, false)
	f(`{"text": "a", "rid": "real-rid"}`, `{"rid": "real-rid", "rid": "other-rid"}`, false)
	f(`{"text": "a", "rid": "real-rid"}`, `{"rid": "other-rid", "r\u0069d": "real-rid"}`, true)
	f(`{"text": "a", "rid": "real-rid"}`, `{"abort_all": true, "abort\u005fall": false}`, false)
	f(`{"text": "a", "rid": "real-rid"}`, `{"abort_all": false, "abort\u005fall": true}`, true)
}
