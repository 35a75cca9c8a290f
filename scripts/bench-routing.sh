#!/usr/bin/env bash
# `make bench-routing`: pdlb's routing policies side by side on one
# simulated cluster, on SGLang bench_serving's generated-shared-prefix
# workload, and one table of what routing is for: the prefix-cache hit rate
# against the best any router could reach, TTFT, output tokens/s, and how
# evenly the prefills were used.
#
# The cluster is one `pdlb fake` process of 4 prefills and 2 decodes with
# the fakes' performance model (bench/fake): each prefill computes one
# prompt at a time, 2 ms + 50 µs per uncached token, and keeps a prefix
# cache of ROUTING_CACHE_TOKENS tokens (by default about 5 of the 16 groups'
# system prompts); a decode takes 4 ms a token, plus 50 µs for each other
# request in its batch. The workload: 16 groups × 48 requests, a 1,024-word
# system prompt and a 32-word question each, 16 output tokens, shuffled,
# streamed, 16 clients. Each row starts a fresh cluster (cold caches) and a
# fresh pdlb, whose prefill policy is the row's and decode policy
# round_robin:
#   random (mini_lb's), round_robin, power_of_two, cache_aware, prefix_hash;
#   prefix_hash ×2: two pdlb replicas behind an L4 relay that spreads the
#     clients' connections over them (pdlb relay);
#   cache_aware and random on /v1/chat/completions (system and user
#     messages);
#   skewed: random and cache_aware when one group takes half the requests.
#
# hits/best is the hit rate over the best possible; spread is the most
# requests one prefill got over the mean (1.00: even). ROUTING_BASE_PORT
# (default 25000) moves the ports (base to base+300); ROUTING_ROWS picks
# rows by name (default all).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
use_temp_dir

base=${ROUTING_BASE_PORT:-25000}
cache_tokens=${ROUTING_CACHE_TOKENS:-6200}
rows=${ROUTING_ROWS:-random round_robin power_of_two cache_aware prefix_hash prefix_hash_x2 chat_random chat_cache_aware skewed_random skewed_cache_aware}
prefills=() decodes=()
for i in 0 1 2 3; do prefills+=("127.0.0.1:$((base + 100 + i))"); done
for i in 0 1; do decodes+=("127.0.0.1:$((base + 110 + i))"); done
workload=(--workload generated-shared-prefix --gsp-num-groups 16 --gsp-prompts-per-group 48
	--gsp-system-prompt-len 1024 --gsp-question-len 32 --gsp-output-len 16 --stream -c 16 --quiet)

# cluster: start a fresh simulated cluster.
cluster() {
	local list
	list=$(IFS=,; echo "${prefills[*]}")
	start fake "$TEMP_DIR/fake.log" "$PDLB" fake --prefill "$list" --decode "$(IFS=,; echo "${decodes[*]}")" \
		--bootstrap-port $((base + 200)) --prefill-delay 2ms --prefill-token-delay 50us --max-prefills 1 \
		--cache-tokens "$cache_tokens" --token-delay 4ms --batch-token-delay 50us --tokens 16 \
		--enable-cache-report --log-level warn
	for w in "${prefills[@]}" "${decodes[@]}"; do wait_http "http://$w/health"; done
}

# pdlb PORT POLICY: start a pdlb in front of the cluster.
pdlb() {
	local args=() i=0
	for w in "${prefills[@]}"; do args+=(--prefill "http://$w" $((base + 200 + i))); i=$((i + 1)); done
	for w in "${decodes[@]}"; do args+=(--decode "http://$w"); done
	start "pdlb:$1" "$TEMP_DIR/pdlb-$1.log" "$PDLB" "${args[@]}" --port "$1" --prefill-policy "$2" \
		--decode-policy round_robin --log-level warn
	wait_http "http://127.0.0.1:$1/readiness"
}

# spread PORT...: the most requests one prefill got over the mean, summed
# over the pdlb replicas on PORT....
spread() {
	for port in "$@"; do curl -sf "http://127.0.0.1:$port/metrics"; done | awk '
		index($1, "pdlb_backend_requests_total{role=\"prefill\"") == 1 { n[$1] += $2 }
		END { for (k in n) { s += n[k]; c++; if (n[k] > m) m = n[k] } printf "%.2f", c ? m / (s / c) : 0 }'
}

# measure NAME URL ROUTE PORTS [FLAGS...]: one row: the bench's figures
# from its report, and the spread over the replicas on PORTS (commas).
measure() {
	local name=$1 url=$2 route=$3 ports=$4
	shift 4
	"$PDLB" bench "$url$route" "${workload[@]}" "$@" >"$TEMP_DIR/$name.txt"
	awk -v name="$name" -v spread="$(spread ${ports//,/ })" '
		$1 == "throughput" { tps = $4 }
		$1 == "cache" { hit = $3; best = $NF }
		$1 == "ttft" { p50 = $5; p99 = $7 }
		END { printf "%-20s %6.3f %6.3f %7.2f %9.1f %9.1f %11.0f %7s\n", name, hit, best, (best > 0 ? hit / best : 0), p50, p99, tps, spread }
	' "$TEMP_DIR/$name.txt"
}

# row NAME: run the row NAME on a fresh cluster and pdlb.
row() {
	local name=$1 policy route=/generate extra=()
	policy=${name#chat_}
	policy=${policy#skewed_}
	[[ $name == chat_* ]] && route=/v1/chat/completions
	[[ $name == skewed_* ]] && extra=(--gsp-hot-share 0.5)
	cluster
	if [[ $policy == prefix_hash_x2 ]]; then
		pdlb $((base + 1)) prefix_hash
		pdlb $((base + 2)) prefix_hash
		start relay "$TEMP_DIR/relay.log" "$PDLB" relay --listen "127.0.0.1:$base" \
			--to "127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
		measure "$name" "http://127.0.0.1:$base" "$route" "$((base + 1)),$((base + 2))" ${extra[@]+"${extra[@]}"}
	else
		pdlb $((base + 1)) "$policy"
		measure "$name" "http://127.0.0.1:$((base + 1))" "$route" "$((base + 1))" ${extra[@]+"${extra[@]}"}
	fi
	cleanup
	PIDS=()
}

printf '%-20s %6s %6s %7s %9s %9s %11s %7s\n' policy hits best hits/best "ttft p50" "ttft p99" "output tok/s" spread
for name in $rows; do
	row "$name" 2>"$TEMP_DIR/row.err" >"$TEMP_DIR/row.out" || { cat "$TEMP_DIR/row.err" "$TEMP_DIR/row.out" >&2; exit 1; }
	grep -v '^started ' "$TEMP_DIR/row.out"
done
