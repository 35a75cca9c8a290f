// Package serve is `pdlb serve`, pdlb's default command: the load
// balancer's command line, which is sglang_router's (`python -m
// sglang_router.launch_router --mini-lb`), turned into an lb.Config; and
// the process around lb.Server: its listeners, its garbage collector and
// memory limit, and its drain on SIGINT or SIGTERM. The load balancer
// itself is package lb (`go doc pdlb/lb`).
//
// `pdlb [serve]` runs the load balancer; `serve` is the default command, so
// mini_lb's line needs none. `pdlb serve --help` (or `pdlb help serve`)
// lists its flags by group.
//
// # The mini_lb command line
//
// Replace `python -m sglang_router.launch_router` with `pdlb`; nothing else
// changes:
//
//	pdlb --mini-lb --pd-disaggregation \
//	     --prefill http://10.0.0.1:30000 8998 --prefill http://10.0.0.2:30000 \
//	     --decode http://10.0.0.3:30010 --host 0.0.0.0 --port 8000
//
// What pdlb accepts and refuses on that line:
//
//   - --prefill URL [PORT] repeats. The optional second token is the
//     bootstrap port (1 to 65535) or none. A token after the URL that is
//     not a flag (-1 included, a number to argparse) is taken for the
//     port, so a bad one is a usage error naming the prefill and the port,
//     as sglang_router's "Invalid bootstrap port" is. With no port, pdlb
//     reads the worker's disaggregation_bootstrap_port from its
//     /server_info and sends null (mini_lb's behaviour) until it knows it.
//   - A worker listed twice (the same host:port, whatever the scheme, a
//     trailing slash or a default port spelled out), or in two pools, is a
//     usage error.
//   - Other sglang_router flags that scripts pass (--policy cache_aware,
//     --health-check-interval-secs 3600, --dp-aware, ...) are accepted.
//     Flags pdlb implements are honoured; the others are dropped with a
//     warning in the log, as mini_lb ignores them, but for those below.
//   - sglang_router's TLS and authentication flags ask for what pdlb does
//     not do: serve HTTPS (--tls-cert-path, --tls-key-path), present a
//     client certificate to the workers (--client-cert-path,
//     --client-key-path), take CA files for them (--ca-cert-paths), check
//     control-plane API keys or JWTs (--control-plane-api-keys, --jwt-*),
//     keep an audit log (--control-plane-audit-enabled). mini_lb ignores
//     them, and so does pdlb with --mini-lb, warning that it serves plain
//     HTTP with no authentication but --api-key's, as mini_lb does. Without
//     --mini-lb the line is one for sglang_router's own router, which does
//     them, and they are usage errors saying what to do instead: terminate
//     TLS in front of pdlb (nginx, Envoy, a service mesh); originate mTLS
//     to the workers in a sidecar or service mesh; name CAs with the
//     SSL_CERT_FILE or SSL_CERT_DIR environment variable (pdlb verifies
//     https:// workers against the system's CAs); use --api-key, or
//     authenticate clients in front of pdlb; use --access-log.
//   - The sglang_router flags pdlb knows are those of current sglang_router
//     (its launcher's router_args.py, in
//     sgl-model-gateway/bindings/python/src/sglang_router/, when pdlb was
//     written; no release is pinned). A flag that is neither one of them
//     nor pdlb's own is a usage error, older sglang_router flags since
//     removed included. Write --pd-disaggregation for --pd-disaggregated,
//     --log-level debug for --verbose, --eviction-interval-secs for
//     --eviction-interval, and for the old `python -m
//     sglang.srt.disaggregation.mini_lb` line's --prefill-bootstrap-ports,
//     one --prefill URL PORT per prefill.
//   - A usage error (an unknown flag, a bad value, a worker URL that is none) exits
//     with status 2, as mini_lb's argparse does; a failure at run time (a
//     port in use) with status 1.
//
// What changes for clients is listed in package lb's documentation
// ("Differences from mini_lb").
//
// # Environment
//
// Every flag of serve can be set from the environment as PDLB_<FLAG>:
// --request-timeout-secs is PDLB_REQUEST_TIMEOUT_SECS. PDLB_PREFILL takes
// URL [PORT] entries separated by commas; PDLB_DECODE, PDLB_FALLBACK and
// PDLB_REQUEST_ID_HEADERS take comma-separated lists, spaces after the
// commas allowed. The tools' variables are PDLB_<COMMAND>_<FLAG>
// (PDLB_FAKE_DECODE, PDLB_BENCH_RATE, PDLB_RELAY_TO, PDLB_PAIR_LISTEN);
// their repeatable flags take comma-separated lists there. --help and
// --version are not read from the environment (a PDLB_VERSION label is
// left alone).
//
// Go's own variables apply too. pdlb runs its garbage collector at GOGC=50
// unless GOGC is set (see package bench's measurements), with a soft
// memory limit of --max-body-memory and 512 MiB unless GOMEMLIMIT is set.
//
// # Flags beyond their help
//
// `pdlb serve --help` describes every flag. What it does not say:
//
//   - --host: an IPv4 address, 0.0.0.0 included, listens on IPv4 only, as
//     uvicorn does; :: listens on both.
//   - --api-key is also sent on the warm-up requests, health probes and
//     info routes; the health, info and metrics routes stay open to
//     clients without it. --admin-api-key must differ from it.
//   - --warmup-timeout-secs: a request whose pair is not warm by then gets
//     a 503.
//   - --request-timeout-secs: 504 when exceeded; a worker connection's
//     deadline is rounded up to 100 ms.
//   - --client-read-timeout-secs: 408 beyond.
//   - --max-connections: the derived bound is logged at start.
//   - --max-header-size: 431 beyond; 1024 at least.
//   - --max-payload-size: more than 0, as there is no "no limit".
//   - --max-batch-size is 4096 by default because SGLang runs at most 4,096
//     requests at once.
//   - --prometheus-port is off by default, as mini_lb served no metrics;
//     sglang_router's own router defaults to 29000.
//   - --log-level: sglang_router's warning and critical are warn and
//     error. --access-log lines are written at any level.
//   - --log-format json writes times to the millisecond; console is
//     coloured only on a terminal.
//   - --pd-disaggregation and --json-log are accepted for compatibility,
//     with no effect.
package serve
