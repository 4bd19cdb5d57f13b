#!/usr/bin/env python3
"""Check that lib/ keeps its layers (doc/design.md, "Layers").

    check-layers.py check LIBDIR    exit 1 with one line per violation
    check-layers.py selftest        the checker catches what it should

Rules:
  - every source file lives in a layer folder: base, alloc, bitmap, folio,
    engine, mapping, pool (the top), or engines (the built-in engines,
    plug-ins on the engine layer);
  - a file includes internal headers by layer path ("folio/folio.h"), from
    its own layer or one below it; mapping and engines are side by side
    and never include each other; public headers ("folio_state.h",
    "folio_state_mem.h", "folio_state_rados.h") may be included anywhere;
  - the folio flag bits (FOLIO_F_*) are the folio layer's: the layers above
    go through its functions.
"""
import os
import re
import sys
import tempfile

RANK = {'base': 0, 'alloc': 1, 'bitmap': 2, 'folio': 3, 'engine': 4,
        'mapping': 5, 'engines': 5, 'pool': 6}
PUBLIC = {'folio_state.h', 'folio_state_mem.h', 'folio_state_rados.h'}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FLAG = re.compile(r'\bFOLIO_F_[A-Z_]+\b')


def check(libdir):
    errors = []
    for root, _, files in os.walk(libdir):
        for name in sorted(files):
            if not name.endswith(('.c', '.h')):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, libdir)
            layer = rel.split(os.sep)[0]
            if layer not in RANK or os.sep not in rel:
                errors.append(f'{rel}: not in a layer folder '
                              f'({", ".join(sorted(RANK))})')
                continue
            text = open(path, encoding='utf-8').read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                line = text.count('\n', 0, m.start()) + 1
                if inc in PUBLIC:
                    continue
                target = inc.split('/')[0]
                if '/' not in inc or target not in RANK:
                    errors.append(f'{rel}:{line}: includes "{inc}", not '
                                  f'a layer path')
                elif target != layer and RANK[target] >= RANK[layer]:
                    errors.append(f'{rel}:{line}: layer {layer} includes '
                                  f'"{inc}" of layer {target}, which is '
                                  f'not below it')
            if layer != 'folio':
                for m in FLAG.finditer(text):
                    line = text.count('\n', 0, m.start()) + 1
                    errors.append(f'{rel}:{line}: uses folio flag bit '
                                  f'{m.group(0)} outside lib/folio/')
    return errors


def selftest():
    cases = {
        'base/ok.h': '#include "folio_state.h"\n',
        'folio/ok.c': '#include "base/base.h"\n#include "folio/folio.h"\n',
        'folio/alloc.c': '#include "alloc/alloc.h"\n',
        'alloc/ok.c': '#include "base/base.h"\n#include "alloc/internal.h"\n',
        'alloc/up.c': '#include "bitmap/bitmap.h"\n',
        'mapping/up.c': '#include "engines/fd.h"\n',
        'folio/up.c': '#include "mapping/mapping.h"\n',
        'engine/bare.c': '#include "folio.h"\n',
        'mapping/flags.c': 'int x = FOLIO_F_DIRTY;\n',
        'pool/ok.c': '#include "mapping/mapping.h"\n',
        'mapping/pool.c': '#include "pool/pool.h"\n',
        'stray.c': '\n',
    }
    want = {'mapping/up.c', 'folio/up.c', 'engine/bare.c', 'alloc/up.c',
            'mapping/flags.c', 'mapping/pool.c', 'stray.c'}
    with tempfile.TemporaryDirectory() as d:
        for rel, text in cases.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), 'w', encoding='utf-8') as f:
                f.write(text)
        got = {e.split(':')[0] for e in check(d)}
    if got != want:
        print(f'selftest: flagged {sorted(got)}, expected {sorted(want)}')
        return 1
    return 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == 'selftest':
        return selftest()
    if len(sys.argv) != 3 or sys.argv[1] != 'check':
        print(__doc__)
        return 2
    errors = check(sys.argv[2])
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
