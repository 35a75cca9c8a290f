package hostile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pdlb/bench/fake"
)

// The process harness: pdlb built once, fake workers and pdlb started as
// processes on free loopback ports, read from outside (HTTP, /proc), and
// stopped at the end of each attack whatever happened.

const (
	// nofile is pdlb's descriptor limit (soft and hard, so Go's raising of
	// the soft limit at start changes nothing). It leaves room for the
	// 3,000 slow-body connections of the full form.
	nofile = 4096
	// canary is planted where pdlb must not pass it on; the fakes count the
	// requests that carry it (fake.Config.Canary).
	canary = "hostile-canary"
	// tokenDelay is the fakes' time between two tokens: a well-behaved
	// request, of 8 tokens, lasts about 8 of them, and an attacker's long
	// stream stays in flight.
	tokenDelay = time.Millisecond
	// startTimeout bounds the start of the fakes and of pdlb.
	startTimeout = 30 * time.Second
	// stopTimeout bounds a process's exit after SIGTERM, before SIGKILL.
	stopTimeout = 10 * time.Second
	// callTimeout bounds the harness's own HTTP calls (stats, liveness)
	// and the control attack's.
	callTimeout = 5 * time.Second
)

// binaries are the pdlb binaries the suite runs: the fakes', built from
// this tree, and the pdlb under attack, the same unless PDLB_HOSTILE_PDLB
// names another (another branch's build, say: the fakes must be this
// tree's, which serve what the suite reads).
type binaries struct {
	fake, serve string
}

// buildPDLB builds pdlb into a directory of t's, as the Makefile builds it
// (no cgo).
func buildPDLB(t *testing.T) binaries {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pdlb")
	cmd := exec.Command("go", "build", "-o", bin, "pdlb")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cannot build pdlb: %v\n%s", err, out)
	}
	b := binaries{fake: bin, serve: bin}
	if other := os.Getenv("PDLB_HOSTILE_PDLB"); other != "" {
		t.Logf("attacking %s (PDLB_HOSTILE_PDLB)", other)
		b.serve = other
	}
	return b
}

// freePort returns a port of host that was free a moment ago: listen on
// port 0, note the port, close.
func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("cannot find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a process of the suite, its output in a file.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string        // its stdout and stderr
	exited chan struct{} // closed once it has exited
	err    error         // what Wait returned, set before exited closes
}

// startProc starts argv with its output in log, and stops it when t ends.
func startProc(t *testing.T, name, log string, argv ...string) *proc {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: exec.Command(argv[0], argv[1:]...), log: log, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("cannot start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop ends the process with SIGTERM, then SIGKILL after stopTimeout.
func (p *proc) stop(t *testing.T) {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		t.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, stopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// kill ends the process at once.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
}

// envConfig is what an attack asks of its pdlb.
type envConfig struct {
	// flags are pdlb serve flags beyond suiteFlags.
	flags []serveFlag
	// host is the address pdlb listens on and is reached at; empty means
	// 127.0.0.1.
	host string
	// skip, if not empty, is why the attack cannot run here.
	skip string
	// instantTokens has the fakes generate without tokenDelay.
	instantTokens bool
}

// env is one pdlb in front of its fake workers, all processes of the suite.
type env struct {
	t        *testing.T
	dir      string
	pdlb     *proc
	fakes    *proc
	addr     string // pdlb's host:port
	base     string // "http://" + addr
	prefill  string // the workers' host:port
	decode   string
	fallback string
}

// startEnv starts the fake workers and pdlb for cfg, and returns once pdlb
// serves a generation. Everything stops when t ends.
func startEnv(t *testing.T, bins binaries, help string, cfg envConfig) *env {
	t.Helper()
	host := cfg.host
	if host == "" {
		host = "127.0.0.1"
	}
	lo := "127.0.0.1"
	e := &env{t: t, dir: t.TempDir()}
	e.prefill = net.JoinHostPort(lo, strconv.Itoa(freePort(t, lo)))
	e.decode = net.JoinHostPort(lo, strconv.Itoa(freePort(t, lo)))
	e.fallback = net.JoinHostPort(lo, strconv.Itoa(freePort(t, lo)))
	bootPort := freePort(t, lo)
	delay := tokenDelay
	if cfg.instantTokens {
		delay = 0
	}
	e.fakes = startProc(t, "the fakes", filepath.Join(e.dir, "fakes.log"), bins.fake, "fake",
		"--prefill", e.prefill, "--decode", e.decode, "--aggregated", e.fallback,
		"--bootstrap-port", strconv.Itoa(bootPort), "--decode-conditional-agg",
		"--token-delay", delay.String(), "--stats-route", "--canary", canary, "--log-level", "warn")
	for _, w := range e.workers() {
		e.waitOK("http://"+w+"/health", e.fakes)
	}

	port := freePort(t, host)
	e.addr = net.JoinHostPort(host, strconv.Itoa(port))
	e.base = "http://" + e.addr
	argv := []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--", bins.serve, "serve",
		"--host", host, "--port", strconv.Itoa(port),
		"--prefill", "http://" + e.prefill, strconv.Itoa(bootPort),
		"--decode", "http://" + e.decode, "--fallback", "http://" + e.fallback}
	argv = append(argv, serveArgs(t, help, cfg.flags)...)
	e.pdlb = startProc(t, "pdlb", filepath.Join(e.dir, "pdlb.log"), argv...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if w := e.pdlbWarnings(40); w != "" {
			t.Logf("pdlb's log, its warnings and errors:\n%s", w)
		}
	})
	e.waitOK(e.base+"/readiness", e.pdlb)
	e.waitServed()
	return e
}

// workers lists the fake workers' addresses.
func (e *env) workers() []string { return []string{e.prefill, e.decode, e.fallback} }

// waitOK polls url until it answers 200, failing the test if p exits or
// startTimeout passes first.
func (e *env) waitOK(url string, p *proc) {
	e.t.Helper()
	var status int
	var err error
	ok := func() bool { return err == nil && status == http.StatusOK }
	pollUntil(time.Now().Add(startTimeout), func() bool {
		status, _, err = get(url)
		return ok() || !p.alive()
	})
	if !ok() {
		e.t.Fatalf("%s never answered %s with 200 (last: %d, %v); its log:\n%s", p.name, url, status, err, tail(p.log, 20))
	}
}

// waitServed polls until pdlb serves a generation: it has warmed the PD
// pair by then.
func (e *env) waitServed() {
	e.t.Helper()
	err := errors.New("not tried")
	pollUntil(time.Now().Add(startTimeout), func() bool {
		c := newClient()
		err = wellBehaved[0].do(c, e.base)
		c.CloseIdleConnections()
		return err == nil || !e.pdlb.alive()
	})
	if err != nil {
		e.t.Fatalf("pdlb never served a generation (last: %v); its log:\n%s", err, tail(e.pdlb.log, 20))
	}
}

// pollInterval is the time between two checks of pollUntil.
const pollInterval = 20 * time.Millisecond

// pollUntil checks done every pollInterval until it holds, and reports
// whether it did before deadline. The suite's conditions are the state of
// other processes (pdlb and the fakes, seen through their HTTP answers and
// /proc), which send the test no event when it changes: a bounded poll is
// the honest minimum, and this is the suite's one place for it, so that
// every wait has a deadline and none sleeps on time alone.
func pollUntil(deadline time.Time, done func() bool) bool {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// get answers GET url's status and body.
func get(url string) (int, []byte, error) {
	c := http.Client{Timeout: callTimeout}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// fakeStats reads the counters of the fake worker at addr.
func (e *env) fakeStats(addr string) fake.Stats {
	e.t.Helper()
	status, body, err := get("http://" + addr + fake.StatsPath)
	var st fake.Stats
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(body, &st)
	}
	if err != nil || status != http.StatusOK {
		e.t.Fatalf("cannot read the stats of the fake at %s: %d %v", addr, status, err)
	}
	return st
}

// sumStats adds up a counter over every fake worker.
func (e *env) sumStats(counter func(fake.Stats) uint64) uint64 {
	var n uint64
	for _, w := range e.workers() {
		n += counter(e.fakeStats(w))
	}
	return n
}

// liveness reports whether pdlb's /liveness answers 200.
func (e *env) liveness() error {
	status, body, err := get(e.base + "/liveness")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("answered %d %s", status, body)
	}
	return err
}

// workerTrouble are the lines pdlb logs when it takes a worker out of
// selection: its health checks find it down, its breaker ejects it, or its
// bootstrap server looks gone.
var workerTrouble = []string{
	`"message":"backend is down"`,
	`"message":"ejecting the worker`,
	`"message":"taking the prefill out of selection`,
}

// workersMarkedDown returns pdlb's log lines that took a worker out of
// selection.
func (e *env) workersMarkedDown() []string {
	var found []string
	scanLog(e.pdlb.log, func(line string) {
		for _, s := range workerTrouble {
			if strings.Contains(line, s) {
				found = append(found, line)
			}
		}
	})
	return found
}

// pdlbWarnings returns the last n lines of pdlb's log that are not info
// lines: warnings, errors, and whatever the Go runtime wrote on a crash.
func (e *env) pdlbWarnings(n int) string {
	var lines []string
	scanLog(e.pdlb.log, func(line string) {
		if !strings.Contains(line, `"level":"info"`) && !strings.Contains(line, `"level":"debug"`) {
			lines = append(lines, line)
		}
	})
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// scanLog calls f on each line of the file at path.
func scanLog(path string, f func(line string)) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	var lines []string
	scanLog(path, func(line string) { lines = append(lines, line) })
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// nonLoopbackIP returns an address of this machine that is not a loopback
// one, so a connection from this machine to it comes from a non-loopback
// peer; "" if there is none.
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	return ""
}
