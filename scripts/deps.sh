#!/usr/bin/env bash
# Install the Debian packages the build and tests need, if any is missing.
# Sourced by demo.sh and test.sh; safe to run repeatedly.
set -euo pipefail

FOLIO_PACKAGES=(meson ninja-build pkg-config gcc g++ clang libclang-rt-14-dev
                libcmocka-dev liburing-dev liburcu-dev valgrind gnuplot-nox python3
                fuse3 libfuse3-dev sqlite3 fio git libnbd-dev nbdkit libnbd-bin
                ceph-mon ceph-osd python3-rados librados-dev librbd-dev)

missing=()
for p in "${FOLIO_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
