#!/usr/bin/env bash
# The Baton demo in one command: builds what it needs, then runs the whole system for about
# 20 seconds with narration (see `baton-demo --help`). Pass --hosts 2 (as root) to put the
# payload application on a second host made of Linux namespaces.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
for arg in "$@"; do
    if [ "$arg" = "--help" ] || [ "$arg" = "-h" ]; then
        cat <<'EOF'
Usage: scripts/demo.sh [baton-demo options]

Builds the release binaries (a few minutes the first time, quietly), then runs baton-demo:
a registry, the robot manager, an arm and a drive arbiter, the simulator and three
applications, narrated, for about 20 s; it stops everything and leaves no shared memory.

  --hosts 2    put the payload application on a second host made of Linux namespaces (root)

Every option is passed to baton-demo; once built, `baton-demo --help` lists them all
(under target/release/, or $CARGO_TARGET_DIR/release/ when that is set).
EOF
        exit 0
    fi
done
cargo build --release --quiet -p registry-server -p robot-manager -p arbiter -p controllers -p tools
# Cargo puts the binaries under $CARGO_TARGET_DIR when it is set.
exec "${CARGO_TARGET_DIR:-target}/release/baton-demo" "$@"
