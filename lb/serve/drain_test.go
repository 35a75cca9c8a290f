package serve

import (
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/lb"

	"pdlb/lb/cli"
)

// serving is a pdlb run by serveUntilSignal.
type serving struct {
	sigs chan<- os.Signal
	// logs is written by serveUntilSignal's goroutine alone: read it once
	// status has given the exit status.
	logs   *strings.Builder
	addr   string
	status <-chan int
	// arrivals gets a value for each request a worker receives.
	arrivals chan struct{}
}

// startServe runs serveUntilSignal on a loopback listener, with a prefill
// and a decode that take requests and never answer.
func startServe(t *testing.T, grace time.Duration) *serving {
	t.Helper()
	arrivals := make(chan struct{}, 16)
	srv, err := lb.New(lb.Config{
		Prefill:     []lb.PrefillSpec{{URL: "http://" + silentWorker(t, arrivals), BootstrapPort: 9}},
		Decode:      []string{"http://" + silentWorker(t, arrivals)},
		NoPrewarm:   true,
		HealthCheck: lb.HealthCheckConfig{Disable: true},
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 2)
	var logs strings.Builder
	status := make(chan int, 1)
	go func() {
		code, err := serveUntilSignal(srv, ln, grace, sigs, zerolog.New(&logs))
		if err != nil {
			t.Errorf("serveUntilSignal: %s", err)
		}
		status <- code
	}()
	return &serving{sigs: sigs, logs: &logs, addr: ln.Addr().String(), status: status, arrivals: arrivals}
}

// silentWorker listens on loopback for a worker that reads requests and
// never answers, and returns its address. Each request's arrival is sent
// on arrivals.
func silentWorker(t *testing.T, arrivals chan<- struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if _, err := c.Read(make([]byte, 4096)); err == nil {
					arrivals <- struct{}{}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// sendGenerate sends a generation to pdlb and returns once both workers
// have it.
func (s *serving) sendGenerate(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: 12\r\n\r\n{\"text\":\"a\"}")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the prefill's and the decode's
		select {
		case <-s.arrivals:
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not reach the workers")
		}
	}
	return conn
}

func (s *serving) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.status:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("serveUntilSignal did not return")
	}
	return 0
}

// An idle pdlb stops at the first signal, with exit status 0 and a last
// line that says so.
func TestServeStopsOnSignal(t *testing.T) {
	s := startServe(t, time.Minute)
	s.sigs <- syscall.SIGTERM
	if code := s.wait(t); code != 0 {
		t.Errorf("got exit status %d; want 0", code)
	}
	if !strings.HasSuffix(s.logs.String(), `"message":"stopped"}`+"\n") {
		t.Errorf("got log %s; want it to end with the line saying pdlb stopped", s.logs)
	}
}

// A second signal during the drain exits at once, with status 1; it used to
// be ignored until the drain ended. One that comes with the first is the
// first delivered twice, as GNU timeout does.
func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServe(t, time.Minute)
	s.sendGenerate(t) // holds the drain
	s.sigs <- syscall.SIGTERM
	s.sigs <- syscall.SIGTERM // GNU timeout's second delivery: the same stop
	select {
	case code := <-s.status:
		t.Fatalf("exited with status %d; want a signal delivered twice at once taken for one", code)
	case <-time.After(cli.SameSignalWindow + 50*time.Millisecond):
	}
	s.sigs <- syscall.SIGINT
	if code := s.wait(t); code != 1 {
		t.Errorf("got exit status %d; want 1", code)
	}
	if !strings.Contains(s.logs.String(), `"signal":"interrupt","message":"exiting at once: a second signal during the drain"`) {
		t.Errorf("got log %s; want a line saying pdlb exits at once", s.logs)
	}
}

// A request still in flight when the grace period ends is cut: the client
// gets a 503, pdlb says how many it cut, and exits with status 1.
func TestServeCutsAtTheEndOfTheGracePeriod(t *testing.T) {
	t.Parallel()
	s := startServe(t, 10*time.Millisecond)
	conn := s.sendGenerate(t)
	s.sigs <- syscall.SIGTERM
	if code := s.wait(t); code != 1 {
		t.Errorf("got exit status %d; want 1", code)
	}
	if !strings.HasSuffix(s.logs.String(), `"cut":1,"message":"stopped, with requests cut at the end of the grace period"}`+"\n") {
		t.Errorf("got log %s; want it to end with the count of requests cut", s.logs)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(answer), "HTTP/1.1 503 ") {
		t.Errorf("got %q; want a 503", answer)
	}
}

// /metrics says each metric's type, so that Prometheus does not take them
// all for untyped.
func TestMetricsHaveTypes(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	applyProcessSettings(1 << 30)
	defer metrics.ExposeMetadata(false)
	srv, err := lb.New(lb.Config{
		Prefill: []lb.PrefillSpec{{URL: "http://p:1"}},
		Decode:  []string{"http://d:1"},
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	srv.Metrics().WritePrometheus(&out)
	for _, want := range []string{
		"# TYPE pdlb_request_errors_total counter\n",
		"# TYPE pdlb_backend_ejections_total counter\n",
		"# TYPE pdlb_backend_inflight gauge\n",
		"# TYPE pdlb_request_duration_seconds histogram\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, out.String())
		}
	}
}

// pdlb's soft memory limit is its body memory and a fixed overhead, so the
// garbage of large bodies let go is collected before RSS runs far past the
// budget; GOMEMLIMIT, when set, is the operator's and stays.
func TestMemoryLimitFollowsTheBodyMemory(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	applyMemoryLimit(1 << 30)
	if got := debug.SetMemoryLimit(-1); got != 1<<30+memoryOverhead {
		t.Fatalf("got a memory limit of %d; want %d", got, 1<<30+memoryOverhead)
	}
	t.Setenv("GOMEMLIMIT", "3GiB")
	debug.SetMemoryLimit(3 << 30) // as the runtime read it at start
	applyMemoryLimit(1 << 30)
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("got a memory limit of %d; want GOMEMLIMIT's %d", got, 3<<30)
	}
}
