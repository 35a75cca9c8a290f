// Package lb is pdlb's front end: it accepts client requests and pairs one
// prefill and one decode worker for each generation, as SGLang's mini_lb
// does, and handles what mini_lb gets wrong when workers fail.
//
// A generate request (/generate, /v1/completions, /v1/chat/completions) is
// read in place, given bootstrap_host, bootstrap_port and a fresh random
// bootstrap_room by splicing bytes (package bootstrap), and sent to the
// chosen prefill and decode at the same time on pooled keep-alive
// connections. The client gets the decode's answer: a buffered response,
// or a stream relayed event by event and flushed as each event arrives.
// The two calls watch each other: when one fails, the other is cancelled
// at once by closing its connection, so a dead prefill never leaves a
// decode (or the client) waiting for the KV cache for minutes.
// Input-token logprobs and routed experts, which only the prefill
// computes, are merged into the decode's answer as mini_lb does (and,
// unlike mini_lb, into each item of a /generate batch).
//
// DP ranks, the bootstrap registry and the pair warm-up that works around
// SGLang's first-request bug are described in package bootstrap. The
// sockets and the HTTP/1.1 framing under fasthttp (worker legs with their
// deadlines and cancellation, client connections and their budget, the
// dialer, chunk framing) are package lb/wire's; the routing policies'
// algorithms (cache_aware's tree, the hash ring, manual's keys) package
// lb/policy's; the polls of the workers' reported loads package lb/load's.
// lb keeps the PD logic, that is pairing, the pools and their policies'
// inputs, retries, relay semantics, logprob merging, fallback, errors and
// metrics.
//
// # How a request flows
//
//  1. The body is read in place and checked to be a JSON object. Only what
//     routing needs (stream, logprob flags, batch size, DP-rank fields,
//     prompt size) is extracted, without decoding the body. A leading
//     UTF-8 byte-order mark is dropped, as Python's json.loads (the
//     workers', mini_lb's) accepts one. As json.loads does, the numbers
//     NaN, Infinity and -Infinity (which Python clients write for
//     float("inf")) are taken and passed on.
//  2. The mode is decided: PD, or decode-only (see Decode-only traffic).
//  3. A prefill and a decode are picked by their pools' policies (see
//     Routing), among the workers that have the DP rank the request names. The request is
//     placed on a prefill DP rank when it names one or
//     --prefill-dp-policy picks one; it then waits for its pair's
//     warm-up. A policy's request whose pair cannot be warmed, or whose
//     last warm-up failed, goes unplaced, as mini_lb sends it (counted in
//     pdlb_dp_policy_unplaced_total). A room is drawn, one per item of a
//     /generate batch, on that rank.
//  4. bootstrap_host, bootstrap_port and bootstrap_room are spliced into a
//     pooled buffer. Client values for them are removed; every other byte
//     is kept.
//  5. Both calls start at once, each on a pooled connection of its worker.
//     A call that fails (transport error or HTTP status ≥ 400) closes its
//     partner's connection at once, unless it is the prefill and the
//     decode's stream is already relayed (the decode has the KV cache
//     then, or has failed on its own).
//  6. Non-stream: the decode's status and body are returned, with the
//     prefill's logprobs merged when asked. Stream: pdlb waits for the
//     decode's first bytes (so an early failure is still a proper HTTP
//     error), then relays each event as one flushed chunk. A stream that
//     ends without [DONE] gets an SSE error event and [DONE].
//  7. Metrics and the access-log line are written when the response (or
//     the stream) really ends.
//
// # Routes
//
// The generate routes follow the flow above; per-item lists of bootstrap
// fields are written for /generate batches. The other routes:
//
//   - GET /health: 200, empty; no worker is contacted (mini_lb's meaning).
//   - GET /liveness: 200 while the process serves.
//   - GET /readiness: 200 when a prefill and a decode, or a fallback
//     worker, are known up; else 503 with each pool's count.
//   - GET /health_generate: asks every worker; 200 when all answer 200,
//     else 503 with each worker's status. One such round a second at most,
//     its answer shared by the callers meanwhile, so that no client can
//     make the workers generate at will.
//   - POST /flush_cache: an operator route. Asks every worker, forwarding
//     ?timeout= (0 to 3600 s; 400 otherwise). 200 when all succeed; the
//     workers' 4xx when those that failed all refused alike (SGLang
//     answers 400 while requests run); else 502; with each worker's
//     status.
//   - POST /abort_request: the newest mini_lb's. Sends the abort to every
//     worker, as a rid lives on one prefill and one decode, and answers as
//     /flush_cache does. A client may abort one request by its rid (the
//     workers get {"rid": ...} alone); anything else (abort_all, no rid)
//     is an operator route. A request it names is not tried again: a
//     decode aborted mid-transfer answers with a failed KV transfer, which
//     pdlb would otherwise retry on a fresh pair.
//   - GET /server_info, /get_server_info: mini_lb's aggregate: the
//     internal_states of every decode, and each worker's own answer under
//     prefill and decode (an {"error"} entry for one that cannot answer).
//     Secrets (api_key, admin_api_key, ssl_keyfile_password) are shown as
//     "<redacted>".
//   - GET /model_info, /get_model_info, /v1/models: the first prefill's
//     answer (the next prefill's if the first fails).
//   - GET /bootstrap: an operator route. What pdlb knows of each prefill's
//     bootstrap server (port and where it came from, dp_size and the rest
//     of its parallel info, every rank's address, readiness, last error),
//     and which decode × prefill pairs are warm.
//   - GET /metrics: Prometheus text (see Metrics).
//   - /workers: sglang_router's worker API (workerapi.go). POST a spec
//     (url; worker_type prefill, decode or regular: the fallback pool;
//     bootstrap_port; api_key); GET each worker's health, breaker, dp_size,
//     warmth, load, drain; GET, DELETE (drain) /workers/{worker_id}.
//
// The routes that ask workers give each 30 s to answer (/flush_cache its
// ?timeout= more), and skip a worker that health checks find down: its
// entry, or the error when no worker is left to ask, says so at once.
//
// Every error pdlb produces itself is JSON: {"error": {"message", "type",
// "code"}}, written by writeError with a reason from errors.go. Each
// response carries an X-Request-Id: the client's, taken from the headers
// --request-id-headers names when it is 1 to 128 printable ASCII characters,
// or a new one. It is also sent to both workers as their only X-Request-Id.
// A header whose name is not an RFC 9110 token ("X Evil:") gets a 400. A
// chunked body's trailer fields are dropped, never forwarded.
//
// A client that closes its connection while it waits, for a slot or for
// its answer, has both calls cancelled and is logged with status 499. If
// it named a rid, one /abort_request is sent to each worker (the rid, or
// a list's first), at most --max-aborts-per-second a worker. So is a
// client that only shuts its writing side after sending, as nginx counts
// it; it gets no answer.
//
// # Operator routes
//
// /flush_cache, /bootstrap, /abort_request without a single rid and the
// worker API act on every client's requests, so they are for operators.
// With --admin-api-key KEY they need "Authorization: Bearer KEY" on every
// listener (401 without it); the key also opens the client routes that
// --api-key guards. Without it they answer only on the --prometheus-port
// and --pprof-addr listeners, and to loopback clients not forwarded by a
// proxy (Forwarded, X-Forwarded-For, X-Real-Ip). Others get a 403 saying
// how to enable them. --mini-lb keeps mini_lb's open routes (not the worker
// API) when no admin key is set, with a warning at start. The admin
// listeners bind 0.0.0.0 unless --prometheus-host says otherwise: keep them
// private, or set the key. Behind a service mesh whose sidecar connects
// from loopback, set the key.
//
// # Differences from mini_lb
//
// What changes for clients is what mini_lb got wrong:
//
//   - The prefill answers with an error, or ends the request early (an
//     abort, or an error event in a 200 stream). mini_lb: the decode waits
//     for a KV cache that never comes, and the client hangs for up to
//     300 s. pdlb: the decode call is cancelled at once, and the client
//     gets the prefill's answer in milliseconds. A 5xx, or an abort without
//     a status as a prefill shutting down gives, is tried again first. For
//     a batch, the error names the item, as the prefill's answer holds one
//     token of the others.
//   - A prefill or decode is unreachable. mini_lb: 500, and the other
//     worker is left waiting. pdlb: the other call is cancelled and the
//     request goes to another worker; with none left, a 503 naming the
//     worker and what failed (a 502 with --disable-retries).
//   - A stream breaks mid-way. mini_lb: the stream just stops. pdlb: an SSE
//     {"error": ...} event, then data: [DONE].
//   - The body is not a JSON object. mini_lb: 422 (FastAPI validation).
//     pdlb: 400 with an OpenAI-style {"error": {...}}.
//   - An error pdlb answers itself: an unknown route, a wrong method,
//     /model_info or /v1/models that no prefill answers. mini_lb: FastAPI's
//     {"detail": ...}: 404 {"detail":"Not Found"}, 405 {"detail":"Method
//     Not Allowed"}; /model_info 502 for a worker's failed answer, 503 for
//     one it cannot reach; /v1/models 500 for either. pdlb: an OpenAI-style
//     {"error": {"message", "type", "code"}}: 404, 405 (naming the method
//     to use); on the info routes 502 for a worker's failed answer or one
//     pdlb cannot reach, 503 for one health checks find down (504 for one
//     that timed out).
//   - --api-key KEY with --mini-lb. mini_lb: ignored; clients need no key,
//     and the workers get none. pdlb: required of clients on the generate
//     routes, /flush_cache and /abort_request (401 without it), and sent
//     to every worker as "Authorization: Bearer KEY".
//   - /health_generate with a worker down. mini_lb: 200. pdlb: 503 with
//     every worker's status.
//   - /flush_cache, /bootstrap, /abort_request with abort_all. mini_lb:
//     open to every client. pdlb: open with --mini-lb, as mini_lb's;
//     otherwise operator routes.
//   - A huge body, a batch of millions of items, thousands of idle
//     connections. mini_lb: each may take the process down. pdlb: bounded
//     (see Hostile clients).
//   - Connections. mini_lb: a new one per request. pdlb: pooled keep-alive,
//     dropped after 4 s idle (below uvicorn's 5 s).
//   - A stream's decode answers an error before its first event. mini_lb:
//     200 text/event-stream, with the error JSON as the body. pdlb: the
//     decode's own status and JSON error.
//   - /flush_cache that a worker refuses (SGLang answers 400 while
//     requests run). mini_lb: 200. pdlb: the workers' 400, or 502 when one
//     failed otherwise, with each worker's status.
//   - The client's headers and query string. mini_lb: dropped; the
//     workers get mini_lb's own headers. pdlb: on the generate routes,
//     forwarded to both workers (an Authorization header reaches them),
//     except hop-by-hop headers and Accept-Encoding. On the info and
//     control routes, only the Authorization header (unless pdlb has
//     --api-key, whose key goes instead) and /flush_cache's ?timeout=. A
//     worker's 401 or 403 to the client's key is passed on by /v1/models,
//     /model_info and the fan-outs that pass refusals (/flush_cache,
//     /abort_request); /server_info shows it in the worker's entry.
//   - A /generate batch with return_logprob. mini_lb: streamed, every
//     item's events get the first item's prefill logprobs; not streamed,
//     no item gets any. pdlb: each item gets its own, by the events' index
//     when streamed.
//   - --prefill URL none. mini_lb: bootstrap_port null. pdlb: as with no
//     port: pdlb learns the port from /server_info and sends it, so the
//     decode need not guess.
//   - A worker URL with a path (http://gw/prefill-0, behind a
//     path-routing gateway). mini_lb: the route is appended to it. pdlb:
//     refused at start (status 2): pdlb keys each worker by host and port,
//     so give each its own.
//   - Limits. mini_lb: a 1800 s request timeout; uvicorn reads headers up
//     to about 16 KiB. pdlb: also 300 s to a stream's first byte and
//     between two events, a 256 MiB body (--max-payload-size), and 4 KiB
//     of request header (--max-header-size: every connection reading a
//     request holds a buffer that large, which at thousands of streams is
//     memory). Each is a flag.
//
// Not supported: the newest mini_lb's POST /pd_role_switch (404); move a
// worker between pools with DELETE and POST /workers instead.
//
// # Decode-only traffic
//
// An SGLang decode worker refuses every request without a bootstrap room
// (HTTP 400 "Disaggregated request received without bootstrap room id"):
// it has no decode-only path. Routers that send some traffic to the decode
// alone, as llm-d's decode-only paths do (a prefix-cache decider that
// finds remote prefill not worth it, nonCachedTokens: 0, or no prefill
// profile at all), fail every such request on SGLang. pdlb never sends a
// decode a request without a room. Traffic that should skip remote
// prefill goes to a fallback pool of aggregated SGLang workers (--fallback
// URL, repeatable, with its own --fallback-policy), forwarded exactly as
// the client sent it. A request is decode-only when:
//
//  1. No prefill, or no decode, is usable: every worker of the pool is
//     down or could not be reached for this request (pdlb tries the others
//     first). With no fallback configured, the client gets a 503 that names
//     the empty pool, why each of its workers is out (bootstrap server not
//     ready, failed health check, ejected; three at most) and what failed
//     for this request.
//  2. Its prompt is short: below --pd-min-prompt-tokens, estimated from
//     input_ids (or an OpenAI prompt of token ids), else one token per four
//     bytes of text, prompt or messages. Batches (an OpenAI list of prompts
//     too) always go PD. Without a fallback pool short prompts get a 503
//     (with --decode-local-prefill, those on the OpenAI routes), which pdlb
//     warns of at start.
//  3. The client asks for it with the header "X-PD-Mode: decode-only",
//     which is how an upstream router's decider (llm-d's EPP or sidecar)
//     tells pdlb its decision. "X-PD-Mode: pd" asks for PD, short prompt or
//     not; anything else is a 400.
//
// Each case is counted in pdlb_decode_only_total{reason} once a worker
// takes the request (a 503 for want of one is not counted there).
//
// With --decode-local-prefill, decode-only /generate requests go instead
// to a decode worker with "do_local_prefill": true and no bootstrap
// fields, which prefills them itself (SGLang PR #34773, an open draft,
// with the decode flag --disaggregation-decode-enable-conditional-agg).
// The OpenAI routes, which the draft does not cover, still use the
// fallback pool. A decode that refuses such a request lacks the feature:
// pdlb logs it once as a configuration error, turns local prefill off and
// uses the fallback pool, or, with none, answers a 502 that says what to
// fix, and a 503 saying the same to the decode-only requests after it.
// Should a decode ever refuse a PD request for lacking a room, pdlb
// answers a 502 explaining that something between pdlb and the decode
// rewrites bodies, instead of the puzzling 400.
//
// An llm-d style deployment puts pdlb behind the gateway as the PD stage:
// the EPP picks the pool, its decider sets X-PD-Mode, and pdlb pairs
// workers or sends the request to the aggregated pool:
//
//	pdlb --prefill http://prefill-0.prefill:30000 --prefill http://prefill-1.prefill:30000 \
//	     --decode http://decode-0.decode:30010 --decode http://decode-1.decode:30010 \
//	     --fallback http://agg-0.agg:30000 --pd-min-prompt-tokens 256 --port 8000
//
// # When workers fail
//
// Every worker is probed (GET /health, every 5 s, on a client separate
// from the request pools; package health). One that fails 3 probes in a
// row is taken out of selection until 2 succeed; transitions are logged
// once. Workers start unknown and are probed at once; until then they
// count as up. A prefill whose bootstrap server is not ready is out too:
// no KV transfer can go through it. Any failed probe but a timeout (or
// pdlb's own limit), and any refused or dropped connection, is taken for a
// sign that the worker may have restarted, even under the failure
// threshold: its idle connections are dropped and its pairs go cold until
// warmed again (restart.go).
//
// Real requests count as well. 5 consecutive failures (transport errors,
// timeouts, 5xx answers, a stream that broke off before or after its first
// event; never a 4xx, the client's fault; a request that fails again on a
// worker it failed on counts once) eject a worker for 1 s. The ejection
// doubles while its trial requests keep failing, up to 30 s. The log line
// names the failure that caused it. A failure that takes the last worker
// of its pool out, with no fallback to go to, is answered as it is, not
// retried into a 503.
//
// A request that fails before anything has reached the client is sent again
// with a fresh room to a fresh pair, avoiding the workers that failed it,
// until it has had --retry-max-retries attempts. Such failures are: a worker
// that cannot be reached, a connection reset, a 5xx from either leg, a
// stream whose first event is an error, and a prefill's 200 answer that a
// 5xx failure or an abort without a status ended (as a prefill shutting down
// answers). Both workers of the pair are avoided when the decode reports a
// failed KV transfer (KVTransferError: its prefill died or cannot be
// reached). There is no retry once the client has received bytes, nor after
// a 4xx (but for a refused DP rank, see package bootstrap). Out of attempts,
// a worker's failed answer goes to the client as it is, with a warning in
// the log naming its role, worker, status and request ID.
//
// A pooled connection that a worker dropped is detected on use, and the
// request is resent once on a new connection, so the first request after
// an idle period does not fail. One that tells the decode a prefill DP
// rank is not: the decode may have restarted, and the request waits for
// its pair's warm-up (another decode is tried if the new connection is
// refused). Pooled connections are also closed after
// 4 s idle, below the workers' 5 s keep-alive.
//
// When one leg fails or times out, the other is cancelled at once (its
// connection closed) and, when the client named the request with a rid,
// also aborted on its worker (POST /abort_request). When the client goes
// away, both legs are cancelled: within a second while pdlb waits for the
// answer or a stream's first event (it watches the client's connection
// meanwhile, however long the wait), and on the first failed write once a
// stream's events flow. A decode that fails mid-stream becomes an SSE
// error event and [DONE]. A prefill that fails once the decode's stream is
// relayed leaves it alone: the decode has its KV cache by then (its first
// event was tokens; it fails the request itself if it loses the prefill
// before, as SGLang's does), or has already failed and ends the stream
// with its own error event.
//
// Limits, each a flag: a new connection to a worker (5 s), a stream's
// first byte (300 s) and the silence between events (300 s), the whole
// request (1800 s; 504 beyond, a worker connection's deadline rounded up
// to 100 ms), the request body (413; a compressed one, with a
// Content-Encoding, is refused with 415), the request header (431),
// concurrent requests with a bounded wait queue (429 with Retry-After),
// and client reads (408 beyond) and writes (slow clients are let go). A
// client that stops reading is let go after --client-write-timeout-secs;
// its request counts as a 499 when its answer was cut off (a stream, or an
// answer over 16 KiB, which the sockets cannot take at once).
//
// `make soak` runs a minute of mixed traffic through pdlb while workers
// are killed and restarted at random, and reports requests sent, answered
// complete, answered with a clear error, lost and hung; the last two must
// be 0. It runs twice: with the workers in memory, then reached over
// loopback TCP, as in production. A recent run (20 s each, race detector
// on): 29,775 sent, 29,727 complete, 48 clear errors, 0 lost, 0 hung; over
// TCP 28,478 sent, 28,431 complete, 47 clear errors, 0 lost, 0 hung.
//
// # Hostile clients
//
// One client cannot take pdlb from the others (`make hostile` attacks it
// so while a steady load runs beside it; package bench/hostile):
//
//   - Memory. A body's buffer grows with the bytes that arrive, never with
//     its declared Content-Length, chunked or not, in time linear in its
//     size, its chunks' framing bounded by its data. The bodies held at
//     once (the clients', their copies for the workers, and the workers'
//     answers) stay within --max-body-memory: a request that would cross it
//     gets a 503 at once, one over --max-payload-size a 413, and the
//     connection is closed if the rest of its body is still on the wire. A
//     /generate batch of more than --max-batch-size items gets a 400.
//   - Descriptors. At most --max-connections client connections are open.
//     Past it, a new one takes the place of one that has sent nothing, else
//     of the one waiting longest for its client (its next request, or the
//     rest of one sent slowly), or gets a JSON 503 when every one is being
//     served. A connection idle for --client-idle-timeout-secs is closed. A
//     request answered without its body read closes its connection. A
//     worker call or probe that fails for pdlb's own lack of descriptors is
//     a 503 of pdlb's, never counted against the worker.
//   - Workers. A stream whose client stops reading is ended within
//     --client-stall-timeout-secs, its workers told to abort, so that it
//     holds no decode connection. A dropped request sends one
//     /abort_request a worker, within --max-aborts-per-second; beyond, the
//     worker sees the connection closed. Client bootstrap_* fields are
//     dropped in every spelling (keys compared as Python's json.loads reads
//     them), on every path.
//
// # Shutdown
//
// On SIGTERM or SIGINT pdlb stops accepting connections and lets requests
// and streams in flight finish for the grace period
// (--shutdown-grace-period-secs). Those still in flight when it ends are
// cut as a failing worker's would be: one not yet answering gets a 503 JSON
// error, a stream an SSE error event and data: [DONE]. Each is counted
// (pdlb_request_errors_total{reason="shutdown"}, a 503 in
// pdlb_requests_total) and access-logged, pdlb logs how many it cut, and
// their answers get up to 3 s more to be written. A client still not
// reading its answer then has its connection closed, and the request
// counts as a 499. A second SIGTERM or SIGINT during the drain exits at
// once; one within 250 ms of the first is the first delivered twice (GNU
// timeout signals its child and then the child's process group) and
// changes nothing. pdlb ends with a "stopped" log line and exits with
// status 0 when every request finished, 1 when some were cut.
//
// # Logs
//
// pdlb logs to standard error, one JSON object a line (--log-format
// console for people, coloured only on a terminal): level, time (RFC 3339,
// to the millisecond), component (lb, health or bootstrap, on the lines
// those write), message, and fields. At start it logs "pdlb starting" with
// its version, "serving" with the main listener's addr, and "serving
// admin" with the addr of each admin listener (--prometheus-port,
// --pprof-addr) and whether it serves profiles (pprof). A worker going
// down or ejected is a warning, and so are the requests workers fail:
// pdlb's own error answered for one, a stream broken off, a worker's
// failed answer (a 5xx) passed on as it is. Each names the request_id and
// the worker's backend (and the status of an answer passed on).
//
// With --access-log, each request ends with a "request" line: request_id,
// route, status, took (not known for a request pdlb could not read whole),
// the workers it went to (prefill and decode, or fallback, or decode alone),
// stream, and pdlb's error if it answered one. It covers pdlb's own refusals
// and the control routes, and is written at info level whatever --log-level.
//
// Durations are milliseconds, as numbers with a fraction: took (the
// request's time in pdlb, a stream's to its end), grace (the shutdown's
// grace period), retry_in (the pause after a failed accept). "took":2.5 is
// 2.5 ms.
//
// # Metrics
//
// GET /metrics serves the Prometheus text format (VictoriaMetrics/metrics,
// with # TYPE lines):
//
//   - pdlb_requests_total{route,code} and
//     pdlb_request_duration_seconds{route} (histogram): every request, by
//     route and status. The route is "other" for unknown paths, and
//     "unread" for requests fasthttp could not read (a 431 header, or a
//     body whose first 8 KiB stalled (408) or were cut off by its client
//     (499)), whose route fasthttp does not keep; such a request is logged
//     with an ID of pdlb's, and has no duration.
//   - pdlb_stream_first_byte_seconds{route}: time to the first streamed
//     byte.
//   - pdlb_request_errors_total{reason}: errors pdlb answered, saw or
//     passed on (a worker's 5xx is backend_failed), by reason:
//     invalid_request, body_too_large, not_found, method_not_allowed,
//     no_backend, backend_unreachable, backend_timeout, backend_failed,
//     stream_broken, client_gone, client_timeout, pair_not_warm,
//     decode_refused_no_room, overloaded, unauthorized, forbidden,
//     internal, shutdown, body_memory, out_of_resources, too_many_connections,
//     worker_removed (cut at a removed worker's drain timeout). A stream that
//     fails after its 200 headers is counted in pdlb_requests_total with the
//     status its error event carries (502; 504 when --request-timeout-secs or
//     --stream-idle-timeout-secs ran out; 503 when cut), and in stream_broken
//     (or shutdown, worker_removed).
//   - pdlb_backend_requests_total{role,backend},
//     pdlb_backend_errors_total{role,backend} (transport errors and 5xx),
//     pdlb_backend_inflight{role,backend}, pdlb_backend_up{role,backend} (1
//     when selectable), pdlb_backend_draining{role,backend} (1 while a
//     removed worker drains) and pdlb_backend_ejections_total{role,backend}
//     (circuit breaker).
//   - pdlb_retries_total, pdlb_abort_requests_total,
//     pdlb_abort_requests_dropped_total, pdlb_requests_queued,
//     pdlb_requests_admitted: retries, aborts sent to workers and held back
//     by --max-aborts-per-second, admission.
//   - pdlb_body_memory_bytes, pdlb_body_memory_limit_bytes: bodies held (the
//     clients', their copies, the workers' answers), and --max-body-memory.
//   - pdlb_client_connections, pdlb_client_connections_max,
//     pdlb_client_connections_evicted_total,
//     pdlb_client_connections_refused_total: client connections and
//     --max-connections.
//   - pdlb_bootstrap_ready{prefill}, pdlb_bootstrap_dp_size{prefill},
//     pdlb_bootstrap_refreshes_total{prefill},
//     pdlb_bootstrap_refresh_failures_total{prefill}: the bootstrap
//     registry.
//   - pdlb_warmups_total{result}, pdlb_warm_pairs,
//     pdlb_cold_pair_retries_total: pair warm-ups.
//   - pdlb_stale_dp_rank_retries_total: requests placed again after a
//     worker refused the DP rank pdlb's registry gave it.
//   - pdlb_dp_policy_unplaced_total: requests --prefill-dp-policy could not
//     place, their pair not being warm.
//   - pdlb_routing_decisions_total{role,policy,reason} (package policy's
//     picks), pdlb_cache_aware_match_ratio{role},
//     pdlb_cache_aware_tree_bytes{role,backend},
//     pdlb_backend_reported_load{role,backend} (NaN when unknown).
//   - pdlb_decode_only_total{reason}: requests that skipped remote prefill,
//     by why (no_prefill, no_decode, short_prompt, header): sent to a
//     fallback worker or a decode prefilling locally, not those that found
//     neither (a 503).
//   - The process metrics (process_resident_memory_bytes, ...).
//
// # Routing
//
// A pool picks by its policy: random (mini_lb's), round_robin,
// power_of_two and least_load (by load), or package policy's cache_aware,
// prefix_hash, consistent_hashing and manual (by the prompt, as
// bootstrap's Request.RoutingKey finds it, or X-SMG-Routing-Key). A
// worker's load is pdlb's requests in flight on it plus, where its reports
// are polled (package load), others' at the last report; prefix_hash's
// bound takes the in-flight count averaged over about a second. What
// cache_aware believes a worker holds is forgotten once its cache is known
// emptied (a restart's sign, a return from down, /flush_cache). Each
// routed pick is a "routed" line at debug level.
//
// # SGLang's source
//
// Comments that name a file of SGLang's source (tokenizer_manager.py,
// disaggregation/decode.py) mean the one under python/sglang/srt/ in
// github.com/sgl-project/sglang; those of sglang_router (mini_lb.py,
// router_args.py), the one under
// sgl-model-gateway/bindings/python/src/sglang_router/ there.
package lb
