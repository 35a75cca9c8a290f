package bench

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestRunCancelDefaultDial runs against a listener whose backlog is full,
// where connects hang until their timeout: the default dialer must end
// them with the run's context. It once held an interrupted run for the
// whole timeout.
func TestRunCancelDefaultDial(t *testing.T) {
	t.Parallel()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skipf("no socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Skipf("cannot bind: %v", err)
	}
	// Room for one connection, never accepted: later SYNs are dropped.
	if err := syscall.Listen(fd, 0); err != nil {
		t.Skipf("cannot listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Cancelling early only skips the dials; it cannot make the test pass
	// when dials ignore the context.
	stop := time.AfterFunc(300*time.Millisecond, cancel)
	defer stop.Stop()
	done := make(chan *Report, 1)
	go func() {
		rep, err := Run(ctx, Config{URL: "http://" + addr, Concurrency: 4, Duration: time.Minute, Timeout: time.Minute})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- rep
	}()
	select {
	case rep := <-done:
		if !rep.Interrupted {
			t.Fatal("got a complete run; want an interrupted one")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
