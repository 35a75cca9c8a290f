// Package bench is the load generator behind `pdlb bench`: it drives one
// OpenAI- or SGLang-style endpoint (pdlb, mini_lb, or a worker directly) and
// reports throughput and latency figures.
//
// The load is a closed loop: Config.Concurrency clients each send the next
// request as soon as the previous one ends, over one keep-alive connection
// each. Requests started during the warm-up are sent but left out of every
// figure. After it, a request is measured when it starts inside the measured
// window (Config.Duration, or until Config.Requests have started); the run
// waits for measured requests to finish, so the last ones are never cut
// short, and Report.Elapsed runs from the end of the warm-up to the end of
// the last measured request. Cancelling the context cuts requests in flight
// and drops them; what finished before is reported.
//
// Each prompt starts with its request number so that no two share a prefix:
// a server with a prefix cache (SGLang's radix cache) would otherwise skip
// the prefill of every request after the first and flatter the figures.
// Generation asks for a fixed length (max tokens with ignore_eos), as
// SGLang's bench_serving does.
//
// Figures come from the answers as they arrive. A stream's events are
// timestamped when the read carrying their end returns; an event carries a
// token when it has text (every /generate chunk; an OpenAI chunk whose
// choice has non-empty text, content or reasoning_content), and only such
// events count for TTFT and inter-token latency, so a usage-only final chunk
// does not add a zero gap. Output tokens are what the server says it
// generated: meta_info.completion_tokens on /generate (len(output_ids) when
// absent), usage.completion_tokens on OpenAI routes (streams ask for it with
// stream_options.include_usage); a stream that never says counts one token
// per token-carrying event. Percentiles are exact (nearest rank over every
// sample), as samples are few: one duration per request and per event.
//
// The generator shares its machine with the system under test, so it is
// built to be cheap: request bodies are assembled by appending to a
// per-client buffer from pre-built pieces, answers are parsed with a reused
// fastjson parser, and stream events are split in a reused buffer.
package bench
