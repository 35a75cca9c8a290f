package hostile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// The steady well-behaved load beside every attack, and its statistics.

const (
	// loadEvery is each well-behaved client's pace: a request every 50 ms
	// at most, 80 a second for the four of them, a modest load that leaves
	// room for the attack on two cores.
	loadEvery = 50 * time.Millisecond
	// loadTimeout bounds one well-behaved request; beyond, it is an error.
	loadTimeout = 10 * time.Second
)

// clientKind is one kind of well-behaved request.
type clientKind struct {
	name, path, body string
	stream           bool
}

// wellBehaved are the load's clients, one of each kind: non-stream and
// stream /generate, and OpenAI chat completions.
var wellBehaved = []clientKind{
	{name: "generate", path: "/generate",
		body: `{"text":"a well-behaved client","sampling_params":{"max_new_tokens":8}}`},
	{name: "generate-stream", path: "/generate", stream: true,
		body: `{"text":"a well-behaved client","sampling_params":{"max_new_tokens":8},"stream":true}`},
	{name: "chat", path: "/v1/chat/completions",
		body: `{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`},
	{name: "generate-2", path: "/generate",
		body: `{"text":"another well-behaved client","sampling_params":{"max_new_tokens":8}}`},
}

// newClient returns an HTTP client on a keep-alive connection of its own,
// as a well-behaved client keeps one.
func newClient() *http.Client {
	return &http.Client{
		Timeout: loadTimeout,
		Transport: &http.Transport{
			MaxConnsPerHost:     1,
			MaxIdleConnsPerHost: 1,
			DisableCompression:  true,
		},
	}
}

// do sends one request of kind k to base and checks its answer: a 200, and
// a generation that ran to its length, with no error event in a stream.
func (k clientKind) do(c *http.Client, base string) error {
	resp, err := c.Post(base+k.path, "application/json", strings.NewReader(k.body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	if k.stream {
		return checkStream(resp.Body)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return checkFinished(body)
}

// checkStream reads SSE events up to [DONE]; the last one before it must
// say the generation finished.
func checkStream(r io.Reader) error {
	sc := bufio.NewScanner(r)
	// A /generate event carries the text so far: a long stream's outgrow
	// the scanner's default 64 KiB.
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var last []byte
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		switch {
		case !ok:
		case string(data) == "[DONE]":
			return checkFinished(last)
		default:
			last = append(last[:0], data...)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended without [DONE]")
}

// checkFinished checks that a /generate or OpenAI answer (or last stream
// event) finished for its length, not for an abort or an error.
func checkFinished(body []byte) error {
	var v struct {
		Error    json.RawMessage `json:"error"`
		MetaInfo struct {
			FinishReason struct {
				Type string `json:"type"`
			} `json:"finish_reason"`
		} `json:"meta_info"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("cannot read the answer %.200s: %w", body, err)
	}
	reason := v.MetaInfo.FinishReason.Type
	if len(v.Choices) > 0 {
		reason = v.Choices[0].FinishReason
	}
	if v.Error != nil || reason != "length" {
		return fmt.Errorf("the generation did not finish for its length: %.200s", body)
	}
	return nil
}

// result is one well-behaved request.
type result struct {
	kind  string
	start time.Time
	took  time.Duration
	err   error
}

// load runs the well-behaved clients until stopped.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	results []result
	added   chan struct{} // gets a value when a result is added
}

// startLoad starts one client of each wellBehaved kind against base.
func startLoad(base string) *load {
	l := &load{stop: make(chan struct{}), added: make(chan struct{}, 1)}
	for _, k := range wellBehaved {
		l.wg.Go(func() { l.client(k, base) })
	}
	return l
}

// client sends requests of kind k at loadEvery until the load stops.
func (l *load) client(k clientKind, base string) {
	c := newClient()
	defer c.CloseIdleConnections()
	pace := time.NewTicker(loadEvery)
	defer pace.Stop()
	for {
		start := time.Now()
		err := k.do(c, base)
		l.add(result{kind: k.name, start: start, took: time.Since(start), err: err})
		select {
		case <-l.stop:
			return
		case <-pace.C:
		}
	}
}

func (l *load) add(r result) {
	l.mu.Lock()
	l.results = append(l.results, r)
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// count returns how many requests have ended.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.results)
}

// waitCount waits until n requests have ended, or until timeout.
func (l *load) waitCount(n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for l.count() < n {
		select {
		case <-l.added:
		case <-deadline:
			return fmt.Errorf("the well-behaved clients ended %d requests in %v; want %d", l.count(), timeout, n)
		}
	}
	return nil
}

// close stops the clients once their requests in flight have ended.
func (l *load) close() {
	close(l.stop)
	l.wg.Wait()
}

// between returns the statistics of the requests that started in
// [from, to).
func (l *load) between(from, to time.Time) stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st stats
	for _, r := range l.results {
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		st.took = append(st.took, r.took)
		if r.err != nil {
			st.errors = append(st.errors, r)
		}
	}
	slices.Sort(st.took)
	return st
}

// stats are the well-behaved requests of a phase.
type stats struct {
	took   []time.Duration // sorted
	errors []result
}

// p99 is the 99th percentile latency, nearest rank; 0 without requests.
func (s stats) p99() time.Duration {
	if len(s.took) == 0 {
		return 0
	}
	i := (len(s.took)*99 + 99) / 100
	return s.took[min(i, len(s.took))-1]
}

// describeErrors summarises the errors: their count, and the first few.
func (s stats) describeErrors() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d well-behaved requests failed", len(s.errors), len(s.took))
	for i, r := range s.errors {
		if i == 5 {
			fmt.Fprintf(&b, "\n\t...")
			break
		}
		fmt.Fprintf(&b, "\n\t%s after %v: %v", r.kind, r.took.Round(time.Millisecond), r.err)
	}
	return b.String()
}
