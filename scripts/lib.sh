# Shared by the scripts: start processes in the background, wait for them,
# and stop them all when the script exits. Source it; do not run it.

PDLB=${PDLB:-bin/pdlb}
PIDS=()

cleanup() {
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# start NAME LOGFILE CMD...: run CMD in the background, logging to LOGFILE.
start() {
	local name=$1 log=$2
	shift 2
	"$@" >"$log" 2>&1 &
	PIDS+=($!)
	echo "started $name (pid $!, log $log)"
}

# wait_http URL: wait up to 10 s for URL to answer 200.
wait_http() {
	local url=$1
	for _ in $(seq 100); do
		if curl -sf -o /dev/null "$url"; then
			return 0
		fi
		sleep 0.1
	done
	echo "error: $url did not come up; see the logs above" >&2
	exit 1
}
