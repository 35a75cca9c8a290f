package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		ds := make([]time.Duration, len(vs))
		for i, v := range vs {
			ds[i] = time.Duration(v) * time.Millisecond
		}
		return ds
	}
	f := func(sorted []time.Duration, p float64, want time.Duration) {
		t.Helper()
		if got := percentile(sorted, p); got != want {
			t.Fatalf("percentile(%v, %v): got %v; want %v", sorted, p, got, want)
		}
	}
	ten := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	f(nil, 50, 0)
	f(ms(7), 50, 7*time.Millisecond)
	f(ms(7), 99, 7*time.Millisecond)
	f(ten, 50, 5*time.Millisecond)
	f(ten, 90, 9*time.Millisecond)
	f(ten, 99, 10*time.Millisecond)
	f(ten, 100, 10*time.Millisecond)
	f(ten, 10, 1*time.Millisecond)
	f(ten, 0.1, 1*time.Millisecond)
	f(ten, 51, 6*time.Millisecond)
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	f(hundred, 50, 50*time.Millisecond)
	f(hundred, 90, 90*time.Millisecond)
	f(hundred, 99, 99*time.Millisecond)
}

func TestSummarize(t *testing.T) {
	got := summarize([]time.Duration{40, 10, 30, 20, 100})
	want := Summary{Count: 5, Min: 10, Mean: 40, P50: 30, P90: 100, P99: 100, Max: 100}
	if got != want {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Fatalf("got %+v for no samples; want the zero Summary", got)
	}
}

func testReport() *Report {
	return &Report{
		URL:                "http://127.0.0.1:8000",
		Route:              RouteGenerate,
		Endpoint:           "http://127.0.0.1:8000/generate",
		Stream:             true,
		Concurrency:        8,
		Requests:           1000,
		OK:                 997,
		Errors:             map[string]int{"status_502": 2, KindStreamError: 1},
		WarmupRequests:     12,
		Elapsed:            10*time.Second + 20*time.Millisecond,
		RequestsPerSec:     99.5,
		OutputTokens:       15952,
		OutputTokensPerSec: 1592.0,
		Latency:            Summary{Count: 997, Min: 90 * time.Millisecond, Mean: 123400 * time.Microsecond, P50: 120 * time.Millisecond, P90: 150 * time.Millisecond, P99: 180 * time.Millisecond, Max: 1234567 * time.Microsecond},
		TTFT:               Summary{Count: 997, Min: 500 * time.Microsecond, Mean: 20 * time.Millisecond, P50: 19 * time.Millisecond, P90: 25 * time.Millisecond, P99: 31 * time.Millisecond, Max: 40 * time.Millisecond},
		ITL:                Summary{Count: 14955, Min: 1 * time.Millisecond, Mean: 6520 * time.Microsecond, P50: 6 * time.Millisecond, P90: 8 * time.Millisecond, P99: 12 * time.Millisecond, Max: 30 * time.Millisecond},
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := testReport().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"http://127.0.0.1:8000/generate (stream, concurrency 8)",
		"1000 (997 ok, 3 errors; 12 warm-up not counted)",
		"errors       status_502 2",
		"errors       stream_error 1",
		"10.02 s",
		"99.5 req/s, 1592.0 output tokens/s (15952 tokens)",
		"latency ms        90.0     123.4     120.0     150.0     180.0      1235      997",
		"ttft ms          0.500      20.0",
		"itl ms            1.00      6.52      6.00      8.00      12.0      30.0    14955",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("got\n%s\nwant it to contain %q", out, want)
		}
	}
	// The columns line up: every row of the table has the same length.
	lines := strings.Split(strings.TrimRight(out[strings.Index(out, "\n\n")+2:], "\n"), "\n")
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Fatalf("got table rows of lengths %d and %d:\n%s", len(lines[0]), len(l), out)
		}
	}
}

func TestWriteTextNoSamples(t *testing.T) {
	var b bytes.Buffer
	r := &Report{URL: "http://x", Route: RouteChatCompletions, Endpoint: "http://x/v1/chat/completions", Errors: map[string]int{}, Interrupted: true}
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"non-stream", "interrupted", "itl ms               -         -"} {
		if !strings.Contains(out, want) {
			t.Fatalf("got\n%s\nwant it to contain %q", out, want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	r := testReport()
	r.Events, r.EventWindow, r.EventsPerSec = 2004, 10020*time.Millisecond, 200
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Requests int            `json:"requests"`
		OK       int            `json:"ok"`
		Errors   map[string]int `json:"errors"`
		Elapsed  float64        `json:"elapsed_s"`
		RPS      float64        `json:"requests_per_s"`
		TPS      float64        `json:"output_tokens_per_s"`
		Latency  struct {
			Count int     `json:"count"`
			P50   float64 `json:"p50_ms"`
			Max   float64 `json:"max_ms"`
		} `json:"latency"`
		ITL struct {
			Mean float64 `json:"mean_ms"`
			P99  float64 `json:"p99_ms"`
		} `json:"itl"`
		Events      int64   `json:"events"`
		EventWindow float64 `json:"event_window_s"`
		EPS         float64 `json:"events_per_s"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("cannot decode %s: %v", b.String(), err)
	}
	if got.Requests != 1000 || got.OK != 997 || got.Errors["status_502"] != 2 || got.Elapsed != 10.02 ||
		got.RPS != 99.5 || got.TPS != 1592 || got.Latency.Count != 997 || got.Latency.P50 != 120 ||
		got.Latency.Max != 1234.567 || got.ITL.Mean != 6.52 || got.ITL.P99 != 12 ||
		got.Events != 2004 || got.EventWindow != 10.02 || got.EPS != 200 {
		t.Fatalf("got %+v from\n%s", got, b.String())
	}
}

// A rate is written as it was given, however large: 50000, not 5e+04.
func TestLoadTextRate(t *testing.T) {
	for rate, want := range map[float64]string{50000: "open loop at 50000 req/s", 2.5: "open loop at 2.5 req/s", 1234567: "open loop at 1234567 req/s"} {
		r := Report{Rate: rate, MaxInflight: 10}
		if got := r.loadText(); got != "non-stream, "+want+", at most 10 in flight" {
			t.Fatalf("rate %v: got %q; want it to say %q", rate, got, want)
		}
	}
}

func TestWriteTextOpenLoop(t *testing.T) {
	r := testReport()
	r.Concurrency, r.Rate, r.MaxInflight = 0, 250, 10000
	r.Name = "pdlb"
	r.PromptWords, r.MaxNewTokens = Dist{}, Dist{Law: LawLognormal, A: 128, B: 64}
	r.Prompts = 12
	r.Events, r.EventsPerSec, r.EventWindow = 31904, 3184.03, 10020*time.Millisecond
	r.EventLag = Summary{Count: 31904, Min: -2 * time.Microsecond, Mean: 150 * time.Microsecond, P50: 120 * time.Microsecond,
		P90: 300 * time.Microsecond, P99: 2 * time.Millisecond, Max: 15 * time.Millisecond}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"target       pdlb http://127.0.0.1:8000/generate (stream, open loop at 250 req/s, at most 10000 in flight)\n",
		"workload     12 file prompts, lognormal:128:64 new tokens unless a prompt says\n",
		"events       3184.0 events/s (31904 events in 10.02 s)\n",
		"lag          server's sent_unix_nano to arrival; only meaningful with bench and server on one machine\n",
		"lag ms          -0.002     0.150     0.120     0.300      2.00      15.0    31904\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("got\n%s\nwant it to contain %q", out, want)
		}
	}
}

// TestRunJSONParameters checks that a run's JSON holds what it takes to
// run it again; it once lacked the seed and the times.
func TestRunJSONParameters(t *testing.T) {
	cfg := serve(t, jsonHandler(&recorder{}, fasthttp.StatusOK, `{"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}`))
	cfg.Route = RouteCompletions
	cfg.Requests = 2
	cfg.Duration = time.Minute
	cfg.Warmup = time.Millisecond
	cfg.Timeout = 1500 * time.Millisecond
	cfg.Seed = 42
	var b bytes.Buffer
	if err := run(t, cfg).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"seed": 42`, `"model": "default"`, `"max_requests": 2`, `"duration_s": 60,`,
		`"warmup_s": 0.001,`, `"timeout_s": 1.5,`, `"route": "/v1/completions"`, `"stream": false`, `"concurrency": 1`} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("got\n%s\nwant it to contain %q", b.String(), want)
		}
	}
}
