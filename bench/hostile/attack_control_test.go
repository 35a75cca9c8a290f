package hostile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"pdlb/bench/fake"
)

// Issue 19, item 5: the routes that act on everyone are for operators.

// controlEvery is the pace of the control attack's rounds of calls.
const controlEvery = 100 * time.Millisecond

// controlRoutesEnv gives pdlb an admin key: the anonymous calls of this
// machine's loopback clients must then get a 401.
func controlRoutesEnv(form) envConfig {
	return envConfig{flags: []serveFlag{{"--admin-api-key", adminKey}}}
}

// controlRoutes (item 5) calls, anonymously, every 100 ms over form.hold,
// the routes that act on everyone, starting while a victim's long stream
// runs: /abort_request with abort_all, /flush_cache and /bootstrap must get
// a 401 from a pdlb with an --admin-api-key, abort nobody (the victim's
// stream and the well-behaved streams run to their end, the workers abort
// nothing) and flush nothing; an abort by rid stays open to clients (200).
// Each round also calls /health_generate five times, which must not make
// the workers generate once per call: each worker sees at most one a
// second, and one more.
func controlRoutes(a *arena) {
	refuseControl(a, http.StatusUnauthorized)
}

// controlRoutesRemoteEnv runs pdlb without an admin key on an address of
// this machine that is not a loopback one, so that its clients, on this
// machine too, come from a non-loopback address.
func controlRoutesRemoteEnv(form) envConfig {
	ip := nonLoopbackIP()
	if ip == "" {
		return envConfig{skip: "this machine has no non-loopback address to reach pdlb from"}
	}
	return envConfig{host: ip}
}

// controlRoutesRemote (item 5) is controlRoutes against a pdlb without an
// admin key, from a non-loopback address: the routes that act on everyone
// must get a 403.
func controlRoutesRemote(a *arena) {
	refuseControl(a, http.StatusForbidden)
}

// controlCalls are the calls of one round of the control attack; want
// stands for the refusal's status.
var controlCalls = []struct {
	method, path, body string
	want               int
}{
	{"POST", "/abort_request", `{"abort_all":true}`, 0},
	{"POST", "/flush_cache", "", 0},
	{"GET", "/bootstrap", "", 0},
	{"POST", "/abort_request", `{"rid":"hostile-no-such-request"}`, http.StatusOK},
	{"GET", "/health_generate", "", http.StatusOK},
	{"GET", "/health_generate", "", http.StatusOK},
	{"GET", "/health_generate", "", http.StatusOK},
	{"GET", "/health_generate", "", http.StatusOK},
	{"GET", "/health_generate", "", http.StatusOK},
}

// refuseControl is controlRoutes with the status the refusals must have.
func refuseControl(a *arena, refusal int) {
	healthGenerate := func(s fake.Stats) uint64 { return s.HealthGenerate }
	generated := a.env.sumStats(healthGenerate)
	victim, err := startVictim(a.env.base, int(a.form.hold/tokenDelay))
	if err != nil {
		a.Fatalf("cannot start the victim's stream: %v", err)
	}
	start, failed := time.Now(), map[string]bool{}
	a.repeat(controlEvery, func() {
		for _, c := range controlCalls {
			want := c.want
			if want == 0 {
				want = refusal
			}
			status, body, err := call(c.method, a.env.base+c.path, c.body)
			if what := c.method + " " + c.path + " " + c.body; (err != nil || status != want) && !failed[what] {
				failed[what] = true
				a.Errorf("anonymous %s: got %d %.200s (%v); want %d", what, status, body, err, want)
			}
		}
	})
	took := time.Since(start)
	if err := <-victim; err != nil {
		a.Errorf("the victim's stream: %v", err)
	}
	generated = a.env.sumStats(healthGenerate) - generated
	if bound := uint64(len(a.env.workers())) * (uint64(took/time.Second) + 2); generated > bound {
		a.Errorf("anonymous calls of /health_generate over %v made the workers generate %d times; want at most %d",
			took.Round(time.Millisecond), generated, bound)
	}
	aborts := a.env.sumStats(func(s fake.Stats) uint64 { return s.Aborts })
	flushes := a.env.sumStats(func(s fake.Stats) uint64 { return s.FlushCache })
	if aborts != 0 || flushes != 0 {
		a.Errorf("the workers aborted %d requests and flushed their cache %d times; want 0 and 0", aborts, flushes)
	}
}

// startVictim starts a stream of the given tokens and returns once its
// first event has arrived; the channel then gets the outcome of the rest of
// it.
func startVictim(base string, tokens int) (<-chan error, error) {
	body := fmt.Sprintf(`{"text":"a victim","sampling_params":{"max_new_tokens":%d},"stream":true}`, tokens)
	c := newClient()
	c.Timeout = time.Duration(tokens)*tokenDelay + loadTimeout // it lasts as long as the attack
	resp, err := c.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("no first event: %w", err)
		}
		if bytes.HasPrefix(line, []byte("data: ")) {
			break
		}
	}
	done := make(chan error, 1)
	go func() {
		err := checkStream(br)
		resp.Body.Close()
		c.CloseIdleConnections()
		done <- err
	}()
	return done, nil
}

// call makes one anonymous request and returns its status and body.
func call(method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := http.Client{Timeout: callTimeout}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), err
}
