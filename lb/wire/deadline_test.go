package wire

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStepsRoundUp(t *testing.T) {
	steps := NewSteps()
	start := time.Now()
	for _, d := range []time.Duration{0, time.Millisecond, 37 * time.Millisecond, DeadlineStep, 10*time.Second + 1} {
		in := start.Add(d)
		got := steps.Round(in)
		if got.Before(in) || got.Sub(in) >= DeadlineStep {
			t.Errorf("steps.Round(start+%v) is %v after it, want within [0, %v)", d, got.Sub(in), DeadlineStep)
		}
		if !strings.Contains(got.String(), "m=") {
			t.Errorf("steps.Round(start+%v) lost its monotonic reading: %v", d, got)
		}
	}
	if got := steps.Round(time.Time{}); !got.IsZero() {
		t.Errorf("no deadline became %v", got)
	}
	// Deadlines within one step are one deadline: what lets a pooled
	// connection keep the one it has. Each is taken from a clock reading
	// of its own, as requests' deadlines are.
	base := steps.Round(time.Now().Add(time.Minute))
	for i := range 1000 {
		now := time.Now()
		in := now.Add(base.Sub(now) - time.Duration(1+i%99)*DeadlineStep/100)
		if got := steps.Round(in); !got.Equal(base) {
			t.Fatalf("%v, in the step that ends at %v, rounds to %v", in, base, got)
		}
	}
}

// deadlineConn counts the deadlines that reach the connection.
type deadlineConn struct {
	net.Conn
	reads, writes int
	fail          error
}

func (c *deadlineConn) SetReadDeadline(time.Time) error {
	c.reads++
	return c.fail
}

func (c *deadlineConn) SetWriteDeadline(time.Time) error {
	c.writes++
	return c.fail
}

func TestWorkerConnSetsOnlyNewDeadlines(t *testing.T) {
	inner := &deadlineConn{}
	c := &workerConn{Conn: inner}
	t1 := time.Now().Add(time.Minute)
	t2 := t1.Add(DeadlineStep)
	for _, d := range []time.Time{t1, t1, t1, t2, t2, t1} {
		_ = c.SetReadDeadline(d)
		_ = c.SetWriteDeadline(d)
	}
	if inner.reads != 3 || inner.writes != 3 {
		t.Errorf("six deadlines in three runs reached the connection as %d reads and %d writes, want 3 each", inner.reads, inner.writes)
	}
	// A connection starts without deadlines: clearing them costs nothing.
	fresh := &deadlineConn{}
	_ = (&workerConn{Conn: fresh}).SetDeadline(time.Time{})
	if fresh.reads+fresh.writes != 0 {
		t.Errorf("clearing a new connection's deadlines made %d calls", fresh.reads+fresh.writes)
	}
	// A deadline that could not be set is not remembered as set.
	failing := &deadlineConn{fail: errors.New("closed")}
	fc := &workerConn{Conn: failing}
	for range 2 {
		if err := fc.SetReadDeadline(t1); err == nil {
			t.Fatal("the connection's error was lost")
		}
	}
	if failing.reads != 2 {
		t.Errorf("a failed deadline was remembered: %d calls for 2 tries", failing.reads)
	}
}
