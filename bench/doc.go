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
//
// # The generated-shared-prefix workload
//
// Config.SharedPrefix (`--workload generated-shared-prefix` and the --gsp-*
// flags) sends SGLang bench_serving's workload of that name, with its
// parameters and defaults (python/sglang/benchmark/args.py and
// datasets/generated_shared_prefix.py): 64 groups of 16 requests, each
// prompt a group's 2,048-word system prompt, "\n\n", and a 128-word
// question of its own, asking for 256 tokens with ignore_eos, as
// bench_serving's clients ask on every route. Lengths are exact, or drawn
// per group (system prompt) and per request (question, output) from
// max(int(len × ratio), 1) to len with --gsp-range-ratio below 1, as
// bench_serving's compute_random_lens draws them. The requests are
// shuffled by --seed unless --gsp-ordered, so a run repeats exactly; each
// is sent once, and the run ends when all are answered (or at --duration;
// with --compare, each target gets the whole workload in its turns within
// --duration, 10 s unless set). --gsp-send-routing-key adds one
// X-SMG-Routing-Key header a group, which sglang_router's
// consistent_hashing and manual policies route by (bench_serving's keys
// carry a random run id and the time; these, gsp-SEED-GROUP, repeat). On
// /generate the prompt is "text", on /v1/completions "prompt"; on
// /v1/chat/completions the system prompt is a system message and the
// question a user message (bench_serving sends the whole prompt as one
// user message), so a router must read the whole conversation, not its
// first message, to tell the requests of a group apart.
//
// Words stand for tokens: bench_serving decodes random token ids of the
// model's vocabulary, which needs the model's tokenizer; pdlb bench draws
// common English words instead (the vocabulary of the generated prompts),
// each one token to the fake workers, which split text at white space, and
// about one to a real BPE tokenizer (a common word with the space before
// it). The "\n\n" is white space to the fakes and one token to a real
// tokenizer, which also adds its chat template and special tokens. Two
// questions of a group may start with the same word (1 in 64): a prefix
// cache then finds one token more than the system prompt, about 5 in
// 100,000 of the prompt tokens with the defaults.
//
// The report adds the prefix cache's hit rate, from what the answers say:
// the sum of meta_info.cached_tokens over that of meta_info.prompt_tokens
// on /generate, of usage.prompt_tokens_details.cached_tokens over
// usage.prompt_tokens on the OpenAI routes (SGLang reports them there when
// started with --enable-cache-report), from the last stream event that
// carries them; with any workload whose answers carry them. For this
// workload it also gives the best hit rate any router could reach: of each
// group's requests, every one after the first finds its system prompt's
// tokens cached, so best = Σ_groups (prompts a group - 1) × system prompt
// length / Σ_requests (system prompt length + question length), 15 × 2048
// / (16 × 2176) = 0.882 with the defaults. A worker that caches whole
// pages of tokens rounds each system prompt down to its page size.
//
// # The command
//
// `pdlb bench URL` sends load to any SGLang- or OpenAI-style endpoint
// (pdlb, mini_lb, a router, a worker) and prints throughput, latency,
// time to first token, inter-token latency and errors by kind:
// status_<code>, connect, timeout, transport, stream_error, bad_body,
// aborted (a 200 answer or event that an abort ended, as a decode's
// refusal of a request without a room is) and dropped; and the first five
// distinct error messages (the status and what the body says, as SGLang's
// "without bootstrap room id"), each with its count (error_messages in the
// JSON report). While it runs, a progress bar with the total and an ETA
// is redrawn on a terminal; otherwise one plain line is written every 5 s
// (-q for none). Against `pdlb fake`, whose events carry the time
// they were sent, it also reports each event's lag on the way. Its
// environment variables are PDLB_BENCH_<FLAG> (PDLB_BENCH_COMPARE a
// comma-separated list; PDLB_BENCH_HEADER one header, as a header's value
// may hold commas). `pdlb bench --help` lists the flags. Beyond it:
//
//   - URL is a base URL (a path is a prefix: http://h/prefix calls
//     /prefix/generate) or the URL of a route (http://h:8000/generate),
//     whose route is taken; a --route that contradicts it is a usage
//     error, and a URL ending in /v1 is an OpenAI base URL.
//   - --route is /generate, /v1/completions or /v1/chat/completions.
//   - --give-up-after (3s): when no request to a target has succeeded for
//     that long (of its own turns, under --compare), at least five failed,
//     and none that started before the first failure is still in flight
//     (a server at its admission limit refuses the others at once while
//     long generations hold its slots), the run stops and says what they
//     failed with (gave_up and gave_up_messages in the JSON report),
//     rather than sending tens of thousands of failing requests a second.
//     0 never gives up, to load a server through a restart.
//   - --stream measures inter-token latency with an event's gap shared
//     among its new tokens where it counts them, as bench_serving does.
//   - --round is at least 100ms; --duration more than 0.
//   - --rate: a generator that falls behind stops 100 ms past --duration.
//   - --prompts: null content or token count is allowed, and a UTF-8
//     byte-order mark is skipped. On /generate and /v1/completions the
//     messages' texts are joined with newlines, those without text left
//     out.
//   - -H: a name given twice sends both values, as curl does, but Host,
//     User-Agent and Content-Type, which take the last. --api-key is not
//     for use with -H 'Authorization: ...'.
//
// A closed-loop client whose request cannot connect waits 100 ms (or to
// the end of the round, or the interrupt) before its next one, so that a
// dead target costs nothing; the open loop keeps its schedule. A request
// that finds its kept-alive connection closed by the target after an idle
// spell goes on a new connection (nothing was sent); a request that may
// have reached the target is never sent twice.
//
// The exit status is 0 after a run where requests succeeded; 1 when a
// target had none succeed (a wrong port, a dead target) or was given up;
// 2 for a usage
// error; 128 + the signal (130 for Ctrl-C) when interrupted, after the
// partial report. A second Ctrl-C (250 ms or more after the first) exits
// at once. An interrupted --compare reports the rounds every target
// completed.
//
// # How rates are measured
//
// Requests/s and tokens/s count the measured requests over the measured
// time. In the closed loop with --duration, that time is each client's
// own, from its first measured request to the end of its last, and the
// rates are the clients' combined rate, so a warm-up's requests still in
// flight do not lower them. With --requests, it is the time from the first
// measured request's start to the last one's end (a count leaves some
// clients idle while others finish). In the open loop, it runs from the
// end of the warm-up to the end of --duration or of the last measured
// request, whichever is later, as bench_serving times a run until its last
// request ends (the last request's end when --requests ends the arrivals
// first; the interrupt, when interrupted).
//
// For streams, events/s is taken over the --duration window instead (after
// the warm-up, each round's with --compare, ending at the interrupt if one
// comes first), not over elapsed. It counts the events that arrived within
// the window, whichever request they belong to, those of streams still in
// flight at its end included, but not those of a stream that failed
// within it. When --requests ends the run before the window does, the
// window ends with the time measured. Why: long streams started near the
// end run past it with ever fewer left, and over whole requests a target
// compared with itself at 1,024 streams of 0.66 s came out anywhere from
// 0.86 to 1.0 of itself; counted within the window, 0.99 to 1.01. With
// --requests alone there is no window: events/s counts the events of the
// successful streams (and, in an interrupted open loop, those the
// interrupt cut) over elapsed. The count printed beside events/s, and the
// JSON report's events and event_window_s, are the count and the time it
// divides.
//
// # The method of make bench
//
// `make bench` (scripts/bench.sh) sends the same load straight to a fake
// worker (the direct baseline: an aggregated fake, the decode's generation
// code without the KV wait) and through pdlb to a fake prefill/decode pair
// with every feature on (health checks, metrics, logging). Targets take
// turns in 2 s rounds within one `pdlb bench --compare` run, on the same
// 2-core machine as the fakes and the load generator. Absolute figures on
// a shared machine are noise; ratios measured together are not.
//
// Two baselines run beside pdlb, so that what its features cost can be
// told from what the machine costs. `pdlb pair` (package bench/pair) is a
// featureless pairing proxy in front of the same fake pair: it splices the
// bootstrap fields, with a fresh room, sends both legs and passes the
// decode's answer on (a stream's as fasthttp reads it), with no health
// checks, metrics, retries, cancellation or look inside the events. It is
// a third target of the same comparison in scenarios 1 and 2, and in
// scenario 3 a comparison of its own against pdlb: the floor of a PD proxy,
// which pays for the prefill's answer and the second leg too. `pdlb relay`
// (package bench/relay), in scenario 3, is a bare TCP relay to the direct
// worker: one more hop and nothing else, the floor any proxy starts from.
// The run ends with a summary, a line a scenario, of pdlb's figures beside
// its targets. The scenarios:
//
//  1. non-stream /generate, 64 clients;
//  2. non-stream /generate, 1 client;
//  3. 1,024 concurrent streams of 32 events 20 ms apart, and pdlb's peak
//     RSS;
//  4. 4,096 such streams: errors (must be 0) and pdlb's peak RSS.
//
// To see where the time goes in a deployment, start pdlb with --pprof-addr
// 127.0.0.1:6060 and take `go tool pprof
// http://127.0.0.1:6060/debug/pprof/profile`.
//
// # Measurements
//
// Ratios from one run (6 s per target, 2026-11-30, at the end of the
// day's work):
//
//	scenario                       pdlb/direct  baselines                 figures (direct → pdlb)
//	1. /generate, 64 clients       0.30 req/s   pair/direct 0.31          p50 0.52 → 2.06 ms (pair 1.97);
//	                                                                      pdlb allocates 1.2 times (17 bytes) a request
//	2. /generate, 1 client         0.33 req/s   pair/direct 0.34          p50 0.054 → 0.157 ms: pdlb adds ~103 µs (pair ~100)
//	3. 1,024 streams of 32 events  0.93 ev/s    relay/direct 0.98;        event lag p50 0.36 → 2.14 ms (relay 1.83),
//	                                            pdlb/pair 1.01            p99 3.9 → 21.9 ms (relay 11.2);
//	                                                                      TTFT p50 25 → 52 ms (relay 38);
//	                                                                      pdlb peak RSS 57 MiB (65-67 with the defences below)
//	4. 4,096 such streams          0.53 ev/s                              no errors; pdlb peak RSS 233 MiB (251-257 with them)
//
// The defences against hostile clients (bodies read as they arrive within a
// memory budget, connections as a budget, header and abort checks) were
// measured against the build before them, both in front of the same fake
// pair in alternating rounds (2026-12-01). With 64 clients, new/old
// requests/s 0.97-1.05 (mean 1.01 over 7 runs) and CPU per request 0.95-1.05
// (mean 0.99); with one client, requests/s 1.01-1.03 and p50 0.97-0.99; in
// `make bench`, pdlb/pair 0.94 for both. They cost memory at many streams: a
// client connection keeps fasthttp's 4 KiB read buffer once it streams
// request bodies, and body buffers are pooled, so peak RSS went from 57 to
// 65 MiB at 1,024 streams and from 229 to 251 MiB at 4,096 (old and new
// measured in turn).
//
// The run of 2026-12-01 (at the end of that day's changes, the machine
// otherwise idle): scenario 1 0.27 (pair 0.30, pdlb/pair 0.91); scenario 2
// 0.33 (pair 0.36), pdlb adding 155 µs at p50 (pair 132); scenario 3 0.82
// events/s (relay 0.93, pdlb/pair 1.005), peak RSS 64 MiB; scenario 4 0.49
// events/s, no errors, peak RSS 279 MiB (old and new builds measured in turn
// outside make bench: 230-236 MiB both). Side by side against the build
// before that day's changes: 64 clients 0.99-1.03 of its requests/s and
// 0.97-1.01 of its CPU per request; one client 1.02-1.07 and p50 0.94-0.99.
//
// Across runs on this machine: scenario 1 0.25-0.31, at 0.87-1.01 of the
// pairing proxy; scenario 2 0.32-0.40 (75-105 µs added), at 0.95-1.05 of
// it; scenario 3 0.91-0.96 events/s (counted within the measured window),
// and 0.99-1.03 of the pairing proxy's in alternating rounds, with lag p50
// 1.7-2.6 ms and p99 13-25 ms (the relay's 1.6-2.1 and 8.7-15 ms: the
// machine's load moves both; before pdlb decoded and framed the stream's
// chunks itself, 2.1-3.5 ms and 16-30 ms); peak RSS at 1,024 streams 52-58
// MiB (59-71 before the memory changes below), at 4,096 streams 183-231
// MiB (a run's own load generator and fakes move it: the same build
// measured 185-193 MiB alone, 225 MiB within `make bench`).
//
// For scale: mini_lb serves about 1,200 requests/s with 64 clients on such
// a machine; pdlb about 22,000-32,000.
//
// # How to read the measurements
//
// Most of the gap is the machine's, not pdlb's. A PD request costs the
// fakes two requests and a KV hand-off instead of one, and 60-70 % of
// pdlb's own CPU is system calls on loopback. Per non-stream request the
// pairing proxy makes 3 writes and 6 reads (each read that finds nothing
// yet is how Go's poller waits); pdlb makes 3 writes and 4. It sends each
// worker request from inside the first read of its answer, once the
// poller's notices count, so that read need not look first (a read that
// looked would always find nothing, the worker not having answered yet).
// So the featureless pairing proxy itself reaches only 0.28-0.34 of direct
// in scenario 1 here.
//
// pdlb's health checks, metrics, retries, cancellation, request IDs,
// header filtering and body validation cost the rest: 0.87-1.01 of the
// pairing proxy's throughput with 64 clients (0.98-1.00 with both under
// load at once, so that the machine's swings hit both alike), its latency
// with one. pdlb takes 4-7 % more CPU per request than the pairing proxy
// (10-20 % before the worker requests went out inside their reads), spread
// over those features, none above 2 % of its CPU. Costs that were not
// features are gone: the extra read of each keep-alive request (see memory
// below), and moving deadlines for every request, each a timer update and
// two clock reads: both worker connections' read and write deadlines, the
// client connection's read deadline (fasthttp moves it twice a request),
// and the timer that starts watching a client that waits long. Deadlines
// are rounded up to 100 ms steps of the monotonic clock, and a client's is
// given to its socket only when a read has to wait, so a connection keeps
// the one it has for the requests of a step: with 64 clients, 92 % of
// worker deadlines and all but one client deadline in 70 cost nothing. The
// watch timer runs on from one request to the next and is set about once
// a second.
//
// Long prompts and long answers, which the standard scenarios lack
// (32-word prompts, 16 tokens), cost pdlb no more than short ones against
// the pairing proxy, both under load at once: 1.01 of its CPU per request
// with 3,000-word prompts, 1.08 with 2,000-token answers (1.27 and 1.16
// before three changes). The body's JSON validation reads strings eight
// bytes at a time, where gjson's validator read a byte at a time (a tenth
// of pdlb's CPU with such prompts, in perf). A request too large for the 4
// KiB write buffer goes to its worker in one writev instead of two writes,
// and so does an answer too large for the client's 2 KiB one (fasthttp
// does that itself only on a bare TCP connection, which pdlb's client
// connections are not).
//
// Scenario 3:
//
//   - The bare relay already adds about 2 ms of lag at p50: the 1,024
//     streams start together, so their events come in bursts of about a
//     thousand every 20 ms, and every hop is a queue that drains a burst
//     on cores shared by three busy processes (the machine is 87 % busy
//     with pdlb in the path, 84 % with the relay, 57 % direct). pdlb's lag
//     is 1.1-1.5 times the relay's at p50, 1.4-2 times at p99.
//   - pdlb makes the same system calls per event as the relay (two reads,
//     one write) and uses 14-18 % more CPU in all. When the decode sends
//     its last events and its body's end together, as it does for about
//     80 % of the streams here, pdlb sends them on in one write too, where
//     fasthttp would write the body's end on its own. It reads the
//     decode's chunks straight from the socket into the relay's buffer and
//     strips their framing there; after the first chunk, which fasthttp
//     writes with the headers, it frames each chunk in that buffer and
//     writes it to the client's socket itself. Through fasthttp's body
//     stream and chunk writer, every event was copied into two more
//     buffers and its framing parsed a byte at a time: pdlb took 25-30 %
//     more CPU than the relay, and 6-7 % more per event than now in
//     alternating runs.
//   - What is left is mostly not computation: at a thousand streams each
//     event finds its stream's state gone cold in the cache since its last
//     one, 20 ms before. Decoding an event's framing takes 24 ns in a
//     benchmark and about 400 ns in the profile, nearly all of it on the
//     first load of the decoder's state.
//   - Against the pairing proxy, which pays for a PD pair what pdlb pays
//     (the prefill's streamed answer, the second leg, the fakes' KV
//     hand-off) and has none of its features, pdlb delivers 0.99-1.03 of
//     the events/s, with TTFT and lag within the runs' spread. So the rest
//     of the gap to direct is the PD path's on this machine, not pdlb's.
//   - Its events/s is lower than the relay's mostly because its streams
//     start later (TTFT p50 47-64 against 33-43 ms in the same runs). The
//     1,024 streams of a round start together, and each start costs pdlb
//     60-80 µs of CPU, most of it system calls: two requests to write, then
//     the prefill's answer and the decode's headers and first event to
//     wait for, each a wake-up and a read. The relay passes the bytes of a
//     start as those of any event. Timed inside pdlb, a start takes about
//     30 µs (both requests are written 20 µs after the client's has been
//     read); the fakes answer a PD pair 4-9 ms later than one aggregated
//     request under this load (two requests to schedule and a KV
//     hand-off). The 2 s rounds make every round start with such a burst:
//     with one 6 s round per target, pdlb's TTFT p50 is 34-35 ms (49-58 ms
//     with 2 s rounds in the same series), though events/s moved less than
//     the runs' spread (0.940-0.957 against 0.933-0.954).
//
// Scenario 4 saturates the machine (the direct path's own inter-token p90
// is several times the 20 ms pace), so its ratio measures the extra hop's
// CPU.
//
// Memory at 1,024 streams: about 12 MiB is the binary's mapped pages,
// 20-25 MiB heap (per stream: the exchange with both legs' responses, the
// client's write buffer, the relay's buffer; the decode connection's read
// buffer goes back to its pool once the relay reads the socket itself, but
// a round's streams start together, so the peak still holds one each), and
// goroutine stacks, 8 KiB per stream. What keeps it there:
//
//   - a call gives its request back to fasthttp's pool once sent, so a
//     stream holds 2 KiB less (2.5 MiB at 1,024 streams);
//   - workers are dialled on a few goroutines per worker (up to 64, reused,
//     gone after 10 s idle), not on the request's: the dial's call chain is
//     deep, and a stream whose goroutine dialled kept a 16 KiB stack, 8 MiB
//     more at 1,024 new streams;
//   - `make build` makes a static binary (no cgo), which maps no C library:
//     2-3 MiB less;
//   - a client connection hands its read buffer back once its request is
//     read (fasthttp's ReduceMemoryUsage). fasthttp then waits for each
//     keep-alive request by reading its first byte alone; pdlb's client
//     connection turns that read into one of the whole request, into a
//     pooled buffer taken only once data has come, so an idle connection
//     still holds none and the request costs no extra system call;
//   - pdlb collects garbage at GOGC=50 unless GOGC is set (with Go's
//     default, RSS grew by 10 MiB within a minute of 1,024 streams; no
//     cost showed in scenario 1).
//
// Per proxied non-stream request, pdlb itself allocates about once (15-18
// bytes): fasthttp's one-byte read that waits for each keep-alive request
// (ReduceMemoryUsage). `make bench` reads it from pdlb's /metrics in
// scenario 1. A 32-event stream allocates 3 times. The body injector
// allocates nothing and takes about 0.7 µs for a chat body (`go test
// -bench . -benchmem ./bootstrap/`). BenchmarkGenerate in lb counts 42
// allocations per request, but that figure includes its in-memory fakes
// and client.
package bench
