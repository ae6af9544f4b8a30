#!/usr/bin/env bash
# Runs the service locally on http://127.0.0.1:${PORT:-8080} with the sample
# scenarios in scenarios/. Uses the Firestore emulator at FIRESTORE_EMULATOR_HOST
# (default 127.0.0.1:8681) when one answers there, and starts one otherwise.
# Without LINE_CHANNEL_ACCESS_TOKEN it is a dry run: nothing is sent to LINE, and
# what the bot would say (texts, buttons, card titles) is printed instead.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/emulator.sh
. scripts/lib/emulator.sh

export FIRESTORE_EMULATOR_HOST="${FIRESTORE_EMULATOR_HOST:-127.0.0.1:8681}"
if emulator_answers "$FIRESTORE_EMULATOR_HOST"; then
  echo "Using the Firestore emulator already running at $FIRESTORE_EMULATOR_HOST" >&2
else
  start_emulator "${FIRESTORE_EMULATOR_HOST##*:}"
  trap stop_emulator EXIT INT TERM
fi

export LINE_CHANNEL_SECRET="${LINE_CHANNEL_SECRET:-local-channel-secret}"
export GOOGLE_CLOUD_PROJECT="${GOOGLE_CLOUD_PROJECT:-demo-line-survey}"
export SCENARIOS_DIR="${SCENARIOS_DIR:-scenarios}"
export LOG_FORMAT="${LOG_FORMAT:-pretty}"
export HOST="${HOST:-127.0.0.1}"
# Without ADMIN_TOKEN the admin API and the console are off: make one for this run
# and say how to use it.
if [ -z "${ADMIN_TOKEN:-}" ]; then
  ADMIN_TOKEN="$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
  export ADMIN_TOKEN
  echo "ADMIN_TOKEN for this run (set ADMIN_TOKEN yourself to keep one): $ADMIN_TOKEN" >&2
fi
echo "Console: http://${HOST}:${PORT:-8080}/console (log in with the ADMIN_TOKEN);" \
  "admin API: curl -H \"Authorization: Bearer \$ADMIN_TOKEN\" http://${HOST}:${PORT:-8080}/admin/..." >&2
[ -x "${CARGO_TARGET_DIR:-target}/release/line-survey" ] \
  || echo "The first run compiles the release build (about 6 minutes on 2 cores)." >&2
if [ -z "${LINE_CHANNEL_ACCESS_TOKEN:-}" ]; then
  export LINE_DRY_RUN="${LINE_DRY_RUN:-true}"
fi
cargo run --release --locked --bin line-survey
