# shellcheck shell=bash
# Helpers to run the Cloud Firestore emulator (sourced by the other scripts).
#
# The emulator is started as a plain `java` process, not through `gcloud
# emulators firestore start`: stopping the gcloud wrapper leaves java running,
# while the PID of our own java process is the emulator itself.

EMULATOR_MAIN_CLASS=com.google.cloud.datastore.emulator.firestore.CloudFirestore

emulator_jar() {
  local roots=()
  if command -v gcloud >/dev/null 2>&1; then
    roots+=("$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null)")
  fi
  roots+=(/usr/lib/google-cloud-sdk /usr/share/google-cloud-sdk /opt/google-cloud-sdk "$HOME/google-cloud-sdk")
  local root
  for root in "${roots[@]}"; do
    if [ -n "$root" ] && [ -f "$root/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar" ]; then
      echo "$root/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
      return 0
    fi
  done
  echo "The Cloud Firestore emulator is not installed. Install it with:" >&2
  echo "  gcloud components install cloud-firestore-emulator   (or apt-get install google-cloud-cli-firestore-emulator)" >&2
  return 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# emulator_answers HOST:PORT -> success when an emulator answers there.
emulator_answers() {
  [ "$(curl -s --max-time 1 "http://$1/" 2>/dev/null)" = "Ok" ]
}

# start_emulator [PORT] -> starts it, waits until it answers, and exports
# FIRESTORE_EMULATOR_HOST and EMULATOR_PID. Its output goes to $EMULATOR_LOG.
# EMULATOR_JAVA_OPTS (words, optional) go to its JVM: the benchmark picks the
# garbage collector there.
start_emulator() {
  local port="${1:-$(free_port)}" jar
  jar="$(emulator_jar)" || return 1
  EMULATOR_LOG="${EMULATOR_LOG:-${TMPDIR:-/tmp}/firestore-emulator-$port.log}"
  local java_opts=()
  read -r -a java_opts <<<"${EMULATOR_JAVA_OPTS:-}"
  java -Duser.language=en "${java_opts[@]}" -cp "$jar" "$EMULATOR_MAIN_CLASS" start \
    --host=127.0.0.1 --port="$port" >"$EMULATOR_LOG" 2>&1 &
  EMULATOR_PID=$!
  # Tests that stop an emulator on purpose start one of their own from this jar.
  export EMULATOR_PID FIRESTORE_EMULATOR_HOST="127.0.0.1:$port" FIRESTORE_EMULATOR_JAR="$jar"
  local waited=0
  until emulator_answers "$FIRESTORE_EMULATOR_HOST"; do
    if ! kill -0 "$EMULATOR_PID" 2>/dev/null; then
      echo "The Firestore emulator exited during start-up; its log ($EMULATOR_LOG):" >&2
      cat "$EMULATOR_LOG" >&2
      return 1
    fi
    if [ "$waited" -ge 600 ]; then
      echo "The Firestore emulator did not answer within 60 s; log: $EMULATOR_LOG" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  echo "Firestore emulator ready at $FIRESTORE_EMULATOR_HOST (pid $EMULATOR_PID, log $EMULATOR_LOG)" >&2
}

stop_emulator() {
  if [ -n "${EMULATOR_PID:-}" ] && kill -0 "$EMULATOR_PID" 2>/dev/null; then
    kill "$EMULATOR_PID" 2>/dev/null || true
    wait "$EMULATOR_PID" 2>/dev/null || true
  fi
}
