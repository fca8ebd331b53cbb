#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser tests
# (test/console_test.go) when no Chromium or Chrome is on PATH. Measured on
# Debian 12: about 60 s (apt-get install -y chromium, 111 packages, after
# apt-get update). Set CHROMEDP_EXEC_PATH to use another browser binary.
set -euo pipefail
for b in "${CHROMEDP_EXEC_PATH:-}" chromium chromium-browser google-chrome google-chrome-stable headless-shell; do
	if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done
sudo=""
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "chromium is missing and this user cannot install it; fix: apt-get install -y chromium as root" >&2
		exit 1
	fi
	sudo=sudo
fi
echo "installing chromium for the console's browser tests (about a minute)..." >&2
start=$(date +%s)
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
echo "chromium installed in $(( $(date +%s) - start )) s" >&2
