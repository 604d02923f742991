#!/usr/bin/env bash
# The Baton demo in one command: builds what it needs, then runs the whole system for about
# 20 seconds with narration (see `baton-demo --help`). Pass --hosts 2 (as root) to put the
# payload application on a second host made of Linux namespaces.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
cargo build --release --quiet -p registry-server -p robot-manager -p arbiter -p controllers -p tools
# Cargo puts the binaries under $CARGO_TARGET_DIR when it is set.
exec "${CARGO_TARGET_DIR:-target}/release/baton-demo" "$@"
