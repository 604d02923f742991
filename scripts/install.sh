#!/usr/bin/env bash
# Installs Baton on this computer (or into a staging root): binaries, systemd units, example
# configuration and the guides. Run as root on a robot or payload computer:
#
#   scripts/install.sh                      # build (release) and install under /usr/local
#   scripts/install.sh --root /tmp/stage    # stage into a directory instead (no users, no systemctl)
#   scripts/install.sh --bin-dir target/debug --root /tmp/stage   # use already-built binaries
#   scripts/install.sh --prefix /opt/baton  # binaries and guides under /opt/baton (absolute;
#                                           # the units and example configs point there)
#
# Installs: the six programs in PREFIX/bin, the units in /etc/systemd/system/baton-*.service,
# example configuration in /etc/baton, the guides in PREFIX/share/doc/baton. Existing files in
# /etc/baton are never overwritten; the units and programs are (put local changes to a unit in
# a drop-in, /etc/systemd/system/baton-*.service.d/). Then: edit /etc/baton/*, and
#   systemctl enable --now baton-registry baton-manager baton-arbiter@arm baton-arbiter@drive \
#                          baton-sim baton-controller@teleop
# Upgrading is running it again, then `systemctl restart 'baton-*'`. There is no uninstaller:
# disable the units and remove the files listed above.
set -euo pipefail
self="$(readlink -f "$0")"

root=""
prefix=/usr/local
bin_dir=""
# Exit status 64 (EX_USAGE), as every Baton program's for a command line that does not parse.
usage_error() { echo "install.sh: $1 (see --help)" >&2; exit 64; }
# An option's value: present, not empty, and not the next option.
need() { [[ $# -ge 2 && -n "$2" && "$2" != -* ]] || usage_error "$1 needs a directory"; }
# Relative directories are the caller's: made absolute before moving to the repository.
while (($#)); do
    case "$1" in
        --root) need "$@"; root="$(realpath -m "$2")"; shift 2 ;;
        --prefix) need "$@"; prefix="$2"; shift 2
                  [[ "$prefix" == /* ]] || usage_error "--prefix must be absolute (it is written into the units)" ;;
        --bin-dir) need "$@"; bin_dir="$(realpath -m "$2")"; shift 2 ;;
        # The comment block at the top, without its '#'.
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$self"; exit 0 ;;
        *) usage_error "unknown option $1" ;;
    esac
done
if [[ -z "$root" && "$(id -u)" -ne 0 ]]; then
    echo "install.sh: installing into / needs root (run it with sudo), or stage with --root DIR" >&2
    exit 1
fi
cd "$(dirname "$self")/.."
binaries=(registry-server robot-manager arbiter robot-controller robot-sim bus-inspect)
if [[ -z "$bin_dir" ]]; then
    cargo build --release --quiet -p registry-server -p robot-manager -p arbiter -p controllers -p tools
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi
for b in "${binaries[@]}"; do
    [[ -x "$bin_dir/$b" ]] || { echo "install.sh: $bin_dir/$b is missing (build first)" >&2; exit 1; }
done

install -d "$root$prefix/bin" "$root/etc/systemd/system" "$root/etc/baton/arbiters" \
    "$root/etc/baton/controllers" "$root$prefix/share/doc/baton"
for b in "${binaries[@]}"; do
    install -m 0755 "$bin_dir/$b" "$root$prefix/bin/$b"
done
for unit in scripts/systemd/*.service; do
    sed "s|/usr/local/bin/|$prefix/bin/|g; s|/usr/local/share/|$prefix/share/|g" "$unit" \
        > "$root/etc/systemd/system/$(basename "$unit")"
    chmod 0644 "$root/etc/systemd/system/$(basename "$unit")"
done
# Example configuration, never overwriting what is there.
(cd scripts/config && find . -type f) | while read -r f; do
    dest="$root/etc/baton/${f#./}"
    if [[ -e "$dest" ]]; then
        echo "kept existing $dest"
    else
        sed "s|/usr/local/bin/|$prefix/bin/|g" "scripts/config/$f" > "$dest"
        chmod 0644 "$dest"
    fi
done
install -m 0644 docs/*.md "$root$prefix/share/doc/baton/"

if [[ -z "$root" ]]; then
    if ! getent group baton >/dev/null; then groupadd --system baton; fi
    if ! getent passwd baton >/dev/null; then
        useradd --system --gid baton --no-create-home --shell /usr/sbin/nologin baton
    fi
    if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
        systemctl daemon-reload
    fi
fi
echo "installed Baton into ${root:-/} (binaries in $prefix/bin, units in /etc/systemd/system, config in /etc/baton)"
