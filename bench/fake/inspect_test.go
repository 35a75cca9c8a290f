package fake

import (
	"bufio"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestStatsRoute checks that /fake/stats exists only when asked for, that
// it answers the counters as encoding/json writes Stats, and that an API key
// does not hide it.
func TestStatsRoute(t *testing.T) {
	n := NewNetwork()
	off := startServer(t, n, "off:30000", Config{})
	if res := do(t, n, "GET", "off:30000", StatsPath, ""); res.status != fasthttp.StatusNotFound {
		t.Errorf("without StatsRoute: got %d %s; want 404", res.status, res.body)
	}
	if got := off.Stats().Other; got != 1 {
		t.Errorf("without StatsRoute: got Other %d; want 1", got)
	}

	startServer(t, n, "on:30000", Config{StatsRoute: true, APIKey: "k"})
	do(t, n, "GET", "on:30000", "/health_generate", "")
	do(t, n, "GET", "on:30000", "/health", "")
	res := do(t, n, "GET", "on:30000", StatsPath, "")
	var st Stats
	if err := json.Unmarshal([]byte(res.body), &st); err != nil || res.status != fasthttp.StatusOK {
		t.Fatalf("got %d %s (%v); want 200 and the stats", res.status, res.body, err)
	}
	if st.Health != 2 || st.HealthGenerate != 1 || st.Other != 0 || st.Unauthorized != 0 {
		t.Errorf("got Health %d, HealthGenerate %d, Other %d, Unauthorized %d; want 2, 1, 0, 0",
			st.Health, st.HealthGenerate, st.Other, st.Unauthorized)
	}
	if res := do(t, n, "POST", "on:30000", StatsPath, ""); res.status != fasthttp.StatusMethodNotAllowed {
		t.Errorf("POST %s: got %d; want 405", StatsPath, res.status)
	}
}

// TestCanary plants the canary where a load balancer might pass it on: a
// header value, a header name that is no token, a chunked trailer, the body.
func TestCanary(t *testing.T) {
	const canary = "Hostile-Canary"
	body := `{"text":"hi","sampling_params":{"max_new_tokens":1}}`
	for _, c := range []struct {
		name, canary, req string
		want              uint64
	}{
		{"none", canary, post("X-Request-Id: a\r\n", body), 0},
		{"header value", canary, post("X-Request-Id: a\r\nX-Request-Id: hostile-canary-2\r\n", body), 1},
		{"header name", canary, post("X HOSTILE-canary: 1\r\n", body), 1},
		{"body", canary, post("", `{"text":"hi","bootstrap\u005fhost":"Hostile-Canary.invalid"}`), 1},
		{"trailer", canary, "POST /generate HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\nTrailer: X-Trailer\r\n\r\n" +
			"2\r\n{}\r\n0\r\nX-Trailer: hostile-canary\r\n\r\n", 1},
		{"off", "", post("X-Hostile-Canary: 1\r\n", body), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := NewNetwork()
			s := startServer(t, n, "a:30000", Config{Canary: c.canary})
			conn, err := n.Dial("a:30000")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(testDeadline))
			if _, err := conn.Write([]byte(c.req)); err != nil {
				t.Fatal(err)
			}
			var resp fasthttp.Response
			if err := resp.Read(bufio.NewReader(conn)); err != nil {
				t.Fatalf("cannot read the answer: %v", err)
			}
			if got := s.Stats().Canaries; got != c.want {
				t.Errorf("got Canaries %d; want %d (answer %d %s)", got, c.want, resp.StatusCode(), resp.Body())
			}
		})
	}
}

// post is a raw POST /generate with extra header lines and body.
func post(headers, body string) string {
	return "POST /generate HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" + headers +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}
