#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the seed corpus of fuzz_mapping (tests/fuzz/corpus/).

Each seed is a short scenario in the harness's input format (see the
decoder in fuzz_mapping.c): a header (map, completion mode, data seed,
pre-filled store), a geometry, then operations. The seeds cover every
operation and each known bug's situation; the fuzzer mutates from here.

    tests/fuzz/gen_corpus.py [OUTDIR]
"""
import os
import struct
import sys

# Opcode bytes: index into the harness's optable.
WRITE, READ, WBEGIN, TRUNC, INVAL, WB, SYNC = 0, 5, 9, 11, 13, 15, 17
INJECT, CLEAR, BAD, DIRTY, LOOKUP, MODE, REOPEN = 19, 22, 23, 25, 26, 27, 28


def u16(v):
    return list(struct.pack('<H', v & 0xffff))


def u32(v):
    return list(struct.pack('<I', v & 0xffffffff))


def pos(p):
    if p < 65536:
        return [0] + u16(p)
    return [3] + u32(p)


def length(n):
    if n <= 8192:
        return [2] + u16(n - 1)
    if n <= 65536:
        return [4] + u16(n - 1)
    return [5] + u32(n - 1)


def geometry(bshift=12, minshift=None, maxshift=None, flags=0):
    minshift = bshift if minshift is None else minshift
    maxshift = minshift if maxshift is None else maxshift
    return [bshift - 9, minshift - bshift, maxshift - minshift, flags]


STABLE, FOLIO_DIRTY, MAP_FAILURES, DROP = 1, 2, 4, 0xf0


def header(extent_shift=None, scatter=False, poll=False, seed=1,
           init=None, direct=False):
    mp = 0xc0 if direct else 0  # direct: wbegin and lookup are direct I/O
    if extent_shift is not None:
        mp |= ((extent_shift - 9) << 2) | 2 | (1 if scatter else 0)
    out = [mp, 1 if poll else 0] + u16(seed)
    if init is None:
        out += [0]
    else:  # store size = ((b >> 1) * 4099 + x) % 512 KiB
        b, x = init
        out += [(b << 1) | 1, x]
    return out


def write(p, n):
    return [WRITE] + pos(p) + length(n)


def read(p, n, past=False):
    return [READ] + pos(p) + length(n) + [1 if past else 0]


def wbegin(p, n, mode=0, extra=()):
    return [WBEGIN] + pos(p) + length(n) + [mode] + list(extra)


def trunc_shrink(v):
    return [TRUNC, 0] + u32(v)


def trunc_grow(d):
    return [TRUNC, 2] + u16(d)


def trunc_zero():
    return [TRUNC, 5]


def trunc_capacity():
    return [TRUNC, 0xff, 0]


def inval(p, n=0, discard=False):
    c = (4 if discard else 0) | (1 if n else 0)
    return [INVAL] + pos(p) + [c] + (length(n) if n else [])


def wb(start=None, end_len=None, wait=False, budget=None, req=None,
       segs=None, gap=None):
    c = 0
    rest = []
    if start is not None:
        c |= 1
        rest += pos(start)
        if end_len is not None:
            c |= 2
            rest += length(end_len)
    if wait:
        c |= 4
    if budget is not None:
        c |= 8
        rest += u16(budget // 8)
    if req is not None:
        c |= 16
        rest += u16((req - 512) // 8)
    if segs is not None:
        c |= 32
        rest += u16(segs - 1)
    if gap is not None:
        c |= 64
        rest += u16(gap)
    return [WB, c] + rest


def sync(cursor=0):
    return [SYNC, cursor]


ERR = {'EIO': 0, 'ENOSPC': 1, 'EROFS': 2, 'EDQUOT': 3, 'ENOMEM': 4}
KIND = {'read': 0, 'write': 2, 'flush': 5, 'truncate': 6, 'rw': 7}


def inject(kind, err='EIO', short=None, at=None, skip=0, count=1):
    """count 0: forever."""
    c = KIND[kind] | (skip & 3) << 4 | (count & 3) << 6
    e = ERR.get(err, 0)
    if count == 0:
        e |= 0x80
    rest = []
    io = kind in ('read', 'write', 'rw')
    if io and short is not None:
        e |= 8
        rest += u16(short - 1)
    if io and at is not None:
        c |= 8
        rest += pos(at[0]) + length(at[1])
    return [INJECT, c, e] + rest


def clear():
    return [CLEAR]


def bad(case, sub=0, p=0, n=1):
    # the harness picks the case as c % 24 and a sub-case from c >> 5
    c = 32 * sub + (case - 32 * sub) % 24
    return [BAD, c] + pos(p) + length(n)


def dirty(p, n=None):
    return [DIRTY] + pos(p) + ([1] + length(n) if n else [0])


def lookup(p):
    return [LOOKUP] + pos(p)


def write_direct(p, n, dsync=False, bad=None):
    # in a direct input: how (bit 3 DSYNC; low bits 7: bad arguments,
    # bits 4-5 which), then a block-aligned range
    how = 7 | (bad << 4) if bad is not None else (8 if dsync else 0)
    return [WBEGIN, how] + pos(p) + length(n)


def read_direct(p, n, past=False, bad=False):
    how = 6 if bad else (1 if past else 0)
    return [LOOKUP, how] + pos(p) + length(n)


def mode(poll, seed=0):
    return [MODE, (1 if poll else 0) | seed << 1]


def reopen(geo):
    return [REOPEN] + geo


def seeds():
    g4 = geometry(12, 14, 16)
    yield 'basic-write-read', header() + g4 + write(100, 5000) + \
        read(0, 8000) + write(20000, 300) + read(19000, 3000) + sync()
    yield 'prefilled-store', header(init=(60, 7)) + g4 + \
        read(0, 70000) + write(1000, 10) + read(900, 300) + sync() + \
        read(0, 300000)
    yield 'map-4k', header(extent_shift=12) + g4 + write(0, 20000) + \
        sync() + inval(0) + read(0, 20000)
    yield 'map-scatter-1k', header(extent_shift=10, scatter=True) + \
        g4 + write(512, 30000) + sync() + inval(0) + read(0, 40000) + \
        write(3000, 9000) + sync(1) + read(0, 40000)
    yield 'map-512-block-64k', header(extent_shift=9, scatter=True) + \
        geometry(16, 17, 21) + write(70000, 1000) + sync() + inval(0) + \
        read(65536, 70000)
    yield 'poll-writeback', header(poll=True, seed=7) + g4 + \
        write(0, 50000) + wb() + write(4000, 100) + read(0, 60000) + \
        sync() + read(0, 60000)
    yield 'poll-stable', header(poll=True, seed=9) + \
        geometry(12, 14, 16, STABLE) + write(0, 30000) + wb() + \
        write(100, 10) + sync()
    yield 'write-begin-full', header() + g4 + wbegin(100, 5000, 0) + \
        wbegin(8192, 4096, 1) + read(0, 20000) + sync()
    yield 'write-begin-short', header(init=(10, 0)) + g4 + \
        wbegin(100, 9000, 5, u16(7000)) + wbegin(16384, 12000, 4) + \
        wbegin(40000, 100, 3) + read(0, 60000) + sync()
    yield 'write-begin-bad', header() + g4 + write(0, 16384) + \
        wbegin(100, 50, 7, [1] + u16(3000)) + wbegin(5000, 10, 7, [0] +
                                                       u16(20) + [3]) + \
        read(0, 16384) + sync()
    yield 'truncate-shrink-grow', header() + g4 + write(0, 40000) + \
        sync() + trunc_shrink(10000) + read(0, 40000) + trunc_grow(30000) + \
        read(0, 40000) + sync() + read(0, 40000)
    yield 'truncate-dirty', header() + geometry(9, 12, 15) + \
        write(0, 40000) + trunc_shrink(777) + trunc_grow(5000) + \
        read(0, 8000) + trunc_zero() + write(3, 3) + sync()
    yield 'invalidate-keep', header() + g4 + write(0, 30000) + \
        inval(0) + read(0, 30000) + sync() + inval(5000, 10000) + \
        read(0, 30000)
    yield 'invalidate-discard', header(init=(20, 0)) + g4 + \
        write(1000, 20000) + inval(4096, 8192, True) + read(0, 40000) + \
        sync() + read(0, 40000)
    yield 'discard-tail', header() + g4 + write(0, 8192) + sync() + \
        write(8192, 30000) + inval(8192, 0, True) + read(0, 50000) + \
        sync() + write(60000, 10) + sync()
    yield 'writeback-opts', header(extent_shift=13) + \
        geometry(9, 12, 14) + write(0, 3) + write(2000, 3) + \
        write(5000, 700) + write(9000, 40) + \
        wb(0, 6000, wait=True, gap=4096) + \
        wb(budget=512, req=512, segs=1) + wb(wait=True, req=1024,
                                             segs=2) + sync()
    yield 'writeback-range', header(poll=True, seed=3) + g4 + \
        write(0, 100000) + wb(20000, 30000, wait=True) + \
        dirty(0) + wb(wait=True, budget=4096) + dirty(0, 200000) + sync()
    yield 'write-error', header() + g4 + write(0, 20000) + \
        inject('write', 'EIO') + sync() + read(0, 20000) + clear() + \
        sync() + sync()
    yield 'write-error-forever', header(poll=True) + g4 + \
        write(0, 20000) + inject('write', 'ENOSPC', count=0) + sync() + \
        write(100, 100) + sync(1) + inval(0) + read(0, 20000)
    yield 'short-writes', header() + g4 + write(0, 20000) + \
        inject('write', short=700, count=0) + sync() + clear() + sync()
    yield 'short-writes-some', header(extent_shift=11, scatter=True) + \
        g4 + write(0, 20000) + inject('write', short=100, count=3) + \
        sync() + read(0, 20000)
    yield 'read-error', header(init=(30, 0)) + g4 + \
        inject('read', 'EIO', at=(30000, 100)) + read(0, 60000) + \
        clear() + read(0, 60000) + write(30050, 10) + sync()
    yield 'read-short', header(init=(30, 0)) + g4 + \
        inject('read', short=1000, count=2) + read(0, 9000) + \
        wbegin(10000, 100) + write(20001, 5) + clear() + read(0, 60000)
    yield 'read-error-small-extent', header(extent_shift=10, scatter=True,
                                              init=(20, 0)) + g4 + \
        inject('read', 'EIO', at=(2048, 1), skip=0) + read(0, 8192) + \
        read(0, 8192) + clear() + read(0, 8192)
    yield 'flush-error', header() + g4 + write(0, 20000) + sync() + \
        write(100, 5000) + wb(wait=True) + inject('flush', 'EIO') + \
        sync() + clear() + sync() + read(0, 20000)
    yield 'flush-error-twice', header(poll=True) + g4 + \
        write(0, 9000) + inject('flush', 'EROFS', count=2) + sync() + \
        sync(1) + sync() + inval(0) + read(0, 9000)
    yield 'truncate-error', header() + g4 + write(0, 40000) + sync() + \
        inject('truncate', 'EIO') + trunc_shrink(100) + \
        trunc_grow(30000) + read(0, 70000) + sync()
    yield 'truncate-capacity', header() + g4 + write(0, 4096) + \
        trunc_capacity() + read(0, 8192) + sync()
    yield 'drop-on-error', header() + geometry(12, 14, 16, DROP) + \
        write(0, 30000) + inject('write', 'EIO') + sync() + sync() + \
        inval(0) + read(0, 30000) + clear() + write(0, 100) + sync()
    yield 'folio-dirty', header(init=(15, 3)) + \
        geometry(10, 14, 16, FOLIO_DIRTY) + write(5000, 10) + \
        wbegin(20000, 10, 2) + sync() + read(0, 70000)
    yield 'folio-dirty-stable-poll', header(poll=True, seed=5) + \
        geometry(12, 13, 18, FOLIO_DIRTY | STABLE) + \
        write(0, 100000) + wb() + write(50, 50) + wb(wait=True) + sync()
    yield 'reopen', header(init=(5, 1)) + g4 + write(0, 10000) + \
        reopen(geometry(9, 9, 21)) + read(0, 20000) + write(7, 70000) + \
        reopen(geometry(16, 16, 16)) + read(0, 80000)
    yield 'mode-switch', header() + g4 + write(0, 20000) + mode(True, 3) + \
        wb() + write(30000, 100) + mode(False) + sync() + mode(True) + \
        read(0, 40000) + sync()
    # 64 KiB folios of 512-byte blocks (128: the state map is kept
    # outside the header) that reads complete (their maps given back),
    # then writes that run out of memory taking one again: -ENOMEM or a
    # short count, nothing else changed; and direct writes over them,
    # which forget what they cannot mark. The store holds 245947 bytes:
    # reads complete the first three folios.
    big = geometry(9, 16, 16, MAP_FAILURES)
    whole = [b for k in range(4) for b in read(k * 65536, 65536)]
    out = header(init=(60, 7), seed=3) + big + whole
    for i in range(12):
        out += write(4096 * (7 * i + 1), 3000 + 900 * i)
        out += sync() + inval(0) + whole
    yield 'map-failures-buffered', out + sync() + whole
    out = header(init=(60, 7), seed=5, direct=True) + big + whole
    for i in range(8):
        out += write_direct(4096 * (5 * i + 2), 8192)
        out += write(4096 * (5 * i + 4), 100) + sync() + inval(0) + whole
    yield 'map-failures-direct', out + sync() + whole
    yield 'block-64k-folio-2m', header() + geometry(16, 16, 21) + \
        write(1, 200000) + write(300000, 1) + read(0, 400000) + sync() + \
        trunc_shrink(65537) + read(0, 400000)
    yield 'block-512', header(extent_shift=9) + geometry(9, 9, 9) + \
        write(511, 2) + write(1023, 1026) + read(0, 4096) + sync() + \
        inval(0) + read(0, 4096)
    yield 'dirty-ranges-lookup', header() + geometry(10, 12, 14) + \
        write(0, 3000) + write(9000, 100) + dirty(0) + dirty(500, 10000) + \
        lookup(0) + lookup(9000) + lookup(500000) + sync() + dirty(0)
    yield 'overflow-invalidate', header() + g4 + write(0, 20000) + \
        bad(14, 0, 0) + bad(15, 1, 100) + read(0, 20000) + sync()
    yield 'direct-coherence', header(init=(40, 0), direct=True) + g4 + \
        write(100, 20000) + write_direct(4096, 8192) + read(0, 40000) + \
        read_direct(0, 40960) + write_direct(77824, 8192, dsync=True) + \
        write_direct(0, 4096, bad=0) + write_direct(0, 4096, bad=2) + \
        read_direct(0, 4096, bad=True) + sync() + read_direct(0, 90000)
    yield 'direct-faults-map', header(extent_shift=13, scatter=True,
                                       poll=True, direct=True,
                                       init=(20, 0)) + g4 + \
        write(0, 30000) + inject('write', short=3000, count=1) + \
        write_direct(8192, 16384) + read(0, 40000) + \
        inject('flush', 'EIO') + write_direct(0, 4096) + sync() + \
        clear() + write_direct(40960, 4096, dsync=True) + \
        inject('write', 'EIO') + write_direct(0, 8192) + read(0, 50000) + \
        clear() + sync() + read_direct(0, 50000) + trunc_shrink(5000) + \
        write_direct(8192, 4096) + read(0, 20000)
    # bad arguments: every case, twice with different sub-cases
    out = header() + g4 + write(0, 10000)
    for case in range(24):
        if case in (14, 15):
            continue
        out += bad(case, 0, 100, 10)
    yield 'bad-args-1', out
    out = header() + geometry(9, 10, 12) + write(0, 10000)
    for case in range(24):
        if case in (14, 15):
            continue
        for sub in (1, 2, 3, 4, 5, 6, 7):
            out += bad(case, sub, 4000, 3)
    yield 'bad-args-2', out + sync()


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'corpus')
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for name, data in seeds():
        with open(os.path.join(outdir, 'seed-' + name), 'wb') as f:
            f.write(bytes(data))
        n += 1
    print(f'{n} seeds in {outdir}')


if __name__ == '__main__':
    main()
