package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/goleak"

	"pdlb/bench/fake"
)

// seriesOf returns the lines of set's metrics that name prefill addr.
func seriesOf(set *metrics.Set, addr string) []string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	var out []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, `prefill="`+addr+`"`) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestRegistryAddRemoveWhileRunning adds a prefill while Run runs and sees
// it refreshed at once and announced; removes it and sees it answer as
// gone, its series unregistered and its loop ended (issue 23).
func TestRegistryAddRemoveWhileRunning(t *testing.T) {
	nw := fake.NewNetwork()
	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2})
	set := metrics.NewSet()
	changes := make(chan *State, 64)
	r := newRegistry(nw, Config{
		RefreshInterval: time.Hour, // a ready target is not refreshed again
		Metrics:         set,
		OnChange: func(i int, st *State) {
			if i == 0 {
				changes <- st
			}
		},
	})
	before := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		r.Run(stop)
		close(done)
	}()
	defer func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(testDeadline):
			t.Fatal("Run did not return once stop was closed")
		}
	}()

	if i := r.Add(Target{APIAddr: prefillAPI}); i != 0 {
		t.Fatalf("got index %d for the first target; want 0", i)
	}
	waitChange(t, changes, func(st *State) bool { return st.Ready && st.Info.DPSize == 2 })
	if got := seriesOf(set, prefillAPI); len(got) != 4 || !strings.Contains(strings.Join(got, "\n"), `pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`) {
		t.Errorf("got series %q; want the 4 of the added prefill, ready", got)
	}

	checkRemovalWakes(t, r, r.Add(Target{APIAddr: "nowhere:30000"}))
	r.Remove(0)
	checkRemoved(t, r, 0)
	if got := seriesOf(set, prefillAPI); len(got) != 0 {
		t.Errorf("got series %q after the removal; want none", got)
	}
	if i := r.Add(Target{APIAddr: prefillAPI}); i != 2 {
		t.Errorf("got index %d after two removals; want 2: an index is never given twice", i)
	} else {
		r.Remove(i)
	}
	// No loop is left for the removed targets; only Run waits.
	closePrefill(t, p)
	goleak.VerifyNone(t, append(leakOptions, before, goleak.IgnoreAnyFunction("pdlb/bootstrap.(*Registry).Run"))...)
}

// checkRemovalWakes removes target i, not ready, while WaitReady waits on
// it, and checks that the waiter is told.
func checkRemovalWakes(t *testing.T, r *Registry, i int) {
	t.Helper()
	waited := make(chan error, 1)
	go func() {
		_, err := r.WaitReady(testContext(t), i)
		waited <- err
	}()
	r.Remove(i)
	select {
	case err := <-waited:
		if !errors.Is(err, ErrRemoved) {
			t.Errorf("WaitReady of a target removed as it waited: got %v; want ErrRemoved", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("WaitReady did not return once its target was removed")
	}
}

// checkRemoved checks that removed target i answers as gone, at once.
func checkRemoved(t *testing.T, r *Registry, i int) {
	t.Helper()
	if st := r.State(i); st.Ready || st.Err == "" {
		t.Errorf("State of a removed target: got %+v; want not ready, with an error", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // WaitReady must not need it
	if st, err := r.WaitReady(ctx, i); !errors.Is(err, ErrRemoved) || st.Ready {
		t.Errorf("WaitReady of a removed target: got %+v, %v; want not ready and ErrRemoved", st, err)
	}
	if err := r.Refresh(testContext(t), i); !errors.Is(err, ErrRemoved) {
		t.Errorf("Refresh of a removed target: got %v; want ErrRemoved", err)
	}
	if err := r.Recheck(testContext(t), i, r.State(i)); !errors.Is(err, ErrRemoved) {
		t.Errorf("Recheck of a removed target: got %v; want ErrRemoved", err)
	}
	r.Poke(i) // does nothing, and does not panic
	if all := r.Snapshot(); len(all) <= i || all[i] != r.State(i) {
		t.Errorf("Snapshot: got %+v; want the removed State at index %d", all, i)
	}
}

// TestRegistryAddBeforeRun adds a target before Run: Refresh reads it, and
// Run follows it with the others.
func TestRegistryAddBeforeRun(t *testing.T) {
	nw := fake.NewNetwork()
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: "nowhere:30000"}}})
	i := r.Add(Target{APIAddr: prefillAPI, Port: DefaultPort})
	if st := r.State(i); st.Ready || st.Port != DefaultPort || st.PortSource != PortFromCLI {
		t.Fatalf("got %+v before any refresh; want not ready, on the given port", st)
	}
	mustRefresh(t, r, i)
	r.Remove(i)

	j := r.Add(Target{APIAddr: prefillAPI})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		r.Run(stop)
		close(done)
	}()
	st, err := r.WaitReady(testContext(t), j)
	close(stop)
	<-done
	if err != nil || st.Info.DPSize != 4 || st.PortSource != PortFromServerInfo {
		t.Errorf("got %+v, %v; want the target added before Run ready, its port from /server_info", st, err)
	}
	checkRemoved(t, r, i)
}

// TestRegistryRemoveSharedSeries removes one of two targets of one
// APIAddr: their series stay, read from the other, until it goes too.
func TestRegistryRemoveSharedSeries(t *testing.T) {
	nw := fake.NewNetwork()
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})
	set := metrics.NewSet()
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI, Port: 1}}, Metrics: set})
	second := r.Add(Target{APIAddr: prefillAPI})
	mustRefresh(t, r, second)
	r.Remove(0)
	got := strings.Join(seriesOf(set, prefillAPI), "\n")
	if !strings.Contains(got, `pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`) ||
		!strings.Contains(got, `pdlb_bootstrap_dp_size{prefill="prefill-0:30000"} 4`) {
		t.Errorf("got series\n%s\nwant the remaining target's, ready with dp_size 4", got)
	}
	r.Remove(second)
	if got := seriesOf(set, prefillAPI); len(got) != 0 {
		t.Errorf("got series %q after the last removal; want none", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second Remove of one index did not panic")
		}
	}()
	r.Remove(second)
}

// TestRegistrySetPort moves a target to another given port, then to none:
// each refresh reads the prefill where it is now told to.
func TestRegistrySetPort(t *testing.T) {
	nw := fake.NewNetwork()
	startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 2, BootstrapAddr: "prefill-0:9100"})
	r := newRegistry(nw, Config{Targets: []Target{{APIAddr: prefillAPI, Port: DefaultPort}}})
	if err := r.Refresh(testContext(t), 0); err == nil {
		t.Fatal("got no error from a port nothing listens on")
	}
	if !r.SetPort(0, 9100) || r.SetPort(0, 9100) {
		t.Fatal("SetPort did not report one change, then none")
	}
	st := mustRefresh(t, r, 0)
	if st.Port != 9100 || st.PortSource != PortFromCLI {
		t.Errorf("got %+v; want port 9100 as given", st)
	}
	r.SetPort(0, 0)
	again := mustRefresh(t, r, 0)
	if again.Port != 9100 || again.PortSource != PortFromServerInfo || again.Generation != st.Generation {
		t.Errorf("got %+v; want port 9100 from /server_info, generation %d (nothing else changed)", again, st.Generation)
	}
	r.Remove(0)
	if r.SetPort(0, 1) {
		t.Error("SetPort of a removed target reported a change")
	}
}
