#!/usr/bin/env bash
# Turn the JSON files of bench/plot/collect.sh into PNG plots.
#
#   bench/plot/plot.sh [DATADIR] [OUTDIR]
#
# DATADIR defaults to doc/plots/data, OUTDIR to doc/plots. Needs python3
# (to flatten the JSON into columns) and gnuplot with the pngcairo
# terminal. Writes randwrite-wa.png, randwrite-mbs.png, fstime.png,
# seqwrite.png, pool-hit-ratio.png, seqread.png, randread-hot.png,
# randread-cold.png, sync-scatter.png and randwrite-shared.png.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
data=${1:-doc/plots/data}
out=${2:-doc/plots}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$data" "$tmp" <<'PY'
import glob, json, os, sys

data, tmp = sys.argv[1], sys.argv[2]

def load(path):
    with open(path) as f:
        return json.load(f)["workloads"][0]

def variants(w):
    return {v["name"]: v for v in w["variants"]}

# (a) one row per folio size: block and whole-folio figures, real and
# modelled.
rows = {}
model_label = ""
for path in glob.glob(os.path.join(data, "randwrite-*-*.json")):
    kind = os.path.basename(path).split("-")[1]
    if kind not in ("posix", "model"):
        continue
    w = load(path)
    fs = int(w["params"]["folio_size"])
    v = variants(w)
    r = rows.setdefault(fs, {})
    for name, key in (("block tracking", "block"), ("whole-folio", "folio")):
        if name in v:
            r["%s_%s_mbs" % (kind, key)] = v[name]["mb_per_s"]
            r["%s_%s_wa" % (kind, key)] = v[name]["write_amplification"]
    if kind == "model" and w.get("device_model"):
        dm = w["device_model"]
        bw = dm.get("bw_bytes_per_s")
        model_label = "lat %g us" % dm["lat_us"]
        if bw:
            model_label = "%s MiB/s, %s" % (format(bw / 2**20, "g"),
                                             model_label)
cols = ["posix_block_mbs", "posix_folio_mbs", "model_block_mbs",
        "model_folio_mbs", "posix_block_wa", "posix_folio_wa",
        "model_block_wa", "model_folio_wa"]
with open(os.path.join(tmp, "randwrite.dat"), "w") as f:
    f.write("# folio_size " + " ".join(cols) + "\n")
    for fs in sorted(rows):
        f.write("%d %s\n" % (fs, " ".join(
            str(rows[fs].get(c, "NaN")) for c in cols)))
kernel = "NaN"
kpath = os.path.join(data, "randwrite-kernel.json")
if os.path.exists(kpath):
    kv = variants(load(kpath))
    if "kernel page cache" in kv:
        kernel = kv["kernel page cache"]["mb_per_s"]

# (b) fstime bars.
fstime_title = ""
fpath = os.path.join(data, "fstime.json")
if os.path.exists(fpath):
    w = load(fpath)
    v = variants(w)
    with open(os.path.join(tmp, "fstime.dat"), "w") as f:
        f.write("# label writes_per_s mb_per_s ns_per_write\n")
        for name, label in (("lib", "library (mem engine)"),
                            ("kernel page cache", "kernel (pwrite, tmpfs)"),
                            ("memcpy", "memcpy (limit)")):
            if name in v:
                f.write('"%s" %g %g %g\n' % (label, v[name]["writes_per_s"],
                                             v[name]["mb_per_s"],
                                             v[name]["ns_per_write"]))
    fstime_title = "%d B writes over a %d KiB region, cache hot" % (
        w["params"]["bs"], w["params"]["size"] // 1024)
    if all(k in v for k in ("lib", "kernel page cache", "memcpy")):
        lib = v["lib"]["writes_per_s"]
        fstime_title += "\\nlibrary = %.2fx kernel, %.2fx memcpy" % (
            lib / v["kernel page cache"]["writes_per_s"],
            lib / v["memcpy"]["writes_per_s"])

# (c) seqwrite lines.
seq_title = ""
spath = os.path.join(data, "seqwrite.json")
if os.path.exists(spath):
    w = load(spath)
    with open(os.path.join(tmp, "seqwrite.dat"), "w") as f:
        f.write("# max_folio write_mbs write_sync_mbs typical_folio\n")
        for v in sorted(w["variants"], key=lambda v: v["max_folio_size"]):
            f.write("%d %g %g %d\n" % (v["max_folio_size"],
                                       v["write_mb_per_s"],
                                       v["write_sync_mb_per_s"],
                                       v["typical_folio_size"]))
    seq_title = "%d KiB sequential writes of %d MiB, %s engine" % (
        w["params"]["bs"] // 1024, w["params"]["size"] >> 20,
        w["params"]["engine"])

# (d) pool sweep: hit ratio against the budget, as a share of the data.
sweep_title = ""
ppath = os.path.join(data, "pool-sweep.json")
if os.path.exists(ppath):
    w = load(ppath)
    with open(os.path.join(tmp, "pool-sweep.dat"), "w") as f:
        f.write("# budget budget_fraction pool lru fifo\n")
        for v in sorted(w["variants"], key=lambda v: v["budget"]):
            f.write("%d %g %g %g %g\n" % (v["budget"], v["budget_fraction"],
                                          v["hit_ratio_pool"],
                                          v["hit_ratio_lru"],
                                          v["hit_ratio_fifo"]))
    sweep_title = "Zipf(%g) over %d MiB in 4 KiB items, %d ops" % (
        w["params"]["theta"], w["params"]["working_set"] >> 20,
        w["params"]["ops"])

# (e) seqread: MB/s per variant, one column per read size.
seqread_title = ""
rpath = os.path.join(data, "seqread.json")
if os.path.exists(rpath):
    w = load(rpath)
    bss = sorted({int(v["bs"]) for v in w["variants"]})
    by = {(v["variant"], int(v["bs"])): v for v in w["variants"]}
    order = []
    for v in w["variants"]:
        if v["variant"] not in order:
            order.append(v["variant"])
    with open(os.path.join(tmp, "seqread.dat"), "w") as f:
        f.write("# variant " + " ".join("mbs_%d" % b for b in bss) + "\n")
        for name in order:
            f.write('"%s" %s\n' % (name, " ".join(
                str(by[(name, b)]["mb_per_s"]) if (name, b) in by
                else "NaN" for b in bss)))
    seqread_title = "cold %d MiB file, median of %d rounds" % (
        w["params"]["size"] >> 20, w["params"]["rounds"])

# (f) randread: hot reads/s and cold reads/s per variant, one file each
# for the variants named "<phase> ...", labelled without the phase.
def randread_dat(w, phase, header, cols):
    with open(os.path.join(tmp, "randread-%s.dat" % phase), "w") as f:
        f.write("# variant %s\n" % header)
        for v in w["variants"]:
            if v["name"].startswith(phase + " "):
                f.write('"%s" %s\n' % (v["name"][len(phase) + 1:], " ".join(
                    "%g" % c(v) for c in cols)))

randread_title = ""
qpath = os.path.join(data, "randread.json")
if os.path.exists(qpath):
    w = load(qpath)
    randread_dat(w, "hot", "reads_per_s ns_per_read",
                 (lambda v: v["reads_per_s"], lambda v: v["ns_per_read"]))
    # The library's bytes are the engine's; pread's the block layer's.
    randread_dat(w, "cold", "reads_per_s bytes_read_per_byte_asked",
                 (lambda v: v["reads_per_s"],
                  lambda v: v.get("engine_bytes_per_byte_asked",
                                  v.get("device_bytes_per_byte_asked", 0))))
    randread_title = "4 KiB random reads of a %d MiB file (seed %d)" % (
        w["params"]["size"] >> 20, w["params"]["seed"])

# (g) sync-scatter: the sync's time per variant and its ratio to the
# kernel's (> 1: faster).
scatter_title = ""
spath = os.path.join(data, "sync-scatter.json")
with open(os.path.join(tmp, "sync-scatter.dat"), "w") as f:
    f.write("# variant sync_ms ratio_to_kernel\n")
    if os.path.exists(spath):
        w = load(spath)
        base = [v["sync_ms"] for v in w["variants"]
                if v["variant"].startswith("kernel")][0]
        for v in w["variants"]:
            f.write('"%s" %g %g\n' % (v["variant"], v["sync_ms"],
                                       base / v["sync_ms"]))
        scatter_title = "%d scattered 4 KiB blocks, median of %d rounds" % (
            w["params"]["blocks"], w["params"]["rounds"])

# (h) syncs of one shared file: library / kernel per job count and engine
# (the median of the per-round ratios folio-bench reports).
def shared_ratio(engine, jobs):
    path = os.path.join(data, "randwrite-shared-%s-%d.json" % (engine, jobs))
    if not os.path.exists(path):
        return float("nan")
    for row in load(path)["table"]:
        if row["comparison"] == "kernel page cache" and \
                row["figure"].startswith("block tracking MB/s"):
            return row["ratio"]
    return float("nan")

with open(os.path.join(tmp, "randwrite-shared.dat"), "w") as f:
    f.write("# jobs posix_ratio uring_ratio\n")
    for jobs in (1, 2, 4, 8):
        f.write("%d %g %g\n" % (jobs, shared_ratio("posix", jobs),
                                 shared_ratio("uring", jobs)))

with open(os.path.join(tmp, "vars.gp"), "w") as f:
    f.write('scatter_title = "%s"\n' % scatter_title)
    f.write('seqread_title = "%s"\n' % seqread_title)
    f.write('randread_title = "%s"\n' % randread_title)
    f.write('model_label = "%s"\n' % model_label)
    f.write("kernel_mbs = %s\n" % kernel)
    f.write('fstime_title = "%s"\n' % fstime_title)
    f.write('seq_title = "%s"\n' % seq_title)
    f.write('sweep_title = "%s"\n' % sweep_title)
PY

gnuplot -e "tmp='$tmp'; out='$out'" "$here/plots.gp"
ls -1 "$out"/*.png
