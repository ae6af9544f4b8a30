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

# The console's browser tests (tests/api/console.rs) drive Debian's headless
# Chromium through chromium-driver; a Japanese font makes their screenshots
# legible. Installed when missing and apt-get can; otherwise those tests print
# a notice and skip (unless REQUIRE_BROWSER=1, as in CI).
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 \
  || [ ! -e /usr/share/fonts/opentype/ipafont-gothic/ipag.ttf ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing chromium, chromium-driver and a Japanese font for the browser tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium chromium-driver fonts-ipafont-gothic >/dev/null) \
      || echo "NOTICE: chromium could not be installed; the browser tests will skip" >&2
  else
    echo "NOTICE: chromium/chromium-driver missing and apt-get unavailable; the browser tests will skip" >&2
  fi
fi

start_emulator
trap stop_emulator EXIT INT TERM
python3 scripts/warm_emulator.py "$FIRESTORE_EMULATOR_HOST"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests "$@"
else
  echo "cargo-nextest not found; using cargo test" >&2
  cargo test --lib --bins --tests "$@"
fi
