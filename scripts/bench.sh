#!/usr/bin/env bash
# The load benchmark (see BENCHMARKS.md). Starts a fresh Firestore emulator, warms
# it up, builds the release binary and runs benches/load against it.
# Arguments go to the benchmark: --users N (default 500), --in-flight 32,64,
# --set NAME=VALUE (a service setting, repeatable).
# --soak [SECONDS] (default 300) runs the soak instead of the storm levels: one
# release binary, mixed traffic of every webhook event kind at --rate N requests
# per second (default 400, 16 in flight at most), a table per 30-second window
# and three PASS/FAIL checks (p99 drift, no 5xx, RSS growth); exit status 1 if
# one fails. Example: ./scripts/bench.sh --soak 600 --rate 300
# --timers N seeds N step timers due at once and reports how fast one instance
# fires them (beside raw emulator creates/s), its memory and round trips, and
# the acknowledgement and follow-up latencies of taps sent during the storm
# against taps sent while idle (exit 1 if a target is missed).
# --campaign N seeds N following users tagged "bench" (and N/10 untagged), sends
# one campaign to the tag (CAMPAIGN_CALLS_PER_SECOND=200) and reports recipients/s
# from the POST until done (planning and sending apart), Firestore documents read
# and written per recipient (counted on the wire), memory above idle; exit status
# 1 unless every tagged user got exactly one multicast. Example:
# ./scripts/bench.sh --campaign 10000
# --export N seeds N answers of the lunch survey and downloads them as CSV
# (GET /admin/scenarios/lunch/answers.csv): rows/s, the service's RSS while it
# streams; exit status 1 unless every answer is in the file once.
# Example: ./scripts/bench.sh --export 100000
# --decisions [N] (default 500 users a round) compares the plain survey with the
# same messages through a split, a branch on a tag and {name} (cached names), in
# one release binary, rounds alternating: CPU per event, ack p99 and round trips
# per decision, with the scenarios issue's targets (1.2x, one extra round trip).
# Example: ./scripts/bench.sh --decisions 500
# --overflow [N] (default 4000) sends a burst of N survey starts (64 in flight) to
# one release binary with QUEUE_CAPACITY=16 (unless --set names another), so most
# are stored for any sweeper rather than queued, and reports the time from the
# last acknowledgement until every user got their start (target 60 s); exit
# status 1 unless each got exactly one. Example: ./scripts/bench.sh --overflow 4000
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/emulator.sh
. scripts/lib/emulator.sh

# The emulator's JVM collects garbage with ZGC here (pauses under a millisecond)
# instead of G1, whose stop-the-world pauses grew to 20-60 ms once a benchmark
# had seeded tens of thousands of documents, and held every request, idle or
# not, for as long: a stand-in's pause that Firestore does not have, which
# decided the slowest acknowledgements (BENCHMARKS.md, "Timers with taps during
# the storm"). EMULATOR_JAVA_OPTS set by the caller wins; the GC log of a run is
# kept with EMULATOR_JAVA_OPTS="-XX:+UseZGC -Xlog:gc:file=/tmp/gc.log:time".
export EMULATOR_JAVA_OPTS="${EMULATOR_JAVA_OPTS:--XX:+UseZGC}"
start_emulator
trap stop_emulator EXIT INT TERM
python3 scripts/warm_emulator.py "$FIRESTORE_EMULATOR_HOST" 3000
cargo bench --locked --bench load -- "$@"
