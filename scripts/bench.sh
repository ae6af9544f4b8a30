#!/usr/bin/env bash
# The load benchmark (see BENCHMARKS.md). Starts a fresh Firestore emulator, warms
# it up, builds the release binary and runs benches/load against it.
# Arguments go to the benchmark: --users N (default 500), --in-flight 32,64.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/emulator.sh
. scripts/lib/emulator.sh

start_emulator
trap stop_emulator EXIT INT TERM
python3 scripts/warm_emulator.py "$FIRESTORE_EMULATOR_HOST" 3000
cargo bench --locked --bench load -- "$@"
