#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Smoke test of folio-bench's machine-readable output and its usage errors.

    smoke_json.py FOLIO_BENCH [TMPDIR]

Checks shape and sanity, never speed: every key is there, the figures are
positive and finite, the write amplification is ~1 for per-block tracking
and ~folio/block (16 at 64K/4K) for whole-folio tracking, the device model
is labelled, and bad options exit with status 2 and a message.
"""
import json
import math
import subprocess
import sys

BENCH = sys.argv[1]
TMP = sys.argv[2] if len(sys.argv) > 2 else "/var/tmp"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(args, rc=0):
    p = subprocess.run([BENCH] + args, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != rc:
        fail("%s: exit %d, expected %d\n%s" % (" ".join(args), p.returncode,
                                              rc, p.stderr))
    return p


def number(v, where, positive=True):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and \
        math.isfinite(v) and (v > 0 if positive else v >= 0)
    if not ok:
        fail("%s: %r is not a %s number" %
             (where, v, "positive" if positive else "non-negative"))
    return ok


def check_workload(w):
    name = w.get("name", "?")
    if w.get("legacy"):
        return
    for k in ("title", "modelled_device", "device_model", "params",
              "variants", "table", "notes"):
        if k not in w:
            fail("%s: key %r missing" % (name, k))
            return
    if not w["variants"] or not w["table"]:
        fail("%s: no variants or no table rows" % name)
    for v in w["variants"]:
        if not isinstance(v.get("name"), str):
            fail("%s: variant without a name" % name)
        for k, x in v.items():
            if k != "name" and not isinstance(x, str):
                number(x, "%s/%s/%s" % (name, v.get("name"), k), False)
    for r in w["table"]:
        where = "%s/%s" % (name, r.get("figure"))
        for k in ("figure", "value", "unit", "comparison", "ratio",
                  "write_amplification", "headline"):
            if k not in r:
                fail("%s: key %r missing" % (where, k))
        number(r.get("value"), where)
        if r.get("ratio") is not None:
            number(r["ratio"], where + " ratio")
            if r.get("comparison") is None:
                fail("%s: a ratio without a comparison" % where)
        if r.get("write_amplification") is not None:
            number(r["write_amplification"], where + " write amp")
    if not any(r.get("headline") for r in w["table"]):
        fail("%s: no headline row" % name)
    if w["modelled_device"]:
        dm = w["device_model"] or {}
        if dm.get("label") != "(modelled device)":
            fail("%s: modelled run without the label" % name)
        number(dm.get("lat_us"), name + " lat_us", False)


def load(p, what):
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        fail("%s: stdout is not one JSON object: %s" % (what, e))
        return None
    for k in ("tool", "library_version", "default_run", "workloads"):
        if k not in doc:
            fail("%s: top-level key %r missing" % (what, k))
            return None
    for w in doc["workloads"]:
        check_workload(w)
    return doc


def variants(doc, workload):
    for w in doc["workloads"]:
        if w["name"] == workload:
            return {v["name"]: v for v in w["variants"]}
    fail("workload %s missing" % workload)
    return {}


def check_wa(v, lo, hi, what):
    wa = v.get("write_amplification")
    if not number(wa, what) or not lo <= wa <= hi:
        fail("%s: write amplification %r outside [%g, %g]" %
             (what, wa, lo, hi))


# 1. The default run, tiny: every workload, one JSON object.
p = run(["--json", "--size", "4M", "--runtime", "0.05", "--jobs", "2",
         "--dir", TMP])
doc = load(p, "default run")
if doc:
    if doc["default_run"] is not True:
        fail("default run: default_run is not true")
    names = {w["name"] for w in doc["workloads"]}
    for n in ("randwrite-sync", "fstime", "seqwrite", "seqread",
              "randread", "overwrite-threads", "wbpass"):
        if n not in names:
            fail("default run: %s missing" % n)
    # Both layouts, each variant labelled with its own.
    rv = variants(doc, "randwrite-sync")
    for lay, files in (("shared", 1), ("own", 2)):
        for n in ("block tracking", "whole-folio", "kernel page cache"):
            name = "%s (%s)" % (n, lay)
            if name not in rv:
                fail("randwrite-sync: variant %r missing" % name)
            elif rv[name].get("layout") != lay or \
                    rv[name].get("files") != files:
                fail("randwrite-sync/%s: layout %r, files %r" %
                     (name, rv[name].get("layout"), rv[name].get("files")))
        b = rv.get("block tracking (%s)" % lay)
        if b:
            check_wa(b, 0.9, 1.0 + 1e-9, "block tracking " + lay)
        f = rv.get("whole-folio (%s)" % lay)
        if f:
            # 64K folios of 4K blocks: 16, a little less when two threads
            # dirty the same folio before one sync.
            check_wa(f, 12, 16 + 1e-9, "whole-folio " + lay)
    rows = [r["figure"] for w in doc["workloads"]
            if w["name"] == "randwrite-sync" for r in w["table"]
            if r["headline"]]
    for lay in ("shared", "own"):
        if "block tracking (%s) MB/s" % lay not in rows:
            fail("randwrite-sync: no headline row for the %s layout" % lay)
    for v in rv.values():
        for k in ("mb_per_s", "iops", "p50_us", "p99_us"):
            number(v.get(k), "randwrite-sync/%s/%s" % (v["name"], k))

# 1b. One layout alone: plain variant names, the layout in the parameters.
p = run(["randwrite-sync", "--json", "--layout", "shared", "--size", "2M",
         "--runtime", "0.05", "--jobs", "2", "--no-kernel", "--dir", TMP])
doc = load(p, "randwrite-sync --layout shared")
if doc:
    w = doc["workloads"][0]
    if w["params"].get("layout") != "shared" or \
            w["params"].get("files") != 1:
        fail("--layout shared: params %r" % w["params"])
    rv = variants(doc, "randwrite-sync")
    if sorted(rv) != ["block tracking", "whole-folio"]:
        fail("--layout shared: variants %r" % sorted(rv))

# 2. The device model: labelled, and the same amplification on a mem store.
p = run(["randwrite-sync", "--json", "--engine", "mem", "--device-model",
         "bw=1G,lat=5", "--size", "2M", "--runtime", "0.1", "--jobs", "1"])
doc = load(p, "device model")
if doc:
    w = doc["workloads"][0]
    if not w["modelled_device"]:
        fail("device model: modelled_device is false")
    rv = variants(doc, "randwrite-sync")
    if "block tracking" in rv:
        check_wa(rv["block tracking"], 1.0 - 1e-9, 1.0 + 1e-9,
                 "modelled block tracking")
        number(rv["block tracking"].get("device_requests"), "device_requests")
    if "whole-folio" in rv:
        check_wa(rv["whole-folio"], 16 - 1e-9, 16 + 1e-9,
                 "modelled whole-folio")

# 3. The text table of a modelled run says so.
p = run(["randwrite-sync", "--engine", "mem", "--device-model", "lat=1",
         "--size", "1M", "--runtime", "0.05", "--jobs", "1"])
if "(modelled device)" not in p.stdout:
    fail("text output of a modelled run lacks '(modelled device)'")

# 4. The order hint: 128K writes make 128K folios when the max allows.
p = run(["seqwrite", "--json", "--size", "2M", "--runtime", "0.01",
         "--folio-sizes", "4K,2M"])
doc = load(p, "seqwrite")
if doc:
    sv = variants(doc, "seqwrite")
    got = {k: v.get("typical_folio_size") for k, v in sv.items()}
    if got.get("max folio 4K") != 4096 or \
            got.get("max folio 2M") != 128 * 1024:
        fail("seqwrite: typical folio sizes %r" % got)

# 4b. The read workloads: every library variant read from its engine, no
# more requests per MiB than 4 KiB calls make, and the hot variants there.
p = run(["seqread", "--json", "--size", "1M", "--rounds", "1", "--dir", TMP])
doc = load(p, "seqread")
if doc:
    sv = variants(doc, "seqread")
    if "kernel pread 4K" not in sv or "lib posix buffered 128K" not in sv:
        fail("seqread: variants %r" % sorted(sv))
    for name, v in sv.items():
        number(v.get("mb_per_s"), "seqread/%s/mb_per_s" % name)
        if name.startswith("lib"):
            rpm = v.get("read_requests_per_mib")
            if number(rpm, "seqread/%s/read_requests_per_mib" % name) and \
                    rpm > 256:
                fail("seqread/%s: %r requests per MiB" % (name, rpm))
p = run(["randread", "--json", "--size", "1M", "--runtime", "0.05",
         "--dir", TMP])
doc = load(p, "randread")
if doc:
    rv = variants(doc, "randread")
    for n in ("hot lib", "hot pread (tmpfs)", "hot memcpy",
              "cold kernel pread", "cold lib posix buffered"):
        if n not in rv:
            fail("randread: variant %r missing" % n)
        else:
            number(rv[n].get("reads_per_s"), "randread/%s/reads_per_s" % n)
    amp = rv.get("cold lib posix buffered", {}).get(
        "engine_bytes_per_byte_asked")
    if number(amp, "randread cold engine amplification") and amp > 1.1:
        fail("randread: cold 4K reads read %r bytes per byte asked" % amp)

# 5. Usage errors: exit 2 and a message, nothing on stdout.
for args in (["--bogus"], ["nosuchworkload"], ["fstime", "--size", "abc"],
             ["fstime", "--size"], ["randwrite-sync", "--engine", "floppy"],
             ["randwrite-sync", "--tracking", "page"],
             ["randwrite-sync", "--jobs", "0"],
             ["randwrite-sync", "--runtime", "-1"],
             ["randwrite-sync", "--folio-size", "3K"],
             ["randwrite-sync", "--device-model", "bw=fast"],
             ["randwrite-sync", "--dir", "/nonexistent/dir"],
             ["randwrite-sync", "--layout", "sideways"],
             ["randwrite-sync", "--engine", "nbd"],
             ["fstime", "--engine", "nbd", "--uri", "nbd://127.0.0.1"],
             ["randwrite-sync", "--engine", "rados", "--device-model",
              "lat=1"],
             ["randwrite-sync", "--layout", "own", "--files", "2"],
             ["randwrite-sync", "--layout", "own", "--device-model",
              "lat=1", "--engine", "mem"],
             ["wbpass", "--dirty", "x"], ["seqread", "--rounds", "0"],
             ["randread", "--phase", "warm"], ["randread", "--bs", "1000"]):
    p = run(args, rc=2)
    if not p.stderr.strip():
        fail("%s: no message on stderr" % " ".join(args))
    if p.stdout.strip():
        fail("%s: output on stdout" % " ".join(args))

# 6. --help works everywhere.
for args in (["--help"], ["randwrite-sync", "--help"], ["fstime", "--help"]):
    p = run(args)
    if "--size" not in p.stdout:
        fail("%s: no option list" % " ".join(args))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("folio-bench JSON smoke test: all checks passed")
