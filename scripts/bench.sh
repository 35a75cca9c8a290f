#!/usr/bin/env bash
# The comparison behind `make bench`: the same load sent straight to a fake
# worker (the direct baseline) and through pdlb to a fake prefill/decode
# pair, one after the other in the same run, printed as ratios. Absolute
# figures on a shared machine are noise; ratios measured together are not.
#
# BENCH_DURATION (default 10s) sets the length of each run; BENCH_BASE_PORT
# (default 19000) moves the ports.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

base=${BENCH_BASE_PORT:-19000}
duration=${BENCH_DURATION:-10s}
prefill=127.0.0.1:$((base + 1))
decode=127.0.0.1:$((base + 2))
direct=127.0.0.1:$((base + 3))
bootstrap_port=$((base + 998))
lb=127.0.0.1:$base
out=$(mktemp -d)

# The direct baseline is an aggregated fake: the same generation code as the
# decode, answering without a prefill, as a worker reached directly does.
start "fake workers" "$out/fake.log" "$PDLB" fake --prefill "$prefill" --decode "$decode" \
	--aggregated "$direct" --bootstrap-port "$bootstrap_port" --log-level warn
wait_http "http://$prefill/health"
start "pdlb" "$out/pdlb.log" "$PDLB" --prefill "http://$prefill" "$bootstrap_port" \
	--decode "http://$decode" --host 127.0.0.1 --port "$base" --log-level warn
wait_http "http://$lb/health"

# figure FILE KEY: the first number named KEY in a bench JSON report.
figure() {
	grep -o "\"$2\": *[0-9.]*" "$1" | head -1 | sed 's/.*: *//'
}
# p50 FILE: the median end-to-end latency in ms (the first p50 is latency's).
p50() {
	figure "$1" p50_ms
}

printf '\n%-34s %12s %12s %8s %12s %12s\n' scenario "direct req/s" "pdlb req/s" ratio "direct p50" "pdlb p50"
run() {
	local name=$1
	shift
	"$PDLB" bench "http://$direct" --quiet --duration "$duration" --warmup 1s --json "$out/$name-direct.json" "$@" >/dev/null
	"$PDLB" bench "http://$lb" --quiet --duration "$duration" --warmup 1s --json "$out/$name-pdlb.json" "$@" >/dev/null
	local d p
	d=$(figure "$out/$name-direct.json" requests_per_s)
	p=$(figure "$out/$name-pdlb.json" requests_per_s)
	printf '%-34s %12.0f %12.0f %8.3f %10.3fms %10.3fms\n' "$name" "$d" "$p" \
		"$(awk -v p="$p" -v d="$d" 'BEGIN { print (d > 0 ? p / d : 0) }')" \
		"$(p50 "$out/$name-direct.json")" "$(p50 "$out/$name-pdlb.json")"
}
run "generate, 64 clients" --concurrency 64
run "generate, 1 client" --concurrency 1
run "chat stream, 64 clients" --concurrency 64 --route /v1/chat/completions --stream
echo
echo "reports: $out"
