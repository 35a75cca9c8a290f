package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"
)

// Report holds the figures of one run, or of one target of a Compare. It
// is plain data owned by the caller. Only measured requests (started, or
// arrived, after the warm-up, inside the measured window) count, and only
// successful ones feed the rates and duration summaries. WriteJSON encodes
// durations as milliseconds and Elapsed as seconds.
type Report struct {
	// Name is the target's name in a Compare, empty from Run.
	Name string `json:"name,omitempty"`
	// URL, Route, Stream, Concurrency (0 for an open loop), Rate and
	// MaxInflight (0 for a closed loop), MaxNewTokens and PromptWords
	// (zero with a prompt file), Seed, Model (OpenAI routes only),
	// MaxRequests (Config.Requests), Duration, Warmup and Timeout echo the
	// Config, defaults applied, so that the run can be repeated from its
	// JSON; Prompts is the number of file prompts.
	URL          string        `json:"url"`
	Route        string        `json:"route"`
	Stream       bool          `json:"stream"`
	Concurrency  int           `json:"concurrency"`
	Rate         float64       `json:"rate,omitempty"`
	MaxInflight  int           `json:"max_inflight,omitempty"`
	MaxNewTokens Dist          `json:"max_new_tokens,omitzero"`
	PromptWords  Dist          `json:"prompt_words,omitzero"`
	Prompts      int           `json:"prompts,omitempty"`
	Seed         uint64        `json:"seed"`
	Model        string        `json:"model,omitempty"`
	MaxRequests  int           `json:"max_requests,omitempty"`
	Duration     time.Duration `json:"-"`
	Warmup       time.Duration `json:"-"`
	Timeout      time.Duration `json:"-"`
	// Endpoint is the URL every request went to: URL's scheme, host and
	// path prefix, then Route.
	Endpoint string `json:"endpoint"`
	// Workload is WorkloadSharedPrefix for that workload, whose
	// parameters SharedPrefix echoes (defaults applied), and the seed its
	// texts and order come from; empty, and nil, for generated or file
	// prompts. MaxNewTokens is then zero: the workload sets the lengths.
	Workload     string        `json:"workload,omitempty"`
	SharedPrefix *SharedPrefix `json:"shared_prefix,omitempty"`

	// Requests is the number of measured requests that finished: OK plus
	// the sum of Errors.
	Requests int `json:"requests"`
	// OK is the number of successful requests.
	OK int `json:"ok"`
	// Errors counts failed requests by kind: "status_<code>" or one of the
	// Kind constants. It is never nil in a Report from Run.
	Errors map[string]int `json:"errors"`
	// ErrorMessages are the first distinct failures (kind and message)
	// of measured requests, up to 5, in the order they first came, each
	// with its count; other failures count in Errors alone.
	ErrorMessages []ErrorMessage `json:"error_messages"`
	// WarmupRequests is the number of requests finished during the warm-up
	// and left out of every other figure.
	WarmupRequests int `json:"warmup_requests"`
	// Interrupted is set when the context ended the run early.
	Interrupted bool `json:"interrupted"`
	// GaveUp, when not empty, says why the run stopped early on this
	// target, none of whose requests had succeeded for
	// Config.GiveUpAfter: how long, how many failed, and the last
	// failure's kind and message. The figures cover the requests finished
	// before (in Compare, the rounds every target completed).
	GaveUp string `json:"gave_up,omitempty"`
	// GaveUpMessages are the first distinct failures (up to 5, each with
	// its count) of the requests that made the run give up, warm-up
	// included: what the target said, even when the figures leave those
	// requests out (a Compare that gave up in a later round reports the
	// rounds before). Nil when the run did not give up.
	GaveUpMessages []ErrorMessage `json:"gave_up_messages,omitempty"`

	// Elapsed is the measured time the rates are taken over, summed over
	// Compare rounds. In the open loop it runs from the end of the warm-up
	// to the end of the window or of the last measured request, whichever
	// is later (to the last request's end when Requests ended the
	// arrivals, to the cut when the run was interrupted). In the closed loop
	// bounded by Requests, it runs from the start of the first measured
	// request to the end of the last, whichever clients sent them. In the
	// closed loop bounded by Duration, each client is busy from the start
	// of its first measured request to the end of its last, and Elapsed is
	// the time the clients took for all measured requests at their
	// combined rate (the sum of each one's requests over its busy time):
	// about Duration, whatever the warm-up left in flight. That holds only
	// for clients equally busy, as they are when a window's end stops
	// them all; a request count stops some while others still have a
	// request to send.
	Elapsed time.Duration `json:"-"`
	// RequestsPerSec is OK per second of Elapsed: failures are not
	// throughput.
	RequestsPerSec float64 `json:"requests_per_s"`
	// OutputTokens is the sum of output tokens of successful requests, as
	// the package documentation describes.
	OutputTokens int64 `json:"output_tokens"`
	// OutputTokensPerSec is OutputTokens per second of Elapsed.
	OutputTokensPerSec float64 `json:"output_tokens_per_s"`

	// CacheReports is the number of successful answers that said how
	// many of their prompt's tokens the server found in its prefix cache
	// (meta_info.cached_tokens and prompt_tokens on /generate;
	// usage.prompt_tokens_details.cached_tokens and usage.prompt_tokens on
	// the OpenAI routes, which SGLang reports when started with
	// --enable-cache-report; in a stream, the last event that carries
	// them); CachedTokens and PromptTokens are their sums, and
	// CacheHitRate is CachedTokens over PromptTokens (0 when none
	// reported). It is SGLang's own count, so it means the same against
	// a real cluster as against the fakes.
	CacheReports int     `json:"cache_reports"`
	CachedTokens int64   `json:"cached_tokens"`
	PromptTokens int64   `json:"prompt_tokens"`
	CacheHitRate float64 `json:"cache_hit_rate"`
	// BestCacheHitRate is, for the SharedPrefix workload, the hit rate of
	// a router that keeps every group on one worker with room for it: of
	// each group's requests, every one after the first finds the system
	// prompt's tokens cached, and nothing else is. It is Σ over groups g
	// of (PromptsPerGroup - 1) × S(g), over Σ over requests r of S(g(r)) +
	// Q(r), where S is a system prompt's length and Q a question's, in
	// words (tokens to the fakes): with the defaults, 15 × 2048 / (16 ×
	// (2048 + 128)) = 0.882. It is the whole workload's, whatever part of
	// it the run sent; a server that caches by pages of several tokens
	// rounds S down to a page. Zero for other workloads.
	BestCacheHitRate float64 `json:"best_cache_hit_rate,omitempty"`
	// EventsPerSec is Events over EventWindow, for stream runs. With a
	// Duration, Events counts the events ([DONE] not included) that
	// arrived within the measured windows (Duration each, warm-up
	// excluded, cut short by an interrupt), whichever request they belong
	// to, but for streams that failed inside a window; EventWindow is the
	// windows' length. Long streams make a rate over whole requests
	// unsteady: those of a round's last turn run past its end with ever
	// fewer left, and where a turn falls against the end moves the figure
	// by several per cent. A run bounded by Requests alone has no window:
	// Events counts the events of its successful streams (and of those an
	// interrupt cut, in the open loop, whose Elapsed runs to the cut), and
	// EventWindow is Elapsed.
	Events       int64         `json:"events"`
	EventWindow  time.Duration `json:"-"`
	EventsPerSec float64       `json:"events_per_s"`

	// Latency is end to end, from sending the request to the end of the
	// answer.
	Latency Summary `json:"latency"`
	// TTFT is the time to the first token event of a stream, or the
	// latency of a non-stream request.
	TTFT Summary `json:"ttft"`
	// ITL summarises the inter-token latencies of streams: the gap
	// between consecutive token events, divided among the new tokens of
	// the later one where the event says how many it has, one sample per
	// token (bench_serving's adjust_itl). It is empty for non-stream runs.
	ITL Summary `json:"itl"`
	// EventLag summarises, over the events of successful streams that
	// carry the fake servers' sent_unix_nano stamp, the time from that
	// stamp to the event's arrival: what the path between server and
	// bench (a load balancer's relay included) adds to each event. It
	// compares two wall clocks, so it means something only when the bench
	// and the server run on one machine; it may then be slightly negative
	// from clock steps. Empty when no event was stamped.
	EventLag Summary `json:"event_lag"`
}

// Summary describes a set of durations. The zero Summary (Count 0) means
// there were no samples.
type Summary struct {
	// Count is the number of samples.
	Count int
	// Min, Mean and Max are the smallest, average (truncated to the
	// nanosecond) and largest sample.
	Min, Mean, Max time.Duration
	// P50, P90 and P99 are exact percentiles by nearest rank: the smallest
	// sample with at least that share of the samples at or below it.
	P50, P90, P99 time.Duration
}

// summarize sorts samples in place and describes them.
func summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	return Summary{
		Count: len(samples),
		Min:   samples[0],
		Mean:  sum / time.Duration(len(samples)),
		P50:   percentile(samples, 50),
		P90:   percentile(samples, 90),
		P99:   percentile(samples, 99),
		Max:   samples[len(samples)-1],
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted samples by
// the nearest-rank method: the smallest sample with at least p% of the
// samples at or below it. It returns 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// MarshalJSON encodes durations as milliseconds, to the microsecond.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Count int     `json:"count"`
		Min   float64 `json:"min_ms"`
		Mean  float64 `json:"mean_ms"`
		P50   float64 `json:"p50_ms"`
		P90   float64 `json:"p90_ms"`
		P99   float64 `json:"p99_ms"`
		Max   float64 `json:"max_ms"`
	}{s.Count, millis(s.Min), millis(s.Mean), millis(s.P50), millis(s.P90), millis(s.P99), millis(s.Max)})
}

// MarshalJSON adds Elapsed, EventWindow (stream runs), Duration, Warmup
// and Timeout (0 for NoTimeout), in seconds to the microsecond, to the
// tagged fields and rounds rates to three decimals.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without this method
	p := plain(r)
	p.RequestsPerSec = round3(p.RequestsPerSec)
	p.OutputTokensPerSec = round3(p.OutputTokensPerSec)
	p.EventsPerSec = round3(p.EventsPerSec)
	p.CacheHitRate = round4(p.CacheHitRate)
	p.BestCacheHitRate = round4(p.BestCacheHitRate)
	timeout := r.Timeout
	if timeout == NoTimeout {
		timeout = 0
	}
	return json.Marshal(struct {
		plain
		DurationSeconds float64 `json:"duration_s"`
		WarmupSeconds   float64 `json:"warmup_s"`
		TimeoutSeconds  float64 `json:"timeout_s"`
		ElapsedSeconds  float64 `json:"elapsed_s"`
		EventWindow     float64 `json:"event_window_s,omitempty"`
	}{p, seconds(r.Duration), seconds(r.Warmup), seconds(timeout), seconds(r.Elapsed), seconds(r.EventWindow)})
}

// seconds converts d to seconds, to the microsecond.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1e6) / 1e6 }

// millis converts d to milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return round3(float64(d) / 1e6) }

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// WriteJSON writes r as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// lagNote qualifies every event lag shown to people.
const lagNote = "server's sent_unix_nano to arrival; only meaningful with bench and server on one machine"

// WriteText writes r as an aligned table for people, durations in
// milliseconds.
func (r *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	target := r.Endpoint
	if r.Name != "" {
		target = r.Name + " " + target
	}
	fmt.Fprintf(&b, "%-12s %s (%s)\n", "target", target, r.loadText())
	if r.MaxNewTokens != (Dist{}) || r.SharedPrefix != nil {
		fmt.Fprintf(&b, "%-12s %s\n", "workload", r.workloadText())
	}
	fmt.Fprintf(&b, "%-12s %d (%d ok, %d errors; %d warm-up not counted)\n", "requests",
		r.Requests, r.OK, r.Requests-r.OK, r.WarmupRequests)
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		fmt.Fprintf(&b, "%-12s %s %d\n", "errors", k, r.Errors[k])
	}
	b.Write(appendMessages(nil, fmt.Sprintf("%-12s ", "messages"), r.ErrorMessages))
	if n := r.otherFailures(); n > 0 {
		fmt.Fprintf(&b, "%-12s and %s with other messages\n", "", plural(n, "failure"))
	}
	if r.Interrupted {
		fmt.Fprintf(&b, "%-12s %s\n", "interrupted", "yes: figures cover the requests finished before")
	}
	if r.GaveUp != "" {
		fmt.Fprintf(&b, "%-12s %s\n", "gave up", r.GaveUp)
		b.Write(appendMessages(nil, fmt.Sprintf("%-12s ", ""), r.GaveUpMessages))
	}
	fmt.Fprintf(&b, "%-12s %.2f s\n", "elapsed", r.Elapsed.Seconds())
	fmt.Fprintf(&b, "%-12s %.1f req/s, %.1f output tokens/s (%d tokens)\n", "throughput",
		r.RequestsPerSec, r.OutputTokensPerSec, r.OutputTokens)
	if r.Stream {
		fmt.Fprintf(&b, "%-12s %.1f events/s (%d events in %.2f s)\n", "events", r.EventsPerSec, r.Events, r.EventWindow.Seconds())
	}
	if r.CacheReports > 0 || r.SharedPrefix != nil {
		fmt.Fprintf(&b, "%-12s %s\n", "cache hits", r.cacheText())
	}
	if r.EventLag.Count > 0 {
		fmt.Fprintf(&b, "%-12s %s\n", "lag", lagNote)
	}
	fmt.Fprintf(&b, "\n%-12s %9s %9s %9s %9s %9s %9s %8s\n", "", "min", "mean", "p50", "p90", "p99", "max", "count")
	writeSummary(&b, "latency ms", r.Latency)
	writeSummary(&b, "ttft ms", r.TTFT)
	writeSummary(&b, "itl ms", r.ITL)
	if r.Stream {
		writeSummary(&b, "lag ms", r.EventLag)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// loadText describes the load: stream or not, closed or open loop.
func (r *Report) loadText() string {
	mode := "non-stream"
	if r.Stream {
		mode = "stream"
	}
	if r.Rate > 0 {
		return fmt.Sprintf("%s, open loop at %s req/s, at most %d in flight", mode, strconv.FormatFloat(r.Rate, 'f', -1, 64), r.MaxInflight)
	}
	return fmt.Sprintf("%s, concurrency %d", mode, r.Concurrency)
}

// workloadText describes the requests' sizes.
func (r *Report) workloadText() string {
	if s := r.SharedPrefix; s != nil {
		return sharedPrefixText(s, r.Seed)
	}
	if r.Prompts > 0 {
		return fmt.Sprintf("%d file prompts, %s new tokens unless a prompt says", r.Prompts, r.MaxNewTokens)
	}
	return fmt.Sprintf("%s-word prompts, %s new tokens", r.PromptWords, r.MaxNewTokens)
}

// writeSummary writes one table row; a summary without samples shows "-".
func writeSummary(b *bytes.Buffer, name string, s Summary) {
	cells := [6]string{"-", "-", "-", "-", "-", "-"}
	if s.Count > 0 {
		for i, d := range [6]time.Duration{s.Min, s.Mean, s.P50, s.P90, s.P99, s.Max} {
			cells[i] = formatMillis(d)
		}
	}
	fmt.Fprintf(b, "%-12s %9s %9s %9s %9s %9s %9s %8d\n", name,
		cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], s.Count)
}

// formatMillis shows d in milliseconds with three or four significant
// digits: enough to compare runs, not so many that columns turn to noise.
func formatMillis(d time.Duration) string {
	ms := float64(d) / 1e6
	switch {
	case ms < 1:
		return fmt.Sprintf("%.3f", ms)
	case ms < 10:
		return fmt.Sprintf("%.2f", ms)
	case ms < 1000:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.0f", ms)
	}
}

// plural returns n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// otherFailures returns the number of failures ErrorMessages leaves out
// (dropped arrivals, which have no message, aside).
func (r *Report) otherFailures() int {
	n := r.Requests - r.OK - r.Errors[KindDropped]
	for _, m := range r.ErrorMessages {
		n -= m.Count
	}
	return n
}
