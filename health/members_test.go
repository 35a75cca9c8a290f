package health

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestAddRemove checks that a target added at run time is probed from the
// next round, that a removed one is probed no more and reports nothing,
// and that a later Add takes the removed target's index (issue 23).
func TestAddRemove(t *testing.T) {
	nw := network{}
	a, b := nw.backend(t, "a:1"), nw.backend(t, "b:1")
	c := NewChecker(Config{Dial: nw.dial}, []Target{{Name: "a", Addr: "a:1"}})
	ctx := context.Background()
	c.CheckOnce(ctx)
	if got := c.State(0); got != Up {
		t.Fatalf("a: got %v; want up", got)
	}

	var changes atomic.Int32
	i := c.Add(Target{Name: "b", Addr: "b:1", OnChange: func(State) { changes.Add(1) }})
	if i != 1 {
		t.Fatalf("Add: got index %d; want 1", i)
	}
	if got := c.State(i); got != Unknown {
		t.Fatalf("b before a round: got %v; want unknown", got)
	}
	c.CheckOnce(ctx)
	if got := c.State(i); got != Up {
		t.Fatalf("b after a round: got %v; want up", got)
	}

	c.Remove(i)
	b.status.Store(fasthttp.StatusServiceUnavailable)
	c.CheckOnce(ctx)
	if got := changes.Load(); got != 1 {
		t.Fatalf("b's transitions: got %d; want 1 (none after Remove)", got)
	}
	if got := c.State(i); got != Unknown { // a reader may hold a removed index
		t.Fatalf("removed b: got %v; want unknown", got)
	}

	a.status.Store(fasthttp.StatusServiceUnavailable)
	if j := c.Add(Target{Name: "b again", Addr: "b:1"}); j != i {
		t.Fatalf("Add after Remove: got index %d; want %d", j, i)
	}
	c.CheckOnce(ctx)
	if got, want := c.State(i), Down; got != want {
		t.Fatalf("b again: got %v; want %v", got, want)
	}
	if got := c.State(0); got != Up { // Fall is 3: one failure does not take it down
		t.Fatalf("a: got %v; want up", got)
	}
}
