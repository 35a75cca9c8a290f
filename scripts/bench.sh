#!/usr/bin/env bash
# The comparison behind `make bench`: each scenario is one `pdlb bench
# --compare direct=... pdlb=...` run that sends the same load straight to an
# aggregated fake worker (the direct baseline: the same generation code as
# the decode, answering without a prefill, as a worker reached directly
# does) and through pdlb to a fake prefill/decode pair, in alternating
# rounds, and prints one table: every figure of both, and pdlb's ratio to
# direct. Absolute figures on a shared machine are noise; ratios measured
# together are not.
#
#   1. non-stream /generate, 64 clients
#   2. non-stream /generate, 1 client
#   3. 1,024 concurrent streams of 32 events 20 ms apart, and pdlb's peak RSS
#   4. 4,096 concurrent streams of 32 events 20 ms apart: errors (must be 0)
#      and pdlb's peak RSS
#
# Scenarios 1 and 2 have a third target: `pdlb pair`, a featureless pairing
# proxy (it splices the bootstrap fields and sends both legs, nothing more)
# in front of the same fake pair, the reference the non-stream targets are
# stated against. Each target then idles through two rounds of the others,
# so pdlb may start a round by reconnecting its pooled connections, which
# costs 128 dials here: nothing next to a round.
#
# The streams come from a second fake process (--token-delay 20ms --tokens
# 32, asked for max_new_tokens 32) behind a pdlb of their own, started
# afresh for each scenario so its peak RSS (VmHWM) is that scenario's. The
# event lag of the stream tables is how late each event reaches the bench
# after the fake stamped it: what pdlb's relay adds shows as pdlb's lag.
# Scenario 3 is then run twice more, so that pdlb/direct can be read
# against what any proxy gets on this machine: with `pdlb relay`, a bare TCP
# relay to the direct worker (one more hop and nothing else), in pdlb's
# place; and with `pdlb pair` in front of the stream workers' fake pair
# (the pairing proxy of scenarios 1 and 2, which passes a stream on as
# fasthttp reads it: the floor of a PD proxy, the prefill's answer and the
# second leg included) in direct's, against pdlb. (Not as more targets of
# one comparison: each target would then idle through two rounds of the
# others, longer than pdlb keeps pooled connections, and start every round
# reconnecting 2,048 of them, which shows at a thousand streams.)
#
# Scenario 1 also reports pdlb's heap allocations per proxied request, from
# the Go runtime's counters on its /metrics (health checks and the two
# scrapes included). A summary at the end puts pdlb's figures beside the
# targets of these scenarios (issue 6 of the project's tracker).
#
# BENCH_DURATION (default 10s) is each target's measured time per scenario,
# cut into rounds of BENCH_ROUND (default 2s); BENCH_WARMUP (default 1s)
# precedes each target's first round. BENCH_BASE_PORT (default 19000) moves
# the ports: base to base+14, base+997 and base+998. BENCH_SCENARIOS
# (default "1 2 3 4") picks scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

base=${BENCH_BASE_PORT:-19000}
duration=${BENCH_DURATION:-10s}
round=${BENCH_ROUND:-2s}
warmup=${BENCH_WARMUP:-1s}
scenarios=${BENCH_SCENARIOS:-1 2 3 4}
out=$(mktemp -d)
failed=0

# 4,096 streams hold 3 connections each at once (client to pdlb, pdlb to
# decode and to prefill), and both ends of each are on this machine: the
# fake process serves the direct baseline's 4,096 as well as pdlb's 8,192,
# and the bench keeps both targets' connections open between rounds. So
# every process needs well over 12,288 descriptors. Raise the soft limit as
# far as the hard one allows (Go programs raise their own soft limit to the
# hard one anyway); only root can raise the hard limit itself.
need_fds=16384
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n "$need_fds" 2>/dev/null || true
fds=$(ulimit -n)
echo "file descriptor limit (ulimit -n): $fds"
if [[ $fds != unlimited ]] && ((fds < need_fds)); then
	echo "warning: scenario 4 needs about $need_fds file descriptors per process; raise the hard limit (ulimit -Hn, as root, or limits.conf)" >&2
fi

# compare NAME DIRECT TARGETS FLAGS...: one comparison of direct ([NAME=]ADDR,
# named direct if unnamed) and the targets, a comma-separated list of
# [NAME=]ADDR (named pdlb if unnamed), printed as a table.
compare() {
	local name=$1 direct=$2 targets=$3 target
	shift 3
	[[ $direct == *=* ]] || direct=direct=$direct
	local args=(--compare "${direct%%=*}=http://${direct#*=}")
	for target in ${targets//,/ }; do
		[[ $target == *=* ]] || target=pdlb=$target
		args+=(--compare "${target%%=*}=http://${target#*=}")
	done
	"$PDLB" bench "${args[@]}" --quiet \
		--duration "$duration" --round "$round" --warmup "$warmup" --json "$out/$name.json" "$@" |
		tee "$out/$name.txt"
}

# errors NAME: the error count of each target, from the table's errors row.
errors() {
	awk '$1 == "errors" { print $2, $3; exit }' "$out/$1.txt"
}

# row NAME LABEL: the figures of the table row LABEL (e.g. "lag p50 ms")
# of comparison NAME: each target's value, then its ratio to direct.
row() {
	awk -v label="$2" 'index($0, label " ") == 1 { print substr($0, length(label) + 1); exit }' "$out/$1.txt"
}

# peak_rss PID: the process's peak resident set size (VmHWM).
peak_rss() {
	awk '/^VmHWM:/ { printf "%d kB (%.0f MiB)", $2, $2 / 1024 }' "/proc/$1/status"
}

# stream_figures NAME: the second target's events/s ratio to direct and its
# event lag at p50 and p99, in stream comparison NAME.
stream_figures() {
	local ratio p50 p99
	read -r _ _ ratio < <(row "$1" "events/s")
	read -r _ p50 _ < <(row "$1" "lag p50 ms")
	read -r _ p99 _ < <(row "$1" "lag p99 ms")
	echo "$ratio $p50 $p99"
}

# pdlb_counters PORT: what pdlb's /metrics says it has allocated so far
# (heap objects, bytes) and how many generate requests it has answered.
pdlb_counters() {
	curl -sf "http://127.0.0.1:$1/metrics" | awk '
		$1 == "go_memstats_mallocs_total" { m = $2 + 0 }
		$1 == "go_memstats_alloc_bytes_total" { b = $2 + 0 }
		index($1, "pdlb_requests_total{route=\"/generate\"") == 1 { r += $2 }
		END { printf "%.0f %.0f %.0f\n", m, b, r }'
}

# allocations BEFORE AFTER: allocations and bytes per request between two
# pdlb_counters readings.
allocations() {
	awk -v before="$1" -v after="$2" 'BEGIN {
		split(before, x); split(after, y)
		n = y[3] - x[3]
		if (n <= 0) { print "no requests"; exit }
		printf "%.1f allocations (%.0f bytes) per request over %d requests\n", (y[1] - x[1]) / n, (y[2] - x[2]) / n, n
	}'
}

# summary: pdlb's figures against the targets of the standard scenarios
# (issue 6), from the tables of this run, one line a scenario.
summary=()
summarize() {
	local name=$1 direct pdlb ratio pair pair_ratio
	case $name in
	generate-64)
		read -r direct pdlb ratio pair pair_ratio < <(row "$name" "req/s")
		summary+=("1. 64 clients    pdlb/direct $ratio req/s (target >= 0.35); pair/direct $pair_ratio, so pdlb/pair $(awk -v a="$ratio" -v b="$pair_ratio" 'BEGIN { printf "%.2f", a / b }')")
		;;
	generate-1)
		read -r direct pdlb ratio pair pair_ratio < <(row "$name" "latency p50 ms")
		local added pair_added
		added=$(awk -v a="$direct" -v b="$pdlb" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
		pair_added=$(awk -v a="$direct" -v b="$pair" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
		read -r direct pdlb ratio pair pair_ratio < <(row "$name" "req/s")
		summary+=("2. 1 client      pdlb adds $added us at p50 (target <= 135), pdlb/direct $ratio req/s (target >= 0.40); pair adds $pair_added us, $pair_ratio")
		;;
	streams-1024)
		local p50 p99
		read -r ratio p50 p99 < <(stream_figures "$name")
		summary+=("3. 1,024 streams pdlb/direct $ratio events/s (target >= 0.95), lag p50 $p50 ms (<= 1), p99 $p99 ms (<= 10), peak RSS $2 (<= 64 MB)")
		;;
	streams-1024-relay)
		local p50 p99
		read -r ratio p50 p99 < <(stream_figures "$name")
		summary+=("   bare relay    relay/direct $ratio events/s, lag p50 $p50 ms, p99 $p99 ms: the floor of any proxy here")
		;;
	streams-1024-pair)
		local p50 p99 pair_p50 pair_p99
		read -r ratio p50 p99 < <(stream_figures "$name")
		read -r pair_p50 _ < <(row "$name" "lag p50 ms")
		read -r pair_p99 _ < <(row "$name" "lag p99 ms")
		summary+=("   PD pair       pdlb/pair $ratio events/s, lag p50 $pair_p50 -> $p50 ms, p99 $pair_p99 -> $p99 ms: pdlb against the floor of a PD proxy here")
		;;
	streams-4096)
		read -r direct pdlb < <(errors "$name")
		summary+=("4. 4,096 streams pdlb errors $pdlb (target 0), peak RSS $2 (<= 256 MB)")
		;;
	esac
}

# start_pdlb PORT PREFILL BOOTSTRAP_PORT DECODE LOG: pdlb in front of a pair.
start_pdlb() {
	start "pdlb on :$1" "$5" "$PDLB" --prefill "http://$2" "$3" --decode "http://$4" \
		--host 127.0.0.1 --port "$1" --log-level warn
	wait_http "http://127.0.0.1:$1/health"
}

# streams N: scenario 3 or 4, N concurrent streams through a fresh pdlb.
streams() {
	local n=$1 port name=streams-$1 pid d p rss
	port=$((base + 10 + n / 1024))
	start_pdlb "$port" "$stream_prefill" "$stream_bootstrap" "$stream_decode" "$out/pdlb-$name.log"
	pid=${PIDS[-1]}
	echo
	echo "== $n concurrent streams of 32 events 20 ms apart, /generate"
	compare "$name" "$stream_direct" "127.0.0.1:$port" --stream --concurrency "$n" --max-new-tokens 32
	read -r d p < <(errors "$name")
	rss=$(peak_rss "$pid")
	echo "pdlb peak RSS (VmHWM): $rss"
	rss=${rss#* kB (}
	summarize "$name" "${rss%)}"
	echo "errors: direct $d, pdlb $p (must be 0)"
	if ((d + p > 0)); then
		echo "FAIL: $name had errors; see $out" >&2
		failed=1
	fi
	if ((n == 1024)); then
		echo
		echo "== the same, pdlb against the featureless pairing proxy (pdlb pair), the floor of a PD proxy here"
		compare "$name-pair" "pair=$stream_pair" "127.0.0.1:$port" --stream --concurrency "$n" --max-new-tokens 32
		summarize "$name-pair"
	fi
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

fast_prefill=127.0.0.1:$((base + 1))
fast_decode=127.0.0.1:$((base + 2))
fast_direct=127.0.0.1:$((base + 3))
fast_pair=127.0.0.1:$((base + 4))
fast_bootstrap=$((base + 998))
stream_prefill=127.0.0.1:$((base + 5))
stream_decode=127.0.0.1:$((base + 6))
stream_direct=127.0.0.1:$((base + 7))
stream_bootstrap=$((base + 997))
stream_pair=127.0.0.1:$((base + 8))
stream_relay=127.0.0.1:$((base + 9))

start "fake workers" "$out/fake.log" "$PDLB" fake --prefill "$fast_prefill" --decode "$fast_decode" \
	--aggregated "$fast_direct" --bootstrap-port "$fast_bootstrap" --log-level warn
start "fake stream workers" "$out/fake-streams.log" "$PDLB" fake --prefill "$stream_prefill" \
	--decode "$stream_decode" --aggregated "$stream_direct" --bootstrap-port "$stream_bootstrap" \
	--token-delay 20ms --tokens 32 --log-level warn
start "relay to the direct stream worker" "$out/relay.log" "$PDLB" relay --listen "$stream_relay" --to "$stream_direct"
start "featureless pairing proxy" "$out/pair.log" "$PDLB" pair --listen "$fast_pair" --prefill "$fast_prefill" \
	--decode "$fast_decode" --bootstrap-port "$fast_bootstrap"
start "featureless pairing proxy for streams" "$out/pair-streams.log" "$PDLB" pair --listen "$stream_pair" \
	--prefill "$stream_prefill" --decode "$stream_decode" --bootstrap-port "$stream_bootstrap"
wait_http "http://$fast_prefill/health"
wait_http "http://$fast_pair/health"
wait_http "http://$stream_pair/health"
wait_http "http://$stream_prefill/health"
wait_http "http://$stream_relay/health"
start_pdlb "$base" "$fast_prefill" "$fast_bootstrap" "$fast_decode" "$out/pdlb.log"

for s in $scenarios; do
	case $s in
	1)
		echo
		echo "== non-stream /generate, 64 clients"
		before=$(pdlb_counters "$base")
		compare generate-64 "$fast_direct" "127.0.0.1:$base,pair=$fast_pair" --concurrency 64
		allocs=$(allocations "$before" "$(pdlb_counters "$base")")
		echo "pdlb heap allocations (its /metrics): $allocs"
		summarize generate-64
		allocs_line="5. allocations   pdlb makes $allocs in scenario 1 (its /metrics); the body rewrite's allocs/op are in the go test -bench lines above"
		;;
	2)
		echo
		echo "== non-stream /generate, 1 client"
		compare generate-1 "$fast_direct" "127.0.0.1:$base,pair=$fast_pair" --concurrency 1
		summarize generate-1
		;;
	3)
		streams 1024
		echo
		echo "== the same through a bare TCP relay (pdlb relay), the floor of any proxy here"
		compare streams-1024-relay "$stream_direct" "relay=$stream_relay" --stream --concurrency 1024 --max-new-tokens 32
		summarize streams-1024-relay
		;;
	4) streams 4096 ;;
	*)
		echo "error: unknown scenario $s in BENCH_SCENARIOS" >&2
		exit 1
		;;
	esac
done
echo
echo "== summary: pdlb against the targets of the standard scenarios (ratios from this run)"
printf '%s\n' "${summary[@]}"
if [[ -n ${allocs_line:-} ]]; then
	echo "$allocs_line"
fi
echo
echo "reports: $out"
exit "$failed"
