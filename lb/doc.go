// Package lb is pdlb's front end: it accepts client requests and pairs one
// prefill and one decode worker for each generation, as SGLang's mini_lb does.
//
// A generate request (/generate, /v1/completions, /v1/chat/completions) is
// read in place, given bootstrap_host, bootstrap_port and a fresh random
// bootstrap_room by splicing bytes (package bootstrap), and sent to the chosen
// prefill and decode at the same time on pooled keep-alive connections. The
// client gets the decode's answer: a buffered response, or a stream relayed
// event by event and flushed as each event arrives. The two calls watch each
// other: when one fails, the other is cancelled at once by closing its
// connection, so a dead prefill never leaves a decode (or the client) waiting
// for the KV cache for minutes. Input-token logprobs, which only the prefill
// computes, are merged into the decode's answer as mini_lb does.
//
// The other routes mirror mini_lb: /health, /health_generate, /flush_cache,
// /abort_request, /server_info, /model_info, /v1/models, plus /metrics in
// Prometheus format.
package lb
