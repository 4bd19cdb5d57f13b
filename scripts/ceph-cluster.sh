#!/usr/bin/env bash
# A throwaway one-node Ceph cluster for tests and benchmarks:
#   scripts/ceph-cluster.sh start DIR [POOL]   (POOL defaults to "folio")
#   scripts/ceph-cluster.sh stop DIR
# One monitor on 127.0.0.1 (free ports picked at start), one OSD on
# memstore (data in RAM, gone when it stops), no ceph-mgr (librados and
# librbd do not need one), no systemd, no authentication: daemons are
# plain processes found again through their pid files in DIR. start
# prints DIR/ceph.conf, the file clients pass to rados_conf_read_file();
# it returns once a write to POOL succeeded, so the cluster is usable.
# POOL has size 1 and the rbd application enabled (librbd's image
# creation works without a mgr).
#
# What makes it start in about a second rather than five: a short paxos
# propose interval (the monitor commits the OSD map changes of startup
# at once instead of batching them for 1 s), short PG logs (the default
# keeps 10,000 entries per PG in RAM), and few PGs. Full CI disks would
# otherwise stop the monitor: its free-space warnings are lowered.
set -euo pipefail

die() { echo "ceph-cluster: $*" >&2; exit 1; }

PY=/usr/bin/python3  # Debian's python3-rados lives there, not in a venv

# Wait up to $1 tenths of a second for command $2... to succeed.
wait_for() {
	local n=$1; shift
	for ((i = 0; i < n; i++)); do
		"$@" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
	local dir=$1 pidf pid
	for pidf in "$dir"/osd.*.pid "$dir"/mon.*.pid; do
		[ -e "$pidf" ] || continue
		pid=$(cat "$pidf" 2>/dev/null || true)
		if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
			# Bounded: 5 s, then SIGKILL.
			for ((i = 0; i < 50; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -9 "$pid" 2>/dev/null || true
		fi
		rm -f "$pidf"
	done
}

start() {
	local dir=$1 pool=${2:-folio}
	command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null ||
		die "ceph-mon and ceph-osd are needed (Debian: ceph-mon ceph-osd)"
	"$PY" -c 'import rados' 2>/dev/null ||
		die "python3-rados is needed (Debian: python3-rados)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	alive "$dir/mon.a.pid" && die "a cluster already runs in $dir (stop it first)"
	rm -rf "$dir/mon" "$dir/osd" "$dir/log" "$dir"/*.pid "$dir"/*.asok
	mkdir -p "$dir/mon" "$dir/osd/0" "$dir/log" "$dir/run"
	local fsid port2 port1
	fsid=$(cat /proc/sys/kernel/random/uuid)
	port2=$(free_port)
	port1=$(free_port)
	cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port2,v1:127.0.0.1:$port1]
public network = 127.0.0.1/32
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
log file = $dir/log/\$name.log
pid file = $dir/\$name.pid
run dir = $dir/run
crash dir = $dir/log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = .97
mon osd backfillfull ratio = .96
mon osd nearfull ratio = .95
osd crush chooseleaf type = 0
paxos propose interval = 0.01
mon client hunt interval = 0.1
client mount timeout = 10
rados osd op timeout = 10

# Clients (tests, benchmarks) neither log nor open an admin socket:
# many run at once and would fight over one path.
[client]
log file = /dev/null
admin socket =

[mon.a]
admin socket = $dir/run/\$name.asok
mon data = $dir/mon
mon initial members = a

# memstore keeps objects in RAM; device bytes is its capacity (used
# lazily). A full OSD does not fail writes, it holds them (clients then
# see their timeout), so benchmarks clean up after themselves.
[osd.0]
admin socket = $dir/run/\$name.asok
osd objectstore = memstore
osd data = $dir/osd/0
memstore page set = true
memstore device bytes = 4294967296
osd min pg log entries = 10
osd max pg log entries = 10
osd pg log trim min = 10
osd pg log dups tracked = 10
osd op num shards = 2
osd op num threads per shard = 2
osd heartbeat grace = 20
osd journal size = 0
EOF
	monmaptool --create --fsid "$fsid" \
		--addv a "[v2:127.0.0.1:$port2,v1:127.0.0.1:$port1]" \
		"$dir/monmap" >/dev/null || die "monmaptool failed"
	ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" \
		>"$dir/log/mkfs-mon.out" 2>&1 ||
		die "ceph-mon --mkfs failed: $(tail -3 "$dir/log/mkfs-mon.out")"
	ceph-mon -c "$dir/ceph.conf" -i a >"$dir/log/mon.out" 2>&1 ||
		die "ceph-mon did not start: see $dir/log/"
	wait_for 50 alive "$dir/mon.a.pid" ||
		die "ceph-mon wrote no pid file in 5 s: see $dir/log/mon.a.log"

	# The OSD's id and its entry in the OSD map, and the pool, in one
	# client session (each `ceph` command would pay for its own).
	local uuid
	uuid=$(cat /proc/sys/kernel/random/uuid)
	"$PY" - "$dir/ceph.conf" "$uuid" "$pool" <<'PY' || die "monitor setup failed"
import json, sys, rados
conf, uuid, pool = sys.argv[1:4]
c = rados.Rados(conffile=conf, conf={"client_mount_timeout": "10"})
c.connect(timeout=10)
def cmd(**kw):
    ret, out, err = c.mon_command(json.dumps(kw), b"", timeout=10)
    if ret != 0:
        sys.exit(f"mon command {kw['prefix']}: {ret} {err}")
    return out
osd = int(json.loads(cmd(prefix="osd new", uuid=uuid, format="json"))["osdid"])
assert osd == 0, osd
cmd(prefix="osd pool create", pool=pool, pg_num=16, pgp_num=16)
cmd(prefix="osd pool set", pool=pool, var="size", val="1", yes_i_really_mean_it=True)
cmd(prefix="osd pool application enable", pool=pool, app="rbd", yes_i_really_mean_it=True)
c.shutdown()
PY
	ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" \
		--no-mon-config >"$dir/log/mkfs-osd.out" 2>&1 ||
		die "ceph-osd --mkfs failed: $(tail -3 "$dir/log/mkfs-osd.out")"
	ceph-osd -c "$dir/ceph.conf" -i 0 >"$dir/log/osd.out" 2>&1 ||
		die "ceph-osd did not start: see $dir/log/"
	wait_for 50 alive "$dir/osd.0.pid" ||
		die "ceph-osd wrote no pid file in 5 s: see $dir/log/osd.0.log"

	# Usable once a write to the pool succeeds (no mgr: no PG states).
	"$PY" - "$dir/ceph.conf" "$pool" <<'PY' || die "pool $pool not writable in 30 s: see $dir/log/"
import sys, time, rados
conf, pool = sys.argv[1:3]
c = rados.Rados(conffile=conf, conf={"rados_osd_op_timeout": "2"})
c.connect(timeout=10)
io = c.open_ioctx(pool)
end = time.time() + 30
while True:
    try:
        io.write_full("ceph-cluster.probe", b"ok")
        io.remove_object("ceph-cluster.probe")
        break
    except rados.Error:
        if time.time() > end:
            raise
        time.sleep(0.05)
io.close()
c.shutdown()
PY
	echo "$dir/ceph.conf"
}

case "${1:-}" in
start) [ $# -ge 2 ] || die "usage: $0 start DIR [POOL]"; start "$2" "${3:-folio}" ;;
stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
*) die "usage: $0 start DIR [POOL] | stop DIR" ;;
esac
