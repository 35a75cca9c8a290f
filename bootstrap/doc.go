// Package bootstrap speaks SGLang's prefill/decode bootstrap protocol (in
// SGLang's source: python/sglang/srt/disaggregation/, the bootstrap server
// in common/conn.py, the decode in decode.py). It has two halves.
//
// The request half reads what routing needs from a client body and writes
// the bootstrap_host, bootstrap_port and bootstrap_room fields (and the
// DP-rank fields) that link one prefill worker and one decode worker to the
// same KV transfer. It is pure: bytes in, bytes out, no I/O and no package
// state, so every function is safe for concurrent use. Bodies are
// never decoded into maps: Parse scans the top-level members in place and
// Append splices the new members into a copy of the body, so every byte the
// client sent (number spellings, escapes, whitespace, member order) reaches
// the workers unchanged, and a typical request costs no allocations. Keys
// are compared as the workers' json.loads decodes them, the last duplicate
// winning, so that a client cannot show pdlb one request and the workers
// another; the fields that steer a KV transfer are pdlb's alone, which
// Append writes and Strip removes, under any spelling of the client's.
//
// A typical request path:
//
//	req, err := bootstrap.Parse(body) // 400 on error
//	rooms := []uint64{bootstrap.NewRoom()}
//	f := bootstrap.Fields{Host: host, Port: port, Rooms: rooms} // host from bootstrap.Host
//	buf, err = bootstrap.Append(buf[:0], body, f)
//
// The registry half talks to the prefills' bootstrap servers: Client reads
// one server's parallel info (dp_size, attn_tp_size, ...) and rank
// addresses in either API version, and Registry follows every prefill,
// learning its bootstrap port, refreshing what it knows, and publishing
// immutable States that the request path reads without a lock.
//
// # The registry
//
// For each prefill, the Registry learns the bootstrap port: the command
// line's, else disaggregation_bootstrap_port from the prefill's
// /server_info, else 8998. It then reads the bootstrap server's parallel
// info (dp_size, attn_tp_size, pp_size, page_size, follow_bootstrap_room;
// both the current and the pre-2026-02 /route API) and the address of
// every rank. It retries while the prefill says it is not fully
// registered, and marks a prefill whose bootstrap server cannot be reached
// as not ready. It re-reads ready ones every 5 s, and one at once when a
// decode's KV transfer from it failed, when a health probe of the prefill
// failed, and on each probe it answers after until it is back in
// selection. So a prefill that comes back or changes (its bootstrap port
// too) is noticed. Until its first read ends,
// a prefill counts as up, so that pdlb serves at once; but a request goes
// to one whose server has answered when there is one (a server that hangs
// would hold the KV transfer). The request path only reads the cached
// result. pdlb shows the registry on GET /bootstrap and in the
// pdlb_bootstrap_* metrics. Prefills join it and leave it at run time
// (Registry.Add and Remove): one that joins is read at once.
//
// # DP ranks and the first-request bug
//
// SGLang decodes between 2026-03-18 and PR #22990 fail every request that
// carries disagg_prefill_dp_rank ("Prefill server … is healthy before, but
// now it is down") until a request without it has made the decode cache
// the prefill's parallel info, and each decode DP rank has a cache of its
// own. So pdlb (package lb, warm.go) warms every decode × prefill pair:
// once a prefill is ready, it sends one one-token generation without any
// DP hint through the pair, once per decode DP rank. A pair is warmed
// again when its prefill comes back or changes. A worker may also restart
// faster than its health checks' failure threshold, and come back with
// empty caches; so any sign of a restart (a failed probe other than a
// timeout, a refused or dropped connection) makes its pairs cold at once,
// and the first probe it answers after warms them, without waiting for a
// request (package lb, restart.go). A pair whose warm-up failed is tried
// again 30 s later. A request that tells a decode a prefill DP rank
// waits for its pair to be warm (one warm-up per pair, shared by the
// requests that wait; a 503 after --warmup-timeout-secs). It goes to a
// prefill whose bootstrap server is known ready when there is one. Should
// a decode still answer with that failure (it restarted unseen), pdlb
// warms the pair and sends the request again, once, before anything
// reached the client. --no-prewarm turns all of this off.
//
// DP-rank fields are handled one consistent way:
//
//   - A request that names a DP rank (disagg_prefill_dp_rank,
//     routed_dp_rank or data_parallel_rank, X-Data-Parallel-Rank) goes only
//     to workers that have it, by their pool's policy: the prefill must
//     have the rank it will be sent, the decode the client's
//     routed_dp_rank. A prefill's dp_size is the registry's (unknown while
//     the prefill is down: it may come back with other ranks). A decode's
//     is learned when its pairs are warmed. An unknown one counts as having
//     every rank. pdlb answers 400, naming the largest dp_size, only when
//     no worker of the pool has the rank (for decodes, after reading again,
//     at most once a second, those it knows to lack it: one may have
//     restarted with more ranks). When those that have it are down, the
//     request is treated as if no worker were available. (SGLang never
//     checks disagg_prefill_dp_rank and fails late in the KV handshake.) A
//     rank is read as SGLang's pydantic models read an integer: "2", "2.0",
//     2.0 and true (1) are ranks too. A list of ranks gets a 400: SGLang
//     takes one rank per request, batches included. So does anything else
//     that is not an integer.
//   - A prefill DP rank p, the client's or the one --prefill-dp-policy
//     picks, reaches the prefill as routed_dp_rank = disagg_prefill_dp_rank
//     = p, and the decode as disagg_prefill_dp_rank = p (the client's
//     routed_dp_rank, if any, stays the decode's own). The room is drawn so
//     that room % dp_size == p, which keeps SGLang's follow_bootstrap_room
//     placement in agreement.
//   - A client's routed_dp_rank alone, on a prefill with dp_size > 1, is
//     such a rank p too. It reaches both workers as with mini_lb, with the
//     room drawn to match it and disagg_prefill_dp_rank = p added, so that
//     the prefill finds no "follow_bootstrap_room conflict" even for the
//     items of a prompt list or n > 1 samples, whose rooms are room + i.
//     Without a warm pair (such a request does not wait for one), or with
//     --no-prewarm, only the room is matched, which is right for one item.
//   - On the OpenAI routes, an X-Data-Parallel-Rank header is SGLang's
//     routed_dp_rank, over the body's. pdlb plans with it the same way,
//     forwards it, rewrites it on the prefill's request to the rank pdlb
//     picked when it picks one, and answers 400 to one that is not an
//     integer.
//
// When a worker refuses the DP rank pdlb sent it ("routed_dp_rank=R out of
// range"), as a prefill restarted with fewer ranks does until the
// registry's next read, pdlb reads the worker again: the registry entry
// (once for all the requests refused at once), or the decode's
// /server_info. It then places the request anew, once, before anything
// reached the client, even with --disable-retries.
//
// scripts/repro-mini-lb.sh reproduces the original report: fake workers
// with 4 DP ranks and the bug, pdlb on mini_lb's command line, and the
// report's curl as the very first request (200). PDLB_ARGS=--no-prewarm
// shows mini_lb's 500.
package bootstrap
