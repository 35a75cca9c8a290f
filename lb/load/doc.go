// Package load reads the load that each SGLang worker reports, so that the
// load-aware policies (power_of_two, least_load, and least_inflight among
// a prefill's DP ranks) compare the workers' own numbers rather than only
// pdlb's count of requests in flight. A Poller asks every worker at once,
// every Interval, within Timeout, on its own small fasthttp client, and
// publishes an immutable Snapshot per worker behind an atomic pointer:
// the request path reads it with Get, lock-free, and never waits for a
// worker. A worker that answers neither route, errs, or sends what cannot
// be read has an unknown load (its Snapshot says why, and since when),
// and the caller falls back to its own in-flight counts; so does a rank
// that left a count out. The package imports no other pdlb package: its
// owner (package lb) runs Run until shutdown, calls Add and Remove as
// workers come and go, and reads Get when it picks.
//
// The two routes it reads (SGLang, github.com/sgl-project/sglang):
//
//   - GET /v1/loads?include=core (python/sglang/srt/entrypoints/v1_loads.py):
//     {"timestamp", "version", "accelerator", "num_accelerators",
//     "loads": [...]}, one object per DP rank, the fields of LoadSnapshot
//     (python/sglang/srt/managers/load_snapshot.py): dp_rank,
//     num_running_reqs, num_waiting_reqs, num_used_tokens,
//     num_total_tokens (used plus the tokens of queued requests, computed
//     by the scheduler's load inquirer), max_total_num_tokens,
//     token_usage, ... Older versions had a top-level "aggregate" object
//     instead, which pdlb does not read (SGLang PR #28634).
//   - GET /get_load (python/sglang/srt/entrypoints/http_server.py),
//     deprecated, and all that older workers have: a list of {"dp_rank",
//     "num_reqs" (running + waiting), "num_waiting_reqs", "num_tokens"},
//     plus "num_pending_tokens" and "ts_tic" in the newest shim. It is
//     asked when /v1/loads answers 404; a worker found there is asked
//     /v1/loads again every Recheck, in case it was upgraded.
//
// A count that is missing, null, not a number or negative is Unknown,
// never a load: SGLang's own router read every worker's load as -1 after
// /v1/loads changed shape, and -1 made a broken worker look the least
// loaded (PRs #28634 and #32070). Snapshot.Load and Snapshot.RankLoad say
// false rather than return such a number.
package load
