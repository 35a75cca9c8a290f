package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// dialError is err as a failed dial reports it.
func dialError(err syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", err)}
}

func TestOutOfResources(t *testing.T) {
	f := func(err error, want bool) {
		t.Helper()
		if got := OutOfResources(err); got != want {
			t.Errorf("OutOfResources(%v) got %v; want %v", err, got, want)
		}
	}
	f(nil, false)
	f(errors.New("too many open files"), false) // only the errno says it
	f(dialError(syscall.EMFILE), true)
	f(dialError(syscall.ENFILE), true)
	f(dialError(syscall.ENOBUFS), true)
	f(dialError(syscall.ENOMEM), true)
	f(dialError(syscall.EADDRNOTAVAIL), true) // no local port left
	f(fmt.Errorf("cannot GET /health: %w", dialError(syscall.EMFILE)), true)
	f(dialError(syscall.ECONNREFUSED), false)
	f(dialError(syscall.ETIMEDOUT), false)
}

// A probe pdlb could not send for want of descriptors changes nothing: not
// the state (neither up nor down), not the last error, not the counts.
// Under the flood of issue 19 such probes took both workers down, and
// clients got 503s for seconds after the flood ended.
func TestProbeOutOfDescriptorsChangesNothing(t *testing.T) {
	t.Parallel()
	nw := network{}
	nw.backend(t, "worker:1")
	var starved atomic.Bool
	onChange, changes := record()
	c := newChecker(t, nil, Config{Rise: 1, Fall: 1, Dial: func(addr string) (net.Conn, error) {
		if starved.Load() {
			return nil, dialError(syscall.EMFILE)
		}
		return nw.dial(addr)
	}}, Target{Addr: "worker:1", OnChange: onChange})
	want := func(state State, ok, failed uint64) {
		t.Helper()
		if got := c.State(0); got != state {
			t.Errorf("got %q; want %q", got, state)
		}
		if got := c.LastError(0); got != "" {
			t.Errorf("LastError got %q; want none", got)
		}
		if gotOK, gotFailed := c.Probes(); gotOK != ok || gotFailed != failed {
			t.Errorf("Probes got (%d, %d); want (%d, %d)", gotOK, gotFailed, ok, failed)
		}
	}

	starved.Store(true)
	checkOnce(t, context.Background(), c)
	want(Unknown, 0, 0) // not Down: the worker was never asked
	if got := drain(changes); len(got) != 0 {
		t.Fatalf("OnChange got %v; want no call", got)
	}

	starved.Store(false)
	checkOnce(t, context.Background(), c)
	want(Up, 1, 0)
	wantChange(t, changes, Up)

	starved.Store(true)
	(*c.targets.Load())[0].hc.CloseIdleConnections() // so the next probe dials
	checkOnce(t, context.Background(), c)
	want(Up, 1, 0) // Fall is 1: one counted failure would take it down
	if got := drain(changes); len(got) != 0 {
		t.Fatalf("OnChange got %v; want no call", got)
	}
}

// Probes skipped for want of descriptors are logged when they start and
// when they end, not every round: a flood that takes the descriptors would
// otherwise fill the log too.
func TestStarvedProbesAreLoggedOnce(t *testing.T) {
	t.Parallel()
	nw := network{}
	nw.backend(t, "worker:1")
	var starved atomic.Bool
	var logs strings.Builder
	cfg := Config{Rise: 1, Fall: 1, Dial: func(addr string) (net.Conn, error) {
		if starved.Load() {
			return nil, dialError(syscall.EMFILE)
		}
		return nw.dial(addr)
	}}
	cfg.Log = zerolog.New(&logs)
	c := NewChecker(cfg, []Target{{Addr: "worker:1"}})
	starved.Store(true)
	for range 3 {
		checkOnce(t, context.Background(), c)
	}
	starved.Store(false)
	checkOnce(t, context.Background(), c)
	out := logs.String()
	if n := strings.Count(out, "cannot probe"); n != 1 {
		t.Fatalf("3 starved rounds logged %d warnings; want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "probing again"); n != 1 {
		t.Fatalf("the end of starvation logged %d lines; want 1:\n%s", n, out)
	}
}
