//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runAsPDLB makes the test binary run main instead of the tests, so that
// scripts/demo.sh can run it as pdlb without a separate build.
const runAsPDLB = "RUN_AS_PDLB"

func TestMain(m *testing.M) {
	if os.Getenv(runAsPDLB) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDemoPrintsWholeJSONAndRemovesItsLogs runs `make run`'s script, with
// short load runs, and checks what issue 20 found wrong with it: it cut
// /bootstrap's answer mid-object, and left its temporary log folder behind.
func TestDemoPrintsWholeJSONAndRemovesItsLogs(t *testing.T) {
	t.Parallel() // the scripts' runs wait mostly on their load runs' clocks
	demo := newDemo(t)
	out, err := demo.run(t, "", nil)
	if err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out)
	}
	docs, err := jsonDocuments(out)
	if err != nil {
		t.Fatalf("the demo printed a broken JSON document: %v\n%s", err, out)
	}
	var bootstrap bool
	for _, doc := range docs {
		var v map[string]json.RawMessage
		if json.Unmarshal(doc, &v) == nil && v["prefills"] != nil {
			bootstrap = true
		}
	}
	if !bootstrap || len(docs) < 4 {
		t.Fatalf("got %d JSON documents (/bootstrap's among them: %v); want the answers of /generate, the stream, the decode-only request and /bootstrap\n%s", len(docs), bootstrap, out)
	}
	demo.checkCleanedUp(t)
}

// TestDemoInterruptedRemovesItsLogs sends Ctrl-C (SIGINT to the process
// group, as a terminal does) once the demo's servers are up.
func TestDemoInterruptedRemovesItsLogs(t *testing.T) {
	t.Parallel()
	demo := newDemo(t)
	out, err := demo.run(t, "== POST /generate through pdlb", func(pgid int) {
		if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
			t.Errorf("cannot interrupt the demo: %v", err)
		}
	})
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("got %v from the interrupted demo; want a failed exit status\n%s", err, out)
	}
	demo.checkCleanedUp(t)
}

// demo is one run of a script of scripts/ (the demo's, by default) on its
// own ports and temporary folder.
type demo struct {
	script string
	env    []string // the script's settings, besides pdlb and the folder
	base   int
	tmp    string
}

// newDemo prepares a run of scripts/demo.sh, with short load runs and
// warm-ups: their length is not what the tests check.
func newDemo(t *testing.T) *demo {
	t.Helper()
	d := newScriptRun(t, "scripts/demo.sh")
	d.env = []string{"DEMO_BASE_PORT=" + strconv.Itoa(d.base), "DEMO_DURATION=300ms", "DEMO_WARMUP=100ms"}
	return d
}

// newScriptRun prepares a run of script on free ports (freeDemoPorts).
func newScriptRun(t *testing.T, script string) *demo {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s needs %s: %v", script, tool, err)
		}
	}
	tmp := t.TempDir()
	return &demo{script: script, base: freeDemoPorts(t), tmp: tmp}
}

// run runs the demo until it ends. When onMarker is set, it is called
// with the demo's process group once a line of its output contains marker.
func (d *demo) run(t *testing.T, marker string, onMarker func(pgid int)) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A failure deadline, not a synchronisation: the demo takes a few
	// seconds; a hung one is killed with every process it started.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.script)
	// The race detector makes each process it instruments wait a second
	// as it exits (GORACE's atexit_sleep_ms), giving goroutines still
	// running a last chance to race. A race is reported, and fails its
	// process, when it happens all the same; without this the scripts'
	// runs were mostly those seconds (a bench run, each server stopped).
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(append(os.Environ(), runAsPDLB+"=1", "PDLB="+self, "TMPDIR="+d.tmp, "GORACE="+race), d.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out := &markerWriter{marker: marker, seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	if onMarker != nil {
		select {
		case <-out.seen:
			onMarker(cmd.Process.Pid)
		case err := <-ended:
			return out.String(), fmt.Errorf("%s ended before %q: %v", d.script, marker, err)
		}
	}
	err = <-ended
	return out.String(), err
}

// checkCleanedUp checks that the script removed its temporary folder and
// stopped its servers.
func (d *demo) checkCleanedUp(t *testing.T) {
	t.Helper()
	left, err := os.ReadDir(d.tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("%s left %s in its temporary folder", d.script, e.Name())
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(d.base))); err == nil {
		c.Close()
		t.Errorf("pdlb still serves on %d after %s ended", d.base, d.script)
	}
}

// freeDemoPorts returns a DEMO_BASE_PORT whose ports (base to base+3 and
// base+998) are free, taken below Linux's ephemeral range so that no
// outgoing connection takes one before the demo listens on it.
func freeDemoPorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(10000)
		var lns []net.Listener
		for _, p := range []int{base, base + 1, base + 2, base + 3, base + 998} {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == 5 {
			return base
		}
	}
	t.Fatal("no free port range for the demo")
	return 0
}

// jsonDocuments returns every JSON document in the demo's output: each
// one starts a line ("{" or "["), or follows "data: " in a stream ("{").
// It fails on the first
// one that does not parse whole.
func jsonDocuments(out string) ([]json.RawMessage, error) {
	var docs []json.RawMessage
	for pos := 0; pos < len(out); {
		line := out[pos:]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		start := pos
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			// An event, or the stream's end: data: [DONE], not JSON.
			start += len(line) - len(data)
			line = data
		}
		if !strings.HasPrefix(line, "{") && !(start == pos && strings.HasPrefix(line, "[")) {
			pos = start + len(line)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(out[start:]))
		var doc json.RawMessage
		if err := dec.Decode(&doc); err != nil {
			return docs, fmt.Errorf("the document at %q: %w", strings.TrimSpace(line), err)
		}
		docs = append(docs, doc)
		pos = start + int(dec.InputOffset())
	}
	return docs, nil
}

// markerWriter collects the demo's output and closes seen once it holds
// marker.
type markerWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	closed bool
}

func (w *markerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.closed && w.marker != "" && bytes.Contains(w.buf.Bytes(), []byte(w.marker)) {
		w.closed = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *markerWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
