#!/usr/bin/env bash
# Runs the whole test suite. Starts its own Firestore emulator on a free port,
# warms it up, runs every test against it, and stops it again.
# Extra arguments go to `cargo nextest run` (for example a test name filter).
#
# It needs what the README's set-up names (Rust, Java 17+ and the Google Cloud
# CLI's Firestore emulator, Python 3). Two test tools are installed when missing,
# and it says so before it does:
# - PyYAML (pip), for the LINE schema checks (tests/api/contract.rs); without it
#   those checks print a notice and skip (unless REQUIRE_CONTRACT=1, as in CI;
#   without ../shared they always skip);
# - Debian's chromium, chromium-driver and a Japanese font (apt-get, as root), for
#   the console's browser tests; without them those tests print a notice and skip
#   (unless REQUIRE_BROWSER=1, as in CI).
# TEST_TOOLS=skip installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/emulator.sh
. scripts/lib/emulator.sh
# shellcheck source=scripts/lib/test_tools.sh
. scripts/lib/test_tools.sh

install_test_tools
start_emulator
trap stop_emulator EXIT INT TERM
python3 scripts/warm_emulator.py "$FIRESTORE_EMULATOR_HOST"
# .ci/run may have started the installs in the background already.
wait_for_test_tools

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests "$@"
else
  echo "cargo-nextest not found; using cargo test" >&2
  cargo test --lib --bins --tests "$@"
fi
