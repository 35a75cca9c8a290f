package hostile

import (
	"net/http"
	"strconv"
	"time"

	"pdlb/bench/fake"
)

// Issue 19, item 9: headers no worker may see.

// smallBody is a well-formed /generate body.
const smallBody = `{"text":"hi","sampling_params":{"max_new_tokens":4}}`

// headerLeaks (item 9) sends, every 100 ms over form.hold, requests with
// headers no worker may see: a second X-Request-Id carrying the canary
// (pdlb replaces every X-Request-Id, so the request is served and no worker
// sees it); header names with a space ("X Hostile-Canary:", "Content
// Length:"), which are no RFC 9110 tokens and get a 400; a chunked body
// whose trailer field carries the canary, which is served, and whose
// trailer never becomes a header to the workers. No worker may count the
// canary.
func headerLeaks(a *arena) {
	chunked := "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\nTrailer: X-Trailer\r\n\r\n" +
		strconv.FormatInt(int64(len(smallBody)), 16) + "\r\n" + smallBody + "\r\n0\r\nX-Trailer: " + canary + "\r\n\r\n"
	cases := []struct {
		name, raw string
		want      int
	}{
		{"a second X-Request-Id", request("/generate", []string{"X-Request-Id: hostile-1", "X-Request-Id: " + canary}, smallBody), http.StatusOK},
		{"a header name with a space", request("/generate", []string{"X Hostile-Canary: 1"}, smallBody), http.StatusBadRequest},
		{"Content Length", request("/generate", []string{"Content Length: 5"}, smallBody), http.StatusBadRequest},
		{"a chunked trailer", chunked, http.StatusOK},
	}
	failed, leaked := map[string]bool{}, map[string]uint64{}
	a.repeat(100*time.Millisecond, func() {
		for _, c := range cases {
			before := a.canaries()
			status, body, err := exchange(a.env.addr, c.raw, loadTimeout)
			if (err != nil || status != c.want) && !failed[c.name] {
				failed[c.name] = true
				a.Errorf("%s: got %d %.200s (%v); want %d", c.name, status, body, err, c.want)
			}
			leaked[c.name] += a.canaries() - before
		}
	})
	for _, c := range cases {
		if n := leaked[c.name]; n > 0 {
			a.Errorf("%s: the canary reached the workers %d times", c.name, n)
		}
	}
}

// canaries is how many requests reached the workers with the canary. A
// worker counts a request as it arrives, so a request answered is counted.
func (a *arena) canaries() uint64 {
	return a.env.sumStats(func(s fake.Stats) uint64 { return s.Canaries })
}
