// Package health decides whether pdlb's backends may receive traffic.
//
// It has two halves that look at a backend from different sides:
//
//   - A Checker probes each Target actively with GET Path on its own small
//     fasthttp.HostClient, so a proxy pool saturated by long generations
//     cannot make a busy worker look dead. Rise and Fall thresholds damp
//     flapping, except at startup: a target's first probe decides its state,
//     so pdlb routes as soon as one round has finished (CheckOnce).
//   - A Breaker tracks passive failures of real requests, in the style of
//     Envoy's outlier detection: after Threshold consecutive failures it ejects
//     the backend for a backoff that doubles on each failed trial, and the
//     first success brings it back.
//
// The package imports no other pdlb package and owns no backend state. lb
// wires it up through callbacks: each Target's OnChange stores the new State
// in the backend's atomic (healthy.Store(s == health.Up)), and each backend
// holds a *Breaker, so its selection predicate reads
//
//	b.healthy.Load() && b.breaker.Allow()
//
// and the request path reports each outcome with Success or Failure, logging
// once when Failure reports that it opened the breaker. main runs
// CheckOnce before serving and then Run until shutdown.
package health
