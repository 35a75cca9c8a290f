#!/usr/bin/env bash
# The seed reproduction of the first-request failure (SGLang PR #22990),
# as its report wrote it, with pdlb in place of
# `python -m sglang_router.launch_router`.
#
# Against real servers, start them as the report does and pass their URLs:
#   PREFILL_URL=http://127.0.0.1:30000 DECODE_URL=http://127.0.0.1:30010 scripts/repro-mini-lb.sh
# pdlb then listens on LB_PORT (default 8000). Without URLs it starts fake
# servers first: --dp 4 on both sides, the decode behaving as SGLang did
# before PR #22990; REPRO_BASE_PORT (default 17000) moves their ports: pdlb
# on base, the workers on base+1 and base+2, the prefill's bootstrap server
# on base+998. The script exits 0 when the very first request succeeds.
# PDLB_ARGS adds flags to pdlb's line: PDLB_ARGS=--no-prewarm shows the
# failure mini_lb gets. The answer is printed; it and the logs go to a
# temporary folder, removed when the script ends, the logs' last lines
# shown first if it failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
use_temp_dir

port=${LB_PORT:-8000}
if [[ -z "${PREFILL_URL:-}" || -z "${DECODE_URL:-}" ]]; then
	base=${REPRO_BASE_PORT:-17000}
	PREFILL_URL=http://127.0.0.1:$((base + 1))
	DECODE_URL=http://127.0.0.1:$((base + 2))
	start "fake workers" "$TEMP_DIR/fake.log" "$PDLB" fake --prefill "${PREFILL_URL#http://}" \
		--decode "${DECODE_URL#http://}" --bootstrap-port $((base + 998)) --dp-size 4 --first-request-bug
	wait_http "$PREFILL_URL/health"
	port=$base
fi

# shellcheck disable=SC2086 # PDLB_ARGS is a list of flags
start "pdlb" "$TEMP_DIR/pdlb.log" "$PDLB" --mini-lb --pd-disaggregation \
	--prefill "$PREFILL_URL" --decode "$DECODE_URL" \
	--host 0.0.0.0 --port "$port" ${PDLB_ARGS:-}
wait_http "http://127.0.0.1:$port/health"

# The very first request carries disagg_prefill_dp_rank.
answer=$TEMP_DIR/answer.json
status=$(curl -s -o "$answer" -w '%{http_code}' -X POST "http://127.0.0.1:$port/generate" \
	-H 'Content-Type: application/json' \
	-d '{
        "text": "Hello World How are you?",
        "sampling_params": {"max_new_tokens": 128, "temperature": 0.0},
        "stream": false,
        "routed_dp_rank": 0,
        "disagg_prefill_dp_rank": 0
    }')
echo "status $status"
cat "$answer"
echo
[[ "$status" == 200 ]]
