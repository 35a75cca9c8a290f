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

# use_temp_dir: make a temporary folder, $TEMP_DIR, for the script's logs
# and files. When the script ends (on Ctrl-C or a failure too), its
# processes are stopped, the end of each log in it is shown if it failed,
# and the folder is removed.
use_temp_dir() {
	TEMP_DIR=$(mktemp -d)
	trap finish EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# finish replaces cleanup's trap for a script that called use_temp_dir.
finish() {
	local status=$?
	# A second Ctrl-C while the processes drain must not cut the clean-up.
	trap '' INT TERM
	cleanup
	if [ "$status" -ne 0 ]; then
		for log in "$TEMP_DIR"/*.log; do
			[ -f "$log" ] || continue
			echo "== the end of $(basename "$log")" >&2
			tail -n 20 "$log" >&2
		done
	fi
	rm -rf "$TEMP_DIR"
}

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
