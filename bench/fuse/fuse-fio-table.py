#!/usr/bin/env python3
# The table of bench/fuse/fuse-fio.sh: medians over its rounds of fio's JSON
# results and of folio-fuse's --stats snapshots taken around each timed
# run.
#
#   fuse-fio-table.py OUTDIR JSON(0|1) WORKLOAD:VARIANT...
import glob
import json
import statistics
import sys

out, as_json, items = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]


def load(path):
    with open(path) as f:
        return json.load(f)


def pct99(lat):
    p = lat.get("percentile", {})
    return p.get("99.000000", 0) / 1000.0 if p else 0.0


def one(path, workload):
    job = load(path)["jobs"][0]
    d = job["write" if "write" in workload else "read"]
    r = {
        "mb_s": d["bw_bytes"] / 1e6,
        "iops": d["iops"],
        "p99_us": pct99(d["clat_ns"]),
        "jobs": 8 if workload == "randwrite" else 1,
    }
    if workload == "randwrite":
        r["sync_p99_us"] = pct99(job.get("sync", {}).get("lat_ns", {}))
    base = path[: -len(".json")]
    try:
        a = load(base + ".after")["mappings"]
        b = load(base + ".before")["mappings"]
    except FileNotFoundError:
        return r
    written = a["bytes_written"] - b["bytes_written"]
    read = a["bytes_read"] - b["bytes_read"]
    if "write" in workload and written:
        r["wa"] = (a["wb_bytes"] - b["wb_bytes"]) / written
    # Hot reads count pre_read's, which is not what they measure.
    if workload in ("seqread", "randread-cold") and read:
        r["ra"] = (a["read_bytes"] - b["read_bytes"]) / read
    return r


rows = []
for item in items:
    w, v = item.split(":")
    runs = [one(p, w) for p in sorted(glob.glob(f"{out}/{w}.{v}.*.json"))]
    if not runs:
        continue
    keys = set().union(*runs)
    med = {k: statistics.median(x[k] for x in runs if k in x) for k in keys}
    med.update(workload=w, variant=v, rounds=len(runs),
               iops_all=[round(x["iops"]) for x in runs])
    rows.append(med)

for r in rows:
    base = next((x for x in rows
                 if x["workload"] == r["workload"]
                 and x["variant"] == "ext4"),
                None)
    r["vs_ext4"] = r["iops"] / base["iops"] if base and base["iops"] else 0
    # What one job waits per operation: where FUSE's round trip shows.
    r["us_per_op"] = r["jobs"] * 1e6 / r["iops"] if r["iops"] else 0

if as_json:
    json.dump(rows, sys.stdout, indent=1)
    print()
    sys.exit(0)

print(f"{'workload':<14}{'variant':<15}{'MB/s':>9}{'IOPS':>9}"
      f"{'us/op':>8}{'p99 us':>9}{'sync p99':>10}{'WA':>7}{'RA':>7}"
      f"{'vs ext4':>9}  IOPS per round")


def opt(r, k, f):
    return format(r[k], f) if k in r else "-"


for r in rows:
    print(f"{r['workload']:<14}{r['variant']:<15}{r['mb_s']:>9.1f}"
          f"{r['iops']:>9.0f}{r['us_per_op']:>8.1f}{r['p99_us']:>9.0f}"
          f"{opt(r, 'sync_p99_us', '.0f'):>10}{opt(r, 'wa', '.2f'):>7}"
          f"{opt(r, 'ra', '.2f'):>7}{r['vs_ext4']:>8.2f}x  "
          + " ".join(str(x) for x in r["iops_all"]))
