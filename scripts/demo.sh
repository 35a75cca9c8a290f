#!/usr/bin/env bash
# The demo behind `make run`: fake prefill, decode and aggregated SGLang
# servers, pdlb in front of the PD pair, a few requests shown in full, then a
# short load run through pdlb with a readable report.
#
# DEMO_BASE_PORT (default 18000) moves the ports: base to base+3, and
# base+998 for the prefill's bootstrap server. DEMO_DURATION (default 5s) is
# the length of each load run, DEMO_WARMUP (default 1s) the warm-up before
# it. The logs go to a temporary folder, removed when the demo ends; their
# last lines are shown first if it failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

base=${DEMO_BASE_PORT:-18000}
duration=${DEMO_DURATION:-5s}
warmup=${DEMO_WARMUP:-1s}
prefill=127.0.0.1:$((base + 1))
decode=127.0.0.1:$((base + 2))
aggregated=127.0.0.1:$((base + 3))
bootstrap_port=$((base + 998))
lb=127.0.0.1:$base
use_temp_dir
logs=$TEMP_DIR

start "fake workers" "$logs/fake.log" "$PDLB" fake --prefill "$prefill" --decode "$decode" \
	--aggregated "$aggregated" --bootstrap-port "$bootstrap_port" --token-delay 2ms --log-format console
wait_http "http://$prefill/health"
# The mini_lb command line, with pdlb in place of `python -m sglang_router.launch_router`.
start "pdlb" "$logs/pdlb.log" "$PDLB" --mini-lb --pd-disaggregation \
	--prefill "http://$prefill" "$bootstrap_port" --decode "http://$decode" \
	--fallback "http://$aggregated" --host 127.0.0.1 --port "$base" --log-format console
wait_http "http://$lb/health"

echo
echo "== POST /generate through pdlb"
curl -s "http://$lb/generate" -H 'Content-Type: application/json' \
	-d '{"text": "Hello World How are you?", "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}}'
echo
echo
echo "== POST /v1/chat/completions, streamed"
curl -sN "http://$lb/v1/chat/completions" -H 'Content-Type: application/json' \
	-d '{"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": true}'
echo "== POST /generate, decode-only (X-PD-Mode): served by the aggregated fallback"
curl -s "http://$lb/generate" -H 'Content-Type: application/json' -H 'X-PD-Mode: decode-only' \
	-d '{"text": "Hi", "sampling_params": {"max_new_tokens": 4}}'
echo
echo
echo "== GET /bootstrap (what pdlb learned from the prefill's bootstrap server)"
curl -s "http://$lb/bootstrap"
echo
echo
echo "== GET /health_generate (every worker is asked)"
curl -s -o /dev/null -w "%{http_code}\n" "http://$lb/health_generate"

echo
echo "== $duration of load: 32 clients, non-stream /generate through pdlb"
"$PDLB" bench "http://$lb" --concurrency 32 --duration "$duration" --warmup "$warmup" --max-new-tokens 16
echo
echo "== $duration of load: 32 clients, streamed /v1/chat/completions through pdlb"
"$PDLB" bench "http://$lb" --route /v1/chat/completions --stream --concurrency 32 --duration "$duration" --warmup "$warmup"
echo
echo "== pdlb's own view (a few of its metrics)"
curl -s "http://$lb/metrics" | grep -E '^pdlb_(requests_total|backend_requests_total|request_errors_total|decode_only_total|warmups_total)' | grep -v ' 0$' || true
