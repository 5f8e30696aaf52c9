#!/usr/bin/env bash
# Install Debian's headless Chromium and its WebDriver for the web page test (tests/integration/test_web.py),
# and shellcheck for the fleet's boot script (scripts/lint.sh).
# Playwright's and Selenium Manager's own browser downloads are not used: only Debian packages
# can be fetched here and on CI, so this is the one way the browser gets onto a fresh machine.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/shellcheck ]; then
  exit 0
fi
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing chromium, chromium-driver and shellcheck (Debian packages) for the tests…" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver shellcheck >/dev/null
/usr/bin/chromium --version >&2
