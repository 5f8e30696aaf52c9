#!/usr/bin/env bash
# Install Debian's headless Chromium and its WebDriver for the web page test (tests/test_web.py).
# Playwright's and Selenium Manager's own browser downloads are not used: only Debian packages
# can be fetched here and on CI, so this is the one way the browser gets onto a fresh machine.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing chromium and chromium-driver (Debian packages) for the web page test…" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
/usr/bin/chromium --version >&2
