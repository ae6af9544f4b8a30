# The test suite's tools beyond Rust and the emulator, installed when missing.
# Sourced by scripts/test.sh and .ci/run. `install_test_tools` starts the
# installs in the background (they are network-bound: CI overlaps them with its
# compiles); `wait_for_test_tools` waits for them. Both say what they do.

TEST_TOOLS_LOG="${TMPDIR:-/tmp}/line-survey-test-tools.log"

browser_present() {
  command -v chromedriver >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 \
    && [ -e /usr/share/fonts/opentype/ipafont-gothic/ipag.ttf ]
}

pyyaml_present() {
  python3 -c 'import yaml' 2>/dev/null
}

install_test_tools() {
  if [ "${TEST_TOOLS:-}" = skip ] || [ -n "${TEST_TOOLS_PID:-}" ]; then
    return 0
  fi
  local need_browser=0 need_yaml=0
  browser_present || need_browser=1
  pyyaml_present || need_yaml=1
  if [ "$need_browser" = 0 ] && [ "$need_yaml" = 0 ]; then
    return 0
  fi
  if [ "$need_yaml" = 1 ]; then
    if python3 -m pip --version >/dev/null 2>&1; then
      echo "installing PyYAML with pip (for the LINE schema checks); log: $TEST_TOOLS_LOG" >&2
    else
      echo "NOTICE: PyYAML is missing and pip is not available; the LINE schema checks will skip" >&2
      need_yaml=0
    fi
  fi
  if [ "$need_browser" = 1 ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "installing chromium, chromium-driver and fonts-ipafont-gothic with apt-get (for the browser tests); log: $TEST_TOOLS_LOG" >&2
    else
      echo "NOTICE: chromium/chromium-driver missing and apt-get (as root) unavailable; the browser tests will skip" >&2
      need_browser=0
    fi
  fi
  (
    if [ "$need_yaml" = 1 ]; then
      python3 -m pip install --quiet pyyaml || echo "NOTICE: pip could not install PyYAML"
    fi
    if [ "$need_browser" = 1 ]; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        chromium chromium-driver fonts-ipafont-gothic) \
        || echo "NOTICE: chromium could not be installed"
    fi
  ) >"$TEST_TOOLS_LOG" 2>&1 &
  TEST_TOOLS_PID=$!
  export TEST_TOOLS_PID
}

wait_for_test_tools() {
  if [ -n "${TEST_TOOLS_PID:-}" ]; then
    # A child of this shell, or of the .ci/run that exported it.
    while kill -0 "$TEST_TOOLS_PID" 2>/dev/null; do sleep 1; done
    grep NOTICE "$TEST_TOOLS_LOG" >&2 || true
    unset TEST_TOOLS_PID
  fi
  pyyaml_present || echo "NOTICE: no PyYAML: the LINE schema checks will skip" >&2
  browser_present || echo "NOTICE: no chromium: the browser tests will skip" >&2
}
