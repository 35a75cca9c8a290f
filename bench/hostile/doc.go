// Package hostile is the hostile-client suite: no client can take the
// service from the others. Each attack, bounded in time, runs against a real
// pdlb process while a steady well-behaved load runs beside it.
//
// TestHostile builds pdlb once, then for each attack starts fake SGLang
// workers (`pdlb fake`: a prefill, a decode and an aggregated fallback) and
// `pdlb serve` as processes of their own, pdlb under a descriptor limit
// (prlimit) and with its access log in a file. A baseline phase without
// attack measures the well-behaved clients' p99 latency; then the attack
// runs, lets go, and the load goes on a little while. Every attack asserts
// that:
//
//   - pdlb never crashes, and /liveness answers;
//   - the well-behaved clients see no error, during the attack or after it
//     (no lingering 503s), and their p99 latency stays within a small
//     multiple of the baseline (p99Bound says which and why);
//   - pdlb's RSS stays under its body-memory budget plus a fixed overhead,
//     and comes back down after the attack; its open descriptors stay under
//     its limit;
//   - no worker is ever marked down or ejected;
//
// and checks of its own, which its doc comment states.
//
// PDLB_HOSTILE_PDLB, if set, names another pdlb binary to attack (another
// branch's build, say); the fakes are always this tree's.
//
// The suite is skipped unless PDLB_HOSTILE is "short" (CI: about a minute
// and a half) or "full" (the attacks at full size); `make hostile-short` and
// `make hostile` run it. The flags the defences add are listed in
// flags_test.go: a pdlb that lacks one runs without it, and the attack that
// needs it shows the failure the defence is for.
package hostile
