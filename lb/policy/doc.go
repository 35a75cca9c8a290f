// Package policy holds the algorithms of pdlb's routing policies: given a
// request's key and the loads of one pool's workers, which worker takes
// the request, and why. It is pure and fast: no HTTP, no I/O, no timers,
// and no knowledge of lb's Backend. Workers are the indexes 0..n-1 of the
// caller's pool; the caller gives their loads and which are usable (Pool),
// names them with stable strings where a policy must agree across
// processes (Ring) or survive renumbering (Manual), and runs the periodic
// evictions on its own ticker. Every pick returns a Choice: the worker, a
// Reason from a closed set (for metrics and the debug access line), and
// cache_aware's match ratio.
//
// The policies follow sglang_router's (SGLang Model Gateway, SMG; its
// sources are policies/*.rs under model_gateway/src in lightseekorg/smg,
// formerly sgl-model-gateway/src in sgl-project/sglang):
//
// cache_aware (CacheAware; SMG cache_aware.rs, the tree in
// kv_index/src/string_tree.rs): one approximate radix tree per pool and
// key unit (text bytes, or token ids 4 bytes each), each node knowing
// which workers were sent it and when. When the usable workers' loads are
// imbalanced (max−min > BalanceAbsThreshold and max > BalanceRelThreshold
// × min) the least loaded wins (imbalance); else the worker with the
// longest match wins if it covers more than CacheThreshold of the key
// (prefix_match); else the worker holding the fewest bytes
// (smallest_tree). The winner's key is inserted in every case. Evict
// trims each worker's bytes to MaxTreeSize, least recently used leaves
// first. Defaults are those of sglang_router's launcher (router_args.py):
// threshold 0.3, 64 and 1.5, eviction every 60 s, 2^26 bytes. Where SMG's
// code differs from its own documentation, this follows the rule:
// SMG's current code sends a low match to the least loaded worker, not
// the smallest tree, and lets its match land on a worker that is not
// usable, which then falls to the first healthy one; here matches count
// only usable workers. Ties go to the lower load, then the fewer picks
// (SMG's order), then the lower index.
//
// prefix_hash (PrefixHash; SMG prefix_hash.rs): the key's first 256
// tokens (1,024 bytes: 4 bytes a token id, or 4 characters of text a
// token) are hashed onto a Ring of 150 points per worker; a worker above
// 1.25 × (sum of loads + 1) / n is passed over for the next distinct
// worker clockwise (hash_overload). SMG's code takes the least loaded
// worker within the bound instead, and works on token ids only.
//
// consistent_hashing (ConsistentHash; SMG consistent_hashing.rs):
// X-SMG-Target-Worker names the worker by index (and fails when it is not
// usable), else X-SMG-Routing-Key goes to its owner on the Ring (no load
// bound), else a random usable worker.
//
// manual (Manual; SMG manual.rs): a routing key sticks to the worker it
// was first given, moving only when that worker is not usable, and
// returning to it when it is again; new keys are placed at random, by
// least load or by fewest keys; idle keys are forgotten after MaxIdle.
package policy
