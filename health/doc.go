// Package health decides whether pdlb's backends may receive traffic.
//
// It has two halves that look at a backend from different sides:
//
//   - A Checker probes each Target actively with GET Path on its own small
//     fasthttp.HostClient, so a proxy pool saturated by long generations
//     cannot make a busy worker look dead. Rise and Fall thresholds damp
//     flapping, except from Unknown: a target's first probe decides its
//     state. A probe that fails because pdlb itself is out of descriptors
//     or memory (OutOfResources) is not counted: it says nothing of the
//     target.
//   - A Breaker tracks passive failures of real requests, in the style of
//     Envoy's outlier detection: after Threshold consecutive failures it
//     ejects the backend for a backoff that doubles on each failed trial,
//     up to MaxBackoff, and the first success brings it back.
//
// The package imports no other pdlb package and owns no backend state.
// Package lb wires it up through callbacks. Each Target's OnChange stores
// the new State in the backend's atomic, and takes a worker that comes
// back from Down for one that may have restarted with empty caches: its
// pairs go cold. OnProbe reports every probe that counts, failures under
// the Fall threshold included: lb takes a failed probe, but for a timeout
// (a slow worker is alive), for a sign that the worker may have restarted
// (its pairs go cold, its idle connections are dropped, a prefill's
// bootstrap server is read again), and the first probe it answers after,
// once it is in selection, warms its pairs again. LastError tells, in the
// 503 of a request that found a whole pool out, why a worker is. Each
// backend holds a *Breaker, unless --disable-circuit-breaker. A backend's
// selection predicate (lb's Backend.available) then reads
//
//	health.State(b.health.Load()) != health.Down && !b.bootstrapDown.Load() &&
//		(b.breaker == nil || b.breaker.Allow())
//
// so a backend not probed yet (Unknown) counts as up, and pdlb serves
// from its first instant. The request path reports each outcome with
// Success or Failure, and logs once when Failure reports that it opened
// the breaker. lb's Server runs Run until shutdown, unless
// --disable-health-check (then no Checker exists and every worker counts
// as up); CheckOnce runs one round synchronously, for tests.
//
// In pdlb's defaults a worker is probed every 5 s with a 2 s timeout
// (--health-check-interval-secs, --health-check-timeout-secs), goes out
// after 3 failed probes in a row and comes back after 2 good ones; 5
// consecutive failed requests eject it for 1 s, doubling up to 30 s (the
// --cb-* flags). Package lb's documentation says which failures count.
package health
