#!/usr/bin/env bash
# Runs the whole test suite. Starts its own Firestore emulator on a free port,
# warms it up, runs every test against it, and stops it again.
# Extra arguments go to `cargo nextest run` (for example a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/emulator.sh
. scripts/lib/emulator.sh

# The LINE schema checks (tests/api/contract.rs) run ../shared/tools/line_contract.py.
python3 -c 'import yaml' 2>/dev/null || pip install --quiet pyyaml

start_emulator
trap stop_emulator EXIT INT TERM
python3 scripts/warm_emulator.py "$FIRESTORE_EMULATOR_HOST"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests "$@"
else
  echo "cargo-nextest not found; using cargo test" >&2
  cargo test --lib --bins --tests "$@"
fi
