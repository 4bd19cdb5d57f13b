#!/usr/bin/env python3
"""Check that lib/ keeps its layers (doc/design.md, "Layers").

    check-layers.py check LIBDIR    exit 1 with one line per violation
    check-layers.py selftest        the checker catches what it should

Rules:
  - every source file lives in a layer folder: base, alloc, bitmap and
    index (side by side), folio, engine, mapping, pool (the top), or
    engines (the built-in engines, plug-ins on the engine layer);
  - a file includes internal headers by layer path ("folio/folio.h"), from
    its own layer or one below it; mapping and engines are side by side
    and never include each other, and so are bitmap and index; public
    headers ("folio_state.h" and the engines' "folio_state_*.h") may be
    included anywhere;
  - the folio flag bits (FOLIO_F_*) are the folio layer's: the layers above
    go through its functions (a comment may name them: only code counts);
  - inside a layer folder, the modules (foo.c with foo.h) include each
    other without a cycle: foo depends on bar when foo.c or foo.h
    includes "layer/bar.h", and no chain of such dependencies leads back
    to where it started;
  - an internal header stays under HEADER_MAX lines (one module's
    interface; a longer one is a module to split), but for the few in
    LARGE, whose one module's interface is that long.
"""
import os
import re
import sys
import tempfile

RANK = {'base': 0, 'alloc': 1, 'bitmap': 2, 'index': 2, 'folio': 3, 'engine': 4,
        'mapping': 5, 'engines': 5, 'pool': 6}
PUBLIC = re.compile(r'folio_state(_[a-z]+)?\.h$')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FLAG = re.compile(r'\bFOLIO_F_[A-Z_]+\b')
HEADER_MAX = 300
# Headers allowed past HEADER_MAX: each is one module's interface, the
# length is its documentation.
LARGE = {'folio/folio.h', 'index/index.h'}


def blank_comments(text):
    """text with every C comment turned into spaces, newlines kept (so line
    numbers stay), and string and character literals left as they are, so
    that a "/*" inside a string opens no comment."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(text[i:j])
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def module_cycles(layer, deps):
    """Cycles of the module graph of one layer folder (deps: module ->
    modules it includes), each as a sorted list of module names: the
    strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def check(libdir):
    errors = []
    deps = {}  # layer -> module -> modules of the same layer it includes
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
            module = os.path.splitext(name)[0]
            mine = deps.setdefault(layer, {}).setdefault(module, set())
            lines = text.count('\n')
            if (name.endswith('.h') and lines > HEADER_MAX and
                    rel.replace(os.sep, '/') not in LARGE):
                errors.append(f'{rel}: {lines} lines, over {HEADER_MAX}: '
                              f'split it by module')
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                line = text.count('\n', 0, m.start()) + 1
                if PUBLIC.match(inc):
                    continue
                target = inc.split('/')[0]
                if '/' not in inc or target not in RANK:
                    errors.append(f'{rel}:{line}: includes "{inc}", not '
                                  f'a layer path')
                elif target != layer and RANK[target] >= RANK[layer]:
                    errors.append(f'{rel}:{line}: layer {layer} includes '
                                  f'"{inc}" of layer {target}, which is '
                                  f'not below it')
                elif target == layer and inc.endswith('.h'):
                    dep = os.path.splitext(inc.split('/', 1)[1])[0]
                    if dep != module:
                        mine.add(dep)
            if layer != 'folio':
                for m in FLAG.finditer(blank_comments(text)):
                    line = text.count('\n', 0, m.start()) + 1
                    errors.append(f'{rel}:{line}: uses folio flag bit '
                                  f'{m.group(0)} outside lib/folio/')
    for layer in sorted(deps):
        for cycle in module_cycles(layer, deps[layer]):
            errors.append(f'{layer}/{cycle[0]}: include cycle among '
                          f'{", ".join(f"{layer}/{c}" for c in cycle)}')
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
        # named in comments only: fine; used in code after a comment, or
        # after a string that looks like one: flagged
        'mapping/comment.c': '/* FOLIO_F_DIRTY\n * FOLIO_F_UPTODATE */\n'
                             'int x; // FOLIO_F_DIRTY\n',
        'mapping/after.c': '/* FOLIO_F_DIRTY */ int x = 1;\n'
                           '// FOLIO_F_DIRTY\nint y = FOLIO_F_DIRTY;\n',
        'mapping/string.c': 'const char *s = "/*";\n'
                            'int y = FOLIO_F_DIRTY; /* */\n',
        'mapping/char.c': "char c = '\"'; int y = FOLIO_F_DIRTY;\n",
        'pool/ok.c': '#include "mapping/mapping.h"\n',
        'mapping/pool.c': '#include "pool/pool.h"\n',
        'index/ok.c': '#include "base/epoch.h"\n#include "index/index.h"\n',
        'index/side.c': '#include "bitmap/bitmap.h"\n',
        'mapping/index.c': '#include "index/index.h"\n',
        'stray.c': '\n',
        # a -> b -> c -> a through .c and .h files: one cycle, reported
        # once under its first module; d only depends on it.
        'engine/a.c': '#include "engine/a.h"\n#include "engine/b.h"\n',
        'engine/a.h': '\n',
        'engine/b.h': '#include "engine/c.h"\n',
        'engine/c.c': '#include "engine/a.h"\n',
        'engine/d.c': '#include "engine/a.h"\n',
        # a header including itself is no cycle
        'alloc/self.h': '#include "alloc/self.h"\n',
        'pool/long.h': '/* */\n' * 301,
        'pool/short.h': '/* */\n' * 300,
        'folio/folio.h': '/* */\n' * 400,
    }
    want = {'mapping/up.c', 'folio/up.c', 'engine/bare.c', 'alloc/up.c',
            'mapping/flags.c', 'mapping/after.c', 'mapping/string.c',
            'mapping/char.c', 'mapping/pool.c', 'index/side.c', 'stray.c',
            'engine/a', 'pool/long.h'}
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
