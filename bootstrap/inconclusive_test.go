package bootstrap

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"pdlb/bench/fake"
)

// A refresh that fails inconclusively (pdlb out of descriptors) publishes
// nothing: a ready prefill stays ready, and one never read stays unread,
// which pdlb takes as up. Issue 19: under a flood of client connections,
// pdlb's own failures took healthy workers out.
func TestInconclusiveRefreshChangesNothing(t *testing.T) {
	nw := fake.NewNetwork()
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2})
	var starved atomic.Bool
	r := NewRegistry(Config{
		Targets: []Target{{APIAddr: prefillAPI, Port: DefaultPort}},
		Dial: func(addr string) (net.Conn, error) {
			if starved.Load() {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
			}
			return nw.Dial(addr)
		},
		Inconclusive: func(err error) bool { return errors.Is(err, syscall.EMFILE) },
	})

	starved.Store(true)
	unread := r.State(0)
	if err := r.Refresh(testContext(t), 0); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("got %v; want the dial's EMFILE", err)
	}
	if st := r.State(0); st != unread || !st.Updated.IsZero() {
		t.Fatalf("got state %+v; want it unread still", st)
	}

	starved.Store(false)
	ready := mustRefresh(t, r, 0)
	starved.Store(true)
	r.target(0).closeIdleConnections()
	if err := r.Refresh(testContext(t), 0); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("got %v; want the dial's EMFILE", err)
	}
	if st := r.State(0); st != ready {
		t.Fatalf("got state %+v; want the ready one kept", st)
	}
	r.target(0).closeIdleConnections()
}
