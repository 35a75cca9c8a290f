// Package fake implements fake SGLang servers for prefill/decode (PD)
// disaggregated serving: the backends every pdlb test, the demo and the
// benchmarks run against.
//
// A Server plays one Role. A prefill serves the HTTP API and, beside it, a
// bootstrap server (SGLang's disaggregation/common/conn.py). A decode serves
// the HTTP API and only finishes a request once the prefill named by the
// request's bootstrap_host and bootstrap_port has served the same
// bootstrap_room: the two legs meet in a rendezvous keyed by (bootstrap
// address, room, prefill DP rank), each side waiting at most
// Config.KVTimeout. So a load balancer that injects mismatched fields, or
// sends only one leg, gets the same SGLang-shaped failures a real KV transfer
// would give. An aggregated server needs no prefill and ignores bootstrap
// fields.
//
// With Config.DPSize > 1 a server has that many data-parallel ranks, as
// SGLang with --enable-dp-attention (see package bootstrap's documentation,
// DP ranks): each item goes to its routed_dp_rank, else a prefill follows
// bootstrap_room % DPSize and the other roles take turns. A prefill refuses
// a routed rank that contradicts the room unless disagg_prefill_dp_rank is
// given (SGLang's follow_bootstrap_room conflict), and each decode rank
// resolves the prefill DP rank with a prefill info cache of its own;
// Config.FirstRequestBug brings back the bug SGLang PR #22990 fixed in that
// resolution. So DP fields a real deployment would reject fail here too.
//
// A decode polls GET /health on the bootstrap server of every prefill whose
// info it caches, every Config.HeartbeatInterval (5 s), and after
// Config.HeartbeatMaxFailures (2) failures in a row forgets that info and
// fails the items still waiting for that prefill's KV with SGLang's "Lost
// connection with prefill instance" (heartbeat.go). Only then does it see a
// prefill restarted with another DP size: one back sooner keeps its stale
// info, as in SGLang.
//
// With Config.ConditionalAgg a decode stands for SGLang's draft PR #34773
// (decode flag --disaggregation-decode-enable-conditional-agg): a /generate
// item marked "do_local_prefill": true is prefilled by the decode itself and
// answered as an aggregated server answers, with no KV transfer and no room
// needed (local.go). Without the flag, and on the other roles and routes,
// the field is ignored.
//
// Servers are connected by a Network: in memory for tests
// (fasthttputil.InmemoryListener per address, no ports) or over TCP. The
// Network also keeps an in-process registry of prefills by bootstrap address,
// so a decode meets a prefill of the same process through channels; a prefill
// in another process is reached over HTTP through its bootstrap server's
// fake-only POST /fake/kv_transfer.
//
// A performance model (model.go), off unless its Config fields are set
// (`pdlb fake --cache-tokens --max-prefills --prefill-token-delay
// --batch-token-delay --max-total-tokens --page-size`), lets routing be
// measured on a simulated cluster; each DP rank stands for one SGLang
// scheduler:
//
//   - A prefill (or an aggregated server) keeps a prefix cache of
//     Config.CacheTokens tokens (cache.go): an LRU of chained hashes of
//     blocks of Config.PageSize tokens (SGLang's --page-size, 1 by
//     default, as SGLang's), so a block matches only with its whole prefix.
//     Its tokens (tokens.go) are input_ids as given, else 4-byte pieces of
//     the text (the pieces of a prefix are the first pieces of the text);
//     a chat prompt is its messages' text in order, without roles, so chats
//     that share a system prompt share its blocks. A match leaves at least
//     one token to compute, as SGLang's does.
//   - It computes at most Config.MaxPrefills prompts at once; the others
//     queue. A prompt takes PrefillDelay + uncached tokens ×
//     PrefillTokenDelay.
//   - A decode (or an aggregated server) takes TokenDelay + (batch − 1) ×
//     BatchTokenDelay per token step, batch being the items generating on
//     its rank when the step starts, and holds at most
//     Config.MaxTotalTokens KV tokens (each item its prompt plus its max
//     tokens, from its arrival on a decode); items beyond wait.
//
// Answers report the cache as SGLang's do: meta_info.cached_tokens (with
// prompt_tokens) on /generate, in every stream event; on the OpenAI routes
// usage.prompt_tokens_details {"cached_tokens": N} with
// Config.CacheReport (SGLang's --enable-cache-report) and N > 0, else null.
// In PD the prefill hands its cached count over with the KV, and the decode
// reports it as its own, as SGLang's decode copies it from the transfer's
// metadata (disaggregation/decode.py, _commit_transfer_to_req), so a
// client of the cluster sees the prefill's hit. Every server reports its
// load on GET /v1/loads and GET /get_load, in SGLang's shapes (loads.go).
//
// Output is deterministic so tests can check bodies: generated token k has
// id k and text " tok<k>"; prompt token j has the id given in input_ids, else
// j. A prompt counts len(input_ids) tokens, or ceil(bytes/4) (at least 1) of
// its text, or of all message text on /v1/chat/completions. Logprobs, asked
// with return_logprob on /generate, are -0.1 to -1.0 by position; a decode
// reports input_token_logprobs for the last prompt token only (unless it
// prefilled the item itself), so a load balancer's merge with the prefill's
// full list is visible.
//
// Every stream event carries one field SGLang does not send:
// "sent_unix_nano", the wall-clock time (Unix nanoseconds) at which the event
// was built, just before it was written. It sits inside meta_info on
// /generate chunks and at the top level of OpenAI chunks, and lets `pdlb
// bench` measure how late each event reaches it (its event lag), which means
// something only when both share one clock, on one machine. Non-stream
// answers have no such field.
//
// /abort_request, and Close, end a request with a finish_reason of type
// "abort" (no status code, HTTP 200); a failed KV transfer ends it with
// SGLang's 500 (a chunk with status_code 500 inside a /generate stream, an
// SSE error event inside an OpenAI stream).
//
// Tests can make a running server fail on command (fault.go): SetFault
// refuses connections, answers generate requests with a 5xx, holds them
// before their first byte, cuts or stalls streams after some events, each
// until the fault is replaced; SetBootstrapDown takes a prefill's bootstrap
// server away; CloseIdleConnections drops idle keep-alive connections as
// SGLang's 5 s keep-alive would, without the wait. Whatever the fault, a
// generate request whose client closes its connection is aborted at once,
// as SGLang aborts one whose HTTP client disconnected (watch.go), and
// counted in Stats.ClientGone, so a test sees a load balancer's
// cancellation reach the worker.
//
// A fake in another process (`pdlb fake`) can serve its counters as JSON on
// GET /fake/stats (Config.StatsRoute) and count the requests that carry a
// string a test planted where a load balancer must not pass it on
// (Config.Canary, inspect.go); the hostile-client suite (bench/hostile)
// reads both. Both are off unless asked for.
//
// Bodies are read as SGLang's Python reads them: of duplicate keys in a
// JSON object, the last wins, at any depth (jsonr.go); Infinity is a
// number; "stream": "false" is no stream, as pydantic reads a boolean. With
// Config.APIKey (`pdlb fake --api-key`), every route but /health* and
// /metrics needs "Authorization: Bearer KEY", as SGLang's --api-key; others
// get 401 {"error": "Unauthorized"}.
//
// `pdlb fake` runs these servers as a command: servers of one command meet
// in memory, servers of separate commands over HTTP. `pdlb fake --help`
// lists its flags.
//
// Comments that name a file of SGLang's source (disaggregation/decode.py,
// entrypoints/http_server.py) mean the one under python/sglang/srt/ in
// github.com/sgl-project/sglang.
//
// The hot path parses with pooled fastjson parsers and writes JSON by
// appending bytes, so the fakes are not the bottleneck of a benchmark.
package fake
