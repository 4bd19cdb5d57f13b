#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that the library's ABI is what the headers and the map say.

Three lists of exported names must be identical:
  headers  the FOLIO_EXPORT declarations of the public headers;
  map      the names in the version script (listed one by one, sorted,
           no globs, 'local: *;' in every node);
  shared   the dynamic symbols the shared library defines, each carrying
           the version node the map puts it in (nm -D).
and, for the static archive, every global symbol it defines must be one of
the exports (and every export must be defined in it), so that a program
linking it statically can use any other name for its own functions.

usage:
  check-abi.py shared --header H [--header H...] --map MAP --lib LIB.so [--nm NM]
  check-abi.py static --header H [--header H...] --archive LIB.a [--nm NM]
  check-abi.py selftest --header H [--header H...] --map MAP
               [--lib LIB.so] [--archive LIB.a] [--bad-archive LIB.a] [--nm NM]

selftest runs the checks on broken copies of the real inputs (a header
that loses or gains an export, maps with a glob, a missing, extra or
unsorted name, a wrong node, a shorter export list for the built
libraries, an archive with internal globals) and fails unless every one
of them is caught, and unless the real inputs pass. Exit status: 0 pass, 1 fail, 2 usage.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


class Mismatch(Exception):
    pass


def strip_c_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_exports(paths):
    """{name: 'function' | 'object'} of the FOLIO_EXPORT declarations."""
    out = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = strip_c_comments(f.read())
        # Preprocessor lines (the #define FOLIO_EXPORT itself) declare
        # nothing; a backslash continues one.
        text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)
        for m in re.finditer(r"\bFOLIO_EXPORT\b([^;{]*)", text):
            decl = " ".join(m.group(1).split())
            # A pointer to function object: ... (*name)(...)
            fp = re.match(r"[^(]*\(\s*\*\s*(" + IDENT + r")\s*\)", decl)
            if fp:
                name, kind = fp.group(1), "object"
            elif "(" in decl:
                head = decl.split("(", 1)[0]
                ids = re.findall(IDENT, head)
                if not ids:
                    raise Mismatch(f"{path}: cannot parse 'FOLIO_EXPORT {decl}'")
                name, kind = ids[-1], "function"
            else:
                head = re.split(r"[\[=]", decl, 1)[0]
                ids = re.findall(IDENT, head)
                if not ids:
                    raise Mismatch(f"{path}: cannot parse 'FOLIO_EXPORT {decl}'")
                name, kind = ids[-1], "object"
            if name in out:
                raise Mismatch(f"{path}: {name} declared FOLIO_EXPORT twice")
            out[name] = kind
    if not out:
        raise Mismatch("no FOLIO_EXPORT declaration found in "
                       + ", ".join(paths))
    return out


def map_nodes(path):
    """[(node, [names])] of a version script, checking its form."""
    with open(path, encoding="utf-8") as f:
        text = strip_c_comments(f.read())
    text = re.sub(r"#[^\n]*", "", text)
    nodes = []
    problems = []
    pos = 0
    node_re = re.compile(r"\s*(" + IDENT + r"(?:\.[A-Za-z0-9_]+)*)\s*\{(.*?)\}"
                         r"\s*(" + IDENT + r"(?:\.[A-Za-z0-9_]+)*)?\s*;", re.S)
    while text[pos:].strip():
        m = node_re.match(text, pos)
        if not m:
            raise Mismatch(f"{path}: cannot parse the version script near "
                           f"'{text[pos:pos + 40].strip()}'")
        node, body = m.group(1), m.group(2)
        pos = m.end()
        section = "global"
        names = []
        local = []
        for item in body.split(";"):
            item = item.strip()
            sec = re.match(r"(global|local)\s*:\s*(.*)", item, re.S)
            if sec:
                section, item = sec.group(1), sec.group(2).strip()
            if not item:
                continue
            if section == "local":
                local.append(item)
                continue
            if re.search(r"[*?\[\]]", item) or not re.fullmatch(IDENT, item):
                problems.append(f"{node}: '{item}' is not a plain symbol "
                                "name (no globs, no extern blocks)")
                continue
            names.append(item)
        if local != ["*"]:
            problems.append(f"{node}: the local section must be exactly "
                            f"'local: *;', not {local}")
        if names != sorted(names):
            problems.append(f"{node}: names are not sorted (first out of "
                            "order: " + next(b for a, b in zip(names, names[1:])
                                              if b < a) + ")")
        nodes.append((node, names))
    if not nodes:
        raise Mismatch(f"{path}: no version node")
    seen = {}
    for node, names in nodes:
        for n in names:
            if n in seen:
                problems.append(f"{n} is listed in {seen[n]} and {node}")
            seen[n] = node
    if problems:
        raise Mismatch(f"{path}:\n  " + "\n  ".join(problems))
    return nodes


def run_nm(nm, args):
    try:
        r = subprocess.run([nm] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           check=False)
    except OSError as e:
        raise Mismatch(f"cannot run {nm}: {e}")
    if r.returncode != 0:
        raise Mismatch(f"{nm} {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


FUNC_TYPES = set("Ti")
OBJ_TYPES = set("DBRVGSu")


def shared_symbols(nm, lib):
    """({name: (type, version or None, default?)}, {version nodes})"""
    syms, nodes = {}, set()
    for line in run_nm(nm, ["-D", "--defined-only", lib]).splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        typ, sym = f[-2], f[-1]
        if typ == "A":
            nodes.add(sym)
            continue
        m = re.match(r"([^@]+)(@@?)(.*)$", sym)
        if m:
            syms[m.group(1)] = (typ, m.group(3), m.group(2) == "@@")
        else:
            syms[sym] = (typ, None, False)
    return syms, nodes


def diff(title_a, a, title_b, b):
    """Lines naming what is in one set and not in the other."""
    lines = []
    for n in sorted(set(a) - set(b)):
        lines.append(f"  - {n}: in {title_a}, not in {title_b}")
    for n in sorted(set(b) - set(a)):
        lines.append(f"  + {n}: in {title_b}, not in {title_a}")
    return lines


def check_shared(headers, mapfile, lib, nm):
    exports = header_exports(headers)
    nodes = map_nodes(mapfile)
    in_map = {n: node for node, names in nodes for n in names}
    problems = diff("the headers", exports, "the version script", in_map)
    syms, defined_nodes = shared_symbols(nm, lib)
    problems += diff("the version script", in_map, os.path.basename(lib), syms)
    for name in sorted(set(in_map) & set(syms)):
        typ, ver, default = syms[name]
        if ver != in_map[name] or not default:
            shown = f"@{'@' if default else ''}{ver}" if ver else "no version"
            problems.append(f"  ! {name}: exported with {shown}, the map "
                            f"says @@{in_map[name]}")
        kind = exports.get(name)
        if kind == "function" and typ not in FUNC_TYPES:
            problems.append(f"  ! {name}: a function in the header, nm type {typ}")
        if kind == "object" and typ not in OBJ_TYPES:
            problems.append(f"  ! {name}: an object in the header, nm type {typ}")
    for node, _ in nodes:
        if node not in defined_nodes:
            problems.append(f"  ! version node {node} is not defined in "
                            f"{os.path.basename(lib)}")
    if problems:
        raise Mismatch("exported symbols disagree (- / + : which list has "
                       "the name):\n" + "\n".join(problems))
    return (f"{len(exports)} exports agree: headers, "
            f"{os.path.basename(mapfile)} ({', '.join(n for n, _ in nodes)}), "
            f"{os.path.basename(lib)}")


def archive_globals(nm, archive):
    """{name: [member, ...]} of the global symbols the archive defines."""
    out = {}
    member = "?"
    text = run_nm(nm, ["-g", "--defined-only", archive])
    for line in text.splitlines():
        if line.endswith(":"):
            member = line[:-1]
            continue
        f = line.split()
        if len(f) < 2:
            continue
        typ, sym = f[-2], f[-1]
        # -g lists external symbols; w / v are weak references, not
        # definitions (--defined-only drops them on recent binutils).
        if typ in "Uwv":
            continue
        out.setdefault(sym, []).append(member)
    if not out and not text.strip():
        raise Mismatch(f"{archive}: nm lists no symbol at all")
    return out


def check_static(headers, archive, nm):
    exports = header_exports(headers)
    defined = archive_globals(nm, archive)
    problems = []
    for name in sorted(set(defined) - set(exports)):
        problems.append(f"  + {name}: global in {os.path.basename(archive)} "
                        f"({', '.join(defined[name])}), not an export")
    for name in sorted(set(exports) - set(defined)):
        problems.append(f"  - {name}: exported by the headers, not defined "
                        f"in {os.path.basename(archive)}")
    for name, members in sorted(defined.items()):
        if len(members) > 1:
            problems.append(f"  ! {name}: defined in several members "
                            f"({', '.join(members)})")
    if problems:
        raise Mismatch(f"{os.path.basename(archive)} defines globals other "
                       "than the exported API:\n" + "\n".join(problems))
    return (f"{os.path.basename(archive)}: the {len(defined)} global "
            "symbols are exactly the exports")


def selftest(args):
    """Each broken fixture must be rejected; the real inputs must pass."""
    failures = []
    passed = 0

    def expect(what, fn, ok):
        nonlocal passed
        try:
            msg = fn()
            good = ok
        except Mismatch as e:
            msg = str(e)
            good = not ok
        if good:
            passed += 1
            print(f"ok: {what}")
        else:
            failures.append(what)
            print(f"FAIL: {what}: " + ("accepted" if not ok else "rejected")
                  + f"\n{msg}")

    exports = header_exports(args.header)
    names = sorted(exports)
    if len(names) < 2:
        print(f"FAIL: only {names} found in the headers")
        return 1
    with open(args.map, encoding="utf-8") as f:
        real_map = f.read()
    headers_text = []
    for h in args.header:
        with open(h, encoding="utf-8") as f:
            headers_text.append(f.read())

    with tempfile.TemporaryDirectory(prefix="check-abi.") as tmp:
        def write(name, text):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path

        counter = [0]

        def map_of(names_, node="LIBFOLIO_STATE_0.1", local="*"):
            counter[0] += 1
            body = "".join(f"\t{n};\n" for n in names_)
            return write(f"fixture{counter[0]}.map",
                         f"{node} {{\nglobal:\n{body}"
                         f"local:\n\t{local};\n}};\n")

        def require(cond, msg):
            if not cond:
                raise Mismatch(msg)

        # Header fixtures: one export loses FOLIO_EXPORT (its declaration
        # stays), one extra FOLIO_EXPORT declaration of each kind appears.
        victim = names[len(names) // 2]
        lost = [re.sub(r"\bFOLIO_EXPORT\b(\s+[^;{]*\b" + victim + r"\s*\()",
                       r"\1", t, 1) for t in headers_text]
        if lost == headers_text:
            print(f"FAIL: cannot find the declaration of {victim}")
            return 1
        lost_h = [write(f"lost{i}.h", t) for i, t in enumerate(lost)]
        extra_fn = write("extra_fn.h", "/* FOLIO_EXPORT in a comment */\n"
                         "FOLIO_EXPORT int\nfolio_selftest_extra(struct folio *f,\n"
                         "\tint x);\n")
        extra_obj = write("extra_obj.h",
                          "FOLIO_EXPORT extern const unsigned folio_selftest_table[4];\n"
                          "FOLIO_EXPORT extern int (*folio_selftest_hook)(int);\n")
        got = header_exports([extra_fn, extra_obj])
        want = {"folio_selftest_extra": "function",
                "folio_selftest_table": "object",
                "folio_selftest_hook": "object"}
        expect("the header parser reads functions, arrays and function "
               f"pointers ({sorted(got.items())})",
               lambda: require(got == want, f"got {got}, want {want}"), True)
        expect(f"{len(names)} FOLIO_EXPORT names found, among them "
               "folio_new and folio_engine_mem",
               lambda: require({"folio_new", "folio_engine_mem"} <= set(names),
                               str(names)), True)

        map_cases = [
            ("map with a glob", map_of(names[:-1] + ["folio_*"]), False),
            ("map missing a name", map_of(names[1:]), False),
            ("map with an extra name", map_of(names + ["folio_zzz_extra"]), False),
            ("unsorted map", map_of(names[1:2] + names[:1] + names[2:]), False),
            ("map without 'local: *'", map_of(names, local="folio_x"), False),
        ]

        if args.lib:
            expect("the real headers, map and shared library",
                   lambda: check_shared(args.header, args.map, args.lib, args.nm),
                   True)
            expect(f"a header that no longer exports {victim}",
                   lambda: check_shared(lost_h, args.map, args.lib, args.nm),
                   False)
            expect("a header with an extra export",
                   lambda: check_shared(args.header + [extra_fn], args.map,
                                        args.lib, args.nm), False)
            for what, path, ok in map_cases:
                expect(what, lambda p=path: check_shared(args.header, p,
                                                         args.lib, args.nm), ok)
            wrong_node = write("node.map", real_map.replace(
                "LIBFOLIO_STATE_0.1", "LIBFOLIO_STATE_9.9"))
            expect("a map whose node the library does not carry",
                   lambda: check_shared(args.header, wrong_node, args.lib,
                                        args.nm), False)
            # Both the header and the map lose the name: the library
            # still exports it.
            expect(f"headers and map agree, the library exports {victim} too",
                   lambda: check_shared(lost_h, map_of(
                       [n for n in names if n != victim]), args.lib, args.nm),
                   False)
        else:
            # Without a library the map form checks still run.
            for what, path, ok in map_cases:
                def only_map(p=path):
                    nodes = map_nodes(p)
                    d = diff("the headers", exports, "the map",
                             [n for _, ns in nodes for n in ns])
                    if d:
                        raise Mismatch("\n".join(d))
                expect(what, only_map, ok)

        if args.archive:
            expect("the real static archive",
                   lambda: check_static(args.header, args.archive, args.nm),
                   True)
            expect(f"a static archive checked against headers without {victim}",
                   lambda: check_static(lost_h, args.archive, args.nm), False)
            expect("a static archive checked against an extra export",
                   lambda: check_static(args.header + [extra_fn],
                                        args.archive, args.nm), False)
        if args.bad_archive:
            expect(f"{os.path.basename(args.bad_archive)}, whose internal "
                   "functions are global",
                   lambda: check_static(args.header, args.bad_archive,
                                        args.nm), False)

    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["shared", "static", "selftest"])
    ap.add_argument("--header", action="append", required=True)
    ap.add_argument("--map")
    ap.add_argument("--lib")
    ap.add_argument("--archive")
    ap.add_argument("--bad-archive",
                    help="selftest: an archive with internal globals, which "
                         "the static check must reject")
    ap.add_argument("--nm", default="nm")
    args = ap.parse_args()
    try:
        if args.mode == "shared":
            if not args.map or not args.lib:
                ap.error("shared needs --map and --lib")
            print(check_shared(args.header, args.map, args.lib, args.nm))
        elif args.mode == "static":
            if not args.archive:
                ap.error("static needs --archive")
            print(check_static(args.header, args.archive, args.nm))
        else:
            if not args.map:
                ap.error("selftest needs --map")
            return selftest(args)
    except Mismatch as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
