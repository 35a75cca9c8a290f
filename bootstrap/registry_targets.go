package bootstrap

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Targets that come and go (issue 23): a prefill joins the registry with
// Add and leaves it with Remove, while Run runs or not.
//
// An index is never given twice: a caller that still holds the index of a
// removed prefill (a request in flight on it, a warm-up) must read that
// it is gone, never another prefill's bootstrap port. A removed index
// costs one nil pointer.

// ErrRemoved is what the methods that refresh or wait on a target return
// once it was removed.
var ErrRemoved = errors.New("prefill removed from the registry")

// loops are the refresh loops of one Run.
type loops struct {
	ctx context.Context
	wg  sync.WaitGroup
}

// labelSeries are the metric series of one label, shared by the targets of
// one APIAddr; the gauges read their owner's State.
type labelSeries struct {
	refs  int
	owner atomic.Pointer[target]
}

// Add follows tc from now on and returns its index. While Run runs, tc is
// refreshed at once, then as every target is; otherwise it waits for Run,
// or Refresh. OnChange may be called for the new index before Add
// returns: a caller that maps indices to its own objects must make its
// callback wait for Add's caller (hold a lock across Add and the mapping,
// which the callback takes too).
func (r *Registry) Add(tc Target) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.targets.Load()
	t := r.newTarget(len(old), tc)
	all := append(slices.Clone(old), t)
	r.targets.Store(&all)
	if r.running != nil {
		r.startLoop(t)
	}
	t.log.Info().Int("port", tc.Port).Msg("following the prefill's bootstrap server")
	return t.i
}

// Remove stops following target i: its loop in Run ends, its metric series
// go with the last target of its APIAddr, and from now on State and
// Snapshot answer it with a State that is not ready, while Refresh,
// Recheck and WaitReady (those waiting included) return ErrRemoved. A
// refresh of it in flight ends by Config.Timeout and calls OnChange only
// if it was publishing as Remove was called. It panics if i was removed.
func (r *Registry) Remove(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.targets.Load()
	t := old[i]
	if t == nil {
		panic("BUG: bootstrap: Remove of a removed target " + strconv.Itoa(i))
	}
	all := slices.Clone(old)
	all[i] = nil
	r.targets.Store(&all)
	close(t.gone)
	if t.stop != nil {
		t.stop()
	}
	r.unregisterMetrics(t)
	t.log.Info().Msg("no longer following the prefill's bootstrap server")
}

// SetPort changes the bootstrap port target i is given (0: unknown, asked
// from /server_info), for a prefill that came back on another port, and
// reports whether it changed. The next refresh, at once while Run runs,
// reads the prefill there: its State keeps the old port until then, and
// gets a new Generation if the port in use changes. It does nothing for a
// removed target.
func (r *Registry) SetPort(i, port int) bool {
	t := r.target(i)
	if t == nil || int(t.port.Swap(int32(port))) == port {
		return false
	}
	r.Poke(i)
	return true
}

// target returns target i, nil if it was removed, and panics if no target
// ever had index i.
func (r *Registry) target(i int) *target { return (*r.targets.Load())[i] }

// removed reports whether t was removed.
func (t *target) removed() bool {
	select {
	case <-t.gone:
		return true
	default:
		return false
	}
}

// startLoop starts t's loop in Run; r.mu is held and Run runs.
func (r *Registry) startLoop(t *target) {
	ctx, cancel := context.WithCancel(r.running.ctx)
	t.stop = cancel
	r.running.wg.Go(func() {
		defer cancel()
		r.follow(ctx, t)
		if t.removed() {
			t.closeIdleConnections() // Run's end closes the others'
		}
	})
}

// registerMetrics creates t's series in Config.Metrics, or shares those of
// its APIAddr. The gauges read the State when scraped, so only the counters
// are updated by refreshes. r.mu is held, or r is not shared yet.
func (r *Registry) registerMetrics(t *target) {
	t.label = `{prefill="` + escapeLabel(t.cfg.APIAddr) + `"}`
	set := r.cfg.Metrics
	ls := r.series[t.label]
	if ls == nil {
		ls = &labelSeries{}
		ls.owner.Store(t)
		r.series[t.label] = ls
		set.GetOrCreateGauge("pdlb_bootstrap_ready"+t.label, func() float64 {
			if ls.owner.Load().state.Load().Ready {
				return 1
			}
			return 0
		})
		set.GetOrCreateGauge("pdlb_bootstrap_dp_size"+t.label, func() float64 {
			return float64(ls.owner.Load().state.Load().Info.DPSize)
		})
	}
	ls.refs++
	t.refreshes = set.GetOrCreateCounter("pdlb_bootstrap_refreshes_total" + t.label)
	t.failures = set.GetOrCreateCounter("pdlb_bootstrap_refresh_failures_total" + t.label)
}

// seriesNames are the names of the series of a label.
func seriesNames(label string) [4]string {
	return [4]string{
		"pdlb_bootstrap_ready" + label,
		"pdlb_bootstrap_dp_size" + label,
		"pdlb_bootstrap_refreshes_total" + label,
		"pdlb_bootstrap_refresh_failures_total" + label,
	}
}

// unregisterMetrics gives back removed t's share of its series: they go
// with the last target of the label, else the gauges read another's State.
// r.mu is held.
func (r *Registry) unregisterMetrics(t *target) {
	ls := r.series[t.label]
	if ls.refs--; ls.refs == 0 {
		delete(r.series, t.label)
		for _, name := range seriesNames(t.label) {
			r.cfg.Metrics.UnregisterMetric(name)
		}
		return
	}
	if ls.owner.Load() == t {
		for _, o := range *r.targets.Load() {
			if o != nil && o.label == t.label {
				ls.owner.Store(o)
				break
			}
		}
	}
}
