package lb

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestWireDeadlineRoundsUpToAStep(t *testing.T) {
	start := time.Now()
	for _, d := range []time.Duration{0, time.Millisecond, 37 * time.Millisecond, deadlineStep, 10*time.Second + 1} {
		in := start.Add(d)
		got := wireDeadline(in)
		if got.Before(in) || got.Sub(in) >= deadlineStep {
			t.Errorf("wireDeadline(start+%v) is %v after it, want within [0, %v)", d, got.Sub(in), deadlineStep)
		}
		if got.UnixNano()%int64(deadlineStep) != 0 {
			t.Errorf("wireDeadline(start+%v) = %v, not a multiple of %v", d, got, deadlineStep)
		}
		if !strings.Contains(got.String(), "m=") {
			t.Errorf("wireDeadline(start+%v) lost its monotonic reading: %v", d, got)
		}
	}
	// Deadlines within one step are one deadline: what lets a pooled
	// connection keep the one it has.
	base := wireDeadline(start)
	a, b := base.Add(time.Millisecond), base.Add(deadlineStep-time.Millisecond)
	if !wireDeadline(a).Equal(wireDeadline(b)) {
		t.Errorf("%v and %v, one step apart, round to %v and %v", a, b, wireDeadline(a), wireDeadline(b))
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
	t2 := t1.Add(deadlineStep)
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
