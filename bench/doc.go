// Package bench is the load generator behind `pdlb bench`: it drives one
// OpenAI- or SGLang-style endpoint (pdlb, mini_lb, or a worker directly), or
// several in turn, and reports throughput and latency figures.
//
// The load is a closed loop by default: Config.Concurrency clients each send
// the next request as soon as the previous one ends, over one keep-alive
// connection each (after a failure to connect, 100 ms later, so that a dead
// target does not spin them). With Config.Rate it is an open loop instead: requests
// arrive as a Poisson process (exponential gaps drawn from Config.Seed) and
// each is sent at its arrival whatever the earlier ones are doing, up to
// Config.MaxInflight in flight; an arrival beyond is dropped and counted as
// a KindDropped error, so an overloaded target shows as errors rather than
// as a slower arrival rate. Arrivals follow their schedule, not the clock,
// so a seed always gives the same requests.
//
// Requests started (or arrived) during the warm-up are sent but left out of
// every figure. After it, a request is measured when it starts inside the
// measured window (Config.Duration, or until Config.Requests have started);
// the run waits for measured requests to finish, so the last ones are never
// cut short, and Report.Elapsed is the measured time the rates are taken
// over (its doc says how each loop measures it). Cancelling the context
// cuts requests in flight and drops them; what finished before is
// reported.
//
// Compare sends the same load to several targets, taking turns in rounds of
// at most Config.Round (A B A B ...), each round waiting for its requests
// to end before the next target's starts: noise on a shared machine then
// hits every target alike, and the figures are reported side by side with
// their ratio to the first target. Each target's Elapsed is the sum of its
// rounds'.
//
// Each generated prompt starts with its request number so that no two share
// a prefix: a server with a prefix cache (SGLang's radix cache) would
// otherwise skip the prefill of every request after the first and flatter
// the figures. Prompt length (in words) and output length are fixed or
// drawn per request from a Dist, as a function of the seed and the request
// number only, so a run is reproducible whatever the scheduling. Prompts
// can instead come from a JSON Lines file (ReadPrompts), sent verbatim and
// round robin. Generation asks for a fixed length (max tokens with
// ignore_eos), as SGLang's bench_serving does.
//
// Figures come from the answers as they arrive. A stream's events are
// timestamped when the read carrying their end returns; an event carries a
// token when it has text (every /generate chunk; an OpenAI chunk whose
// choice has non-empty text, content or reasoning_content), and only such
// events count for TTFT and inter-token latency, so a usage-only final chunk
// does not add a zero gap. An event that says how many tokens it brings
// (the growth of /generate's meta_info.completion_tokens, or of an OpenAI
// chunk's usage.completion_tokens) shares its gap among them, one
// inter-token sample per token, as SGLang's bench_serving does; other
// events bring one token. Events/s counts every event but [DONE] that
// arrived within the measured window, as Report.EventsPerSec says. When an
// event carries the sent_unix_nano stamp of the fake servers (bench/fake),
// its arrival time minus that stamp is its event lag: the delay the path
// from the server adds (a load balancer's relay included), meaningful only
// when bench and server share one machine's clock. Output tokens are what
// the server says it generated: meta_info.completion_tokens on /generate
// (len(output_ids) when absent), usage.completion_tokens on OpenAI routes
// (streams ask for it with stream_options.include_usage); a stream that
// never says counts one token per token-carrying event. Percentiles are
// exact (nearest rank over every sample), as samples are few: one duration
// per request and per event.
//
// The generator shares its machine with the system under test, so it is
// built to be cheap: request bodies are assembled by appending to a
// per-client buffer from pre-built pieces, answers are parsed with a reused
// fastjson parser, and stream events are split in a reused buffer.
package bench
