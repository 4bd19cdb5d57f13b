#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Keep doc/api.md honest against the public headers (include/folio_state.h
include/folio_state_mem.h and include/folio_state_rados.h).

Commands (paths default to the ones next to this script):

  check      Read every header given with --header (each may be given
             more than once; the names of all of them count together) and
             fail (exit 1) when
             - a FOLIO_EXPORT function of a header has no doc block (a
               /** comment right before it that starts with its name), or
               its doc block lacks an "@name:" line for one of its
               parameters, a "Context:" line (thread and lock rules) or,
               unless it returns void, a "Return:" line;
             - a FOLIO_EXPORT function of a header is not mentioned in
               the guide's text (outside code blocks and link targets):
               the guide shows each function in use and points to its
               doc block instead of restating it;
             - the guide names a lower-case folio_* identifier that the
               header does not declare (function, struct, enum, typedef),
               or calls as a function (name followed by '(') something
               that is not an exported function;
             - the guide names an upper-case FOLIO_* constant the header
               does not define;
             - an excerpt block, marked by a line
                 <!-- example: FILE [REGION] -->
               right before its ``` fence, differs from doc/examples/FILE
               (the whole file, or the dedented lines between
               'doc:begin REGION' and 'doc:end REGION');
             - a program in doc/examples/ is not mentioned in the guide;
             - a link to '#anchor' matches no heading, or a relative link
               to a file (say ../include/folio_state.h) names no file.
  fragments  Write the guide's C fragments into one C file (--out) that
             compiles only if every fragment is correct C against the
             header. A ```c block is the body of a function with the
             parameters listed in FRAGMENT_PARAMS below; one marked
             <!-- c:file --> goes to file scope; <!-- c:skip --> and
             excerpt blocks are left out.
  update     Rewrite the excerpt blocks of the guide from their files.
  selftest   Check that 'check' notices each kind of mistake.
"""

import argparse
import difflib
import os
import re
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_HEADERS = [os.path.join(HERE, '..', 'include', name)
                   for name in ('folio_state.h', 'folio_state_mem.h')]
DEFAULT_DOC = os.path.join(HERE, 'api.md')
DEFAULT_EXAMPLES = os.path.join(HERE, 'examples')

# What a body fragment may use without declaring it (see doc/api.md).
FRAGMENT_PARAMS = ('struct folio_mapping *m, struct folio_engine *e, '
                   'struct folio *f, int fd, char *buf, size_t len, '
                   'uint64_t pos, folio_errseq_t cursor')

FRAGMENT_INCLUDES = [
    'errno.h', 'fcntl.h', 'pthread.h', 'stdatomic.h', 'stdbool.h',
    'stdint.h', 'stdio.h', 'stdlib.h', 'string.h', 'sys/stat.h',
    'sys/types.h', 'sys/uio.h', 'time.h', 'unistd.h', 'folio_state.h',
    'folio_state_mem.h', 'folio_state_rados.h',
]

# folio_* words in the guide that are not C identifiers of the header.
NON_API_WORDS = {
    'folio_state',      # as in folio_state.h / libfolio-state
    'folio_state_dep',  # the meson dependency
}

MARK_RE = re.compile(r'^<!--\s*(example:\s*(\S+)(?:\s+(\S+))?|c:file|c:skip)'
                     r'\s*-->\s*$')
FENCE_RE = re.compile(r'^```(\w*)\s*$')


# ---------------------------------------------------------------------
# The header
# ---------------------------------------------------------------------

def strip_c_comments(text):
    """Remove /* */ and // comments, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


class Header:
    """The public names of one header, or of several taken together."""

    def __init__(self, paths):
        if isinstance(paths, str):
            paths = [paths]
        code = ''
        for path in paths:
            with open(path, encoding='utf-8') as fh:
                code += strip_c_comments(fh.read()) + '\n'
        self.functions = []
        for m in re.finditer(r'\bFOLIO_EXPORT\b([^;{]*?)\(', code):
            line_start = code.rfind('\n', 0, m.start()) + 1
            if code[line_start:m.start()].lstrip().startswith('#'):
                continue  # the #define of FOLIO_EXPORT itself
            words = re.findall(r'[A-Za-z_]\w*', m.group(1))
            if words:
                self.functions.append(words[-1])
        self.types = set(re.findall(r'\b(?:struct|enum|union)\s+(folio_\w+)',
                                    code))
        self.types |= set(re.findall(r'\btypedef\b[^;]*?\b(folio_\w+)\s*;',
                                     code))
        self.constants = set(re.findall(r'\bFOLIO_[A-Z0-9_]+\b', code))
        self.lower = set(self.functions) | self.types


def comment_spans(text):
    """(start, end) of every /* */ comment of a C text."""
    spans = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            spans.append((i, j))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            i = j + 1
        else:
            i += 1
    return spans


def split_params(plist):
    """Parameter names of a C parameter list (the text between the
    parentheses): the name of a function pointer is the one in (*name)."""
    parts, depth, cur = [], 0, ''
    for ch in plist:
        if ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    names = []
    for p in parts:
        p = p.strip()
        if not p or p == 'void' or p == '...':
            continue
        fp = re.search(r'\(\s*\*\s*([A-Za-z_]\w*)\s*\)', p)
        if fp:
            names.append(fp.group(1))
            continue
        p = re.sub(r'\[[^]]*\]', '', p)
        words = re.findall(r'[A-Za-z_]\w*', p)
        if words:
            names.append(words[-1])
    return names


class Decl:
    """One FOLIO_EXPORT function as the header writes it."""

    def __init__(self, name, params, returns_void, doc, line):
        self.name = name
        self.params = params
        self.returns_void = returns_void
        self.doc = doc      # text of the /** */ block before it, or None
        self.line = line    # 1-based line of the declaration


def header_decls(path):
    """Every FOLIO_EXPORT function of a header with its doc block."""
    with open(path, encoding='utf-8') as fh:
        text = fh.read()
    spans = comment_spans(text)

    def in_comment(pos):
        return any(a <= pos < b for a, b in spans)

    decls = []
    for m in re.finditer(r'\bFOLIO_EXPORT\b', text):
        line_start = text.rfind('\n', 0, m.start()) + 1
        if in_comment(m.start()) or \
                text[line_start:m.start()].lstrip().startswith('#'):
            continue
        open_paren = text.find('(', m.end())
        if open_paren < 0:
            continue
        head = text[m.end():open_paren]
        words = re.findall(r'[A-Za-z_]\w*', head)
        if not words:
            continue
        name = words[-1]
        returns_void = words[:-1] == ['void'] and '*' not in head
        depth, j = 0, open_paren
        while j < len(text):
            if text[j] == '(':
                depth += 1
            elif text[j] == ')':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        params = split_params(text[open_paren + 1:j])
        doc = None
        before = text[:line_start].rstrip()
        for a, b in spans:
            if b == len(before) and text.startswith('/**', a):
                doc = text[a:b]
        decls.append(Decl(name, params, returns_void, doc,
                          text.count('\n', 0, m.start()) + 1))
    return decls


def check_header_docs(path):
    """Errors of the doc blocks of one header's exported functions."""
    errors = []
    where = os.path.relpath(path)
    for d in header_decls(path):
        at = '%s:%d: %s()' % (where, d.line, d.name)
        if d.doc is None:
            errors.append('%s has no /** doc block right before it' % at)
            continue
        body = re.sub(r'^\s*/\*\*|\*/\s*$', '', d.doc)
        lines = [re.sub(r'^\s*\*\s?', '', l) for l in body.split('\n')]
        first = next((l for l in lines if l.strip()), '')
        if not re.match(r'\s*%s\(\)' % re.escape(d.name), first):
            errors.append('%s: its doc block does not start with "%s()"'
                          % (at, d.name))
            continue
        for p in d.params:
            if not any(re.match(r'\s*@%s:' % re.escape(p), l)
                       for l in lines):
                errors.append('%s: its doc block has no "@%s:" line'
                              % (at, p))
        if not any(re.match(r'\s*Context:', l) for l in lines):
            errors.append('%s: its doc block has no "Context:" line (who '
                          'may call it, which locks, may it sleep)' % at)
        if not d.returns_void and \
                not any(re.match(r'\s*Return:', l) for l in lines):
            errors.append('%s: its doc block has no "Return:" line' % at)
    return errors


# ---------------------------------------------------------------------
# The guide
# ---------------------------------------------------------------------

class Block:
    def __init__(self, lang, mark, start, lines):
        self.lang = lang    # info string after ```
        self.mark = mark    # (kind, file, region) or None
        self.start = start  # 1-based line number of the first code line
        self.lines = lines  # code lines, without the fences


def parse_doc(text):
    """Split the guide into prose lines and fenced blocks."""
    lines = text.split('\n')
    blocks, prose = [], []
    i = 0
    pending = None
    while i < len(lines):
        line = lines[i]
        fm = FENCE_RE.match(line)
        if fm:
            j = i + 1
            while j < len(lines) and not lines[j].startswith('```'):
                j += 1
            blocks.append(Block(fm.group(1), pending, i + 2, lines[i + 1:j]))
            pending = None
            i = j + 1
            continue
        mm = MARK_RE.match(line)
        if mm:
            if mm.group(2):
                pending = ('example', mm.group(2), mm.group(3))
            else:
                pending = (mm.group(1), None, None)
        elif line.strip():
            pending = None
        prose.append((i + 1, line))
        i += 1
    return prose, blocks


def slug(heading):
    """GitHub's anchor for a heading text."""
    s = heading.strip().lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def example_text(examples_dir, name, region):
    """The code an excerpt must match, or raise ValueError."""
    path = os.path.join(examples_dir, name)
    if not os.path.isfile(path):
        raise ValueError('no such example file: doc/examples/%s' % name)
    with open(path, encoding='utf-8') as fh:
        lines = fh.read().rstrip('\n').split('\n')
    if region is None:
        return lines
    begin = [i for i, l in enumerate(lines)
             if re.search(r'\bdoc:begin\s+%s\b' % re.escape(region), l)]
    end = [i for i, l in enumerate(lines)
           if re.search(r'\bdoc:end\s+%s\b' % re.escape(region), l)]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        raise ValueError('doc/examples/%s: region %r needs one doc:begin '
                         'and one doc:end line' % (name, region))
    body = '\n'.join(lines[begin[0] + 1:end[0]])
    return textwrap.dedent(body).split('\n')


def check(header_paths, doc_path, examples_dir, out=sys.stderr):
    if isinstance(header_paths, str):
        header_paths = [header_paths]
    hdr = Header(header_paths)
    with open(doc_path, encoding='utf-8') as fh:
        text = fh.read()
    prose, blocks = parse_doc(text)
    errors = []
    docname = os.path.relpath(doc_path)

    def err(line, msg):
        errors.append('%s:%d: %s' % (docname, line, msg))

    if not hdr.functions:
        errors.append('%s: no FOLIO_EXPORT function found'
                      % ', '.join(header_paths))

    # 0. Every exported function's doc block names each parameter and
    #    has Context: and Return: lines.
    for path in header_paths:
        errors += check_header_docs(path)

    # 1. Every exported function is mentioned in the guide's text (not
    #    only in code, not only as a link target).
    headings = [(n, l) for n, l in prose if l.startswith('#')]
    named = set()
    for _, l in prose:
        l = re.sub(r'\]\([^)]*\)', ']', l)
        named |= set(re.findall(r'\bfolio_\w+', l))
    for fn in hdr.functions:
        if fn not in named:
            errors.append('%s: %s() (exported by the header) is not '
                          'mentioned in the guide' % (docname, fn))

    # 2. Every folio_* / FOLIO_* name in the guide exists in the header.
    all_lines = list(prose)
    for b in blocks:
        all_lines += [(b.start + k, l) for k, l in enumerate(b.lines)]
    for n, l in all_lines:
        # file names (folio_state.h, folio_basics.c) are not identifiers
        scrub = re.sub(r'\b\w+\.(?:c|h|md|py|sh)\b', ' ', l)
        for m in re.finditer(r'(?<![\w-])(folio_[a-z0-9_]+)(\*)?(\s*\()?',
                             scrub):
            name, star, call = m.groups()
            if star:  # a family: folio_test_*()
                if not any(f.startswith(name) for f in hdr.lower):
                    err(n, 'no header name starts with %s' % name)
                continue
            if name in NON_API_WORDS:
                continue
            if name not in hdr.lower:
                err(n, '%s is not declared in the header' % name)
            elif call and name not in hdr.functions:
                err(n, '%s is called like a function but is not an '
                    'exported function' % name)
        for m in re.finditer(r'(?<![\w-])(FOLIO_[A-Z0-9_]+)(\*)?', scrub):
            name, star = m.groups()
            if star:  # a family: FOLIO_BECAME_*
                if not any(c.startswith(name) for c in hdr.constants):
                    err(n, 'no header constant starts with %s' % name)
            elif name not in hdr.constants:
                err(n, '%s is not defined in the header' % name)

    # 3. Excerpts match their files.
    for b in blocks:
        if not b.mark or b.mark[0] != 'example':
            continue
        _, name, region = b.mark
        try:
            want = example_text(examples_dir, name, region)
        except ValueError as e:
            err(b.start - 1, str(e))
            continue
        if b.lines != want:
            diff = difflib.unified_diff(
                want, b.lines, 'doc/examples/%s%s' % (
                    name, ' (%s)' % region if region else ''),
                '%s:%d' % (docname, b.start), lineterm='', n=1)
            err(b.start - 1, 'excerpt differs from its file (run '
                '"doc/check-api-doc.py update"):\n  ' + '\n  '.join(diff))

    # 4. Every example program is mentioned.
    if os.path.isdir(examples_dir):
        for name in sorted(os.listdir(examples_dir)):
            if name.endswith('.c') and name not in text:
                errors.append('%s: doc/examples/%s is never mentioned'
                              % (docname, name))

    # 5. Internal links resolve.
    anchors = set()
    for _, l in headings:
        anchors.add(slug(l.lstrip('#')))
    for n, l in prose:
        for m in re.finditer(r'\]\(#([^)]+)\)', l):
            if m.group(1) not in anchors:
                err(n, 'link to #%s matches no heading' % m.group(1))
        # Relative links to files of the repository must lead somewhere.
        for m in re.finditer(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', l):
            target = m.group(1)
            if re.match(r'[a-z][a-z0-9+.-]*:', target):
                continue  # https:, mailto:, ...
            path = os.path.join(os.path.dirname(os.path.abspath(doc_path)),
                                target)
            if not os.path.exists(path):
                err(n, 'link to %s: no such file' % target)

    for e in errors:
        print(e, file=out)
    if not errors:
        print('%s: %d exported functions, all documented in the headers and '
              'mentioned in the guide; %d code blocks, %d excerpts checked' % (
                  docname, len(hdr.functions), len(blocks),
                  sum(1 for b in blocks if b.mark and
                      b.mark[0] == 'example')), file=out)
    return not errors


# ---------------------------------------------------------------------
# Fragments
# ---------------------------------------------------------------------

def c_string(s):
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'


def fragments(doc_path, out_path, line_path=None):
    with open(doc_path, encoding='utf-8') as fh:
        _, blocks = parse_doc(fh.read())
    src = line_path or doc_path
    out = ['/* Generated from %s by doc/check-api-doc.py: do not edit. */'
           % os.path.basename(doc_path)]
    out += ['#include <%s>' % h for h in FRAGMENT_INCLUDES]
    # Fragments show calls, not complete functions: values they compute
    # and leave unused are fine, and a local may shadow a parameter.
    out.append('#ifdef __clang__')
    out.append('#pragma clang diagnostic ignored "-Wunknown-warning-option"')
    out.append('#endif')
    for w in ('unused-variable', 'unused-but-set-variable',
              'unused-but-set-parameter', 'unused-function', 'unused-label',
              'shadow'):
        out.append('#pragma GCC diagnostic ignored "-W%s"' % w)
    out.append('')
    names = []
    for b in blocks:
        if b.lang != 'c' or (b.mark and b.mark[0] in ('example', 'c:skip')):
            continue
        if b.mark and b.mark[0] == 'c:file':
            out.append('#line %d %s' % (b.start, c_string(src)))
            out += b.lines
            out.append('')
            continue
        name = 'fragment_%d' % b.start
        names.append(name)
        out.append('static int %s(%s)' % (name, FRAGMENT_PARAMS))
        out.append('{')
        out.append('{ /* own scope: a fragment may redeclare a parameter */')
        out.append('#line %d %s' % (b.start, c_string(src)))
        out += b.lines
        out.append('}')
        out.append('\treturn 0;')
        out.append('}')
        out.append('')
    out.append('typedef int (*fragment_fn)(%s);' % FRAGMENT_PARAMS)
    out.append('static const fragment_fn all_fragments[] = {')
    out += ['\t%s,' % n for n in names] or ['\t0,']
    out.append('};')
    out.append('')
    out.append('int main(void)')
    out.append('{')
    out.append('\tprintf("%%zu fragments of %s compile and link\\n", '
               'sizeof(all_fragments) / sizeof(all_fragments[0]));'
               % os.path.basename(doc_path))
    out.append('\treturn 0;')
    out.append('}')
    tmp = out_path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as fh:
        fh.write('\n'.join(out) + '\n')
    os.replace(tmp, out_path)
    return len(names)


# ---------------------------------------------------------------------
# Update
# ---------------------------------------------------------------------

def update(doc_path, examples_dir):
    with open(doc_path, encoding='utf-8') as fh:
        lines = fh.read().split('\n')
    _, blocks = parse_doc('\n'.join(lines))
    changed = 0
    # Replace from the end so earlier line numbers stay valid.
    for b in reversed(blocks):
        if not b.mark or b.mark[0] != 'example':
            continue
        want = example_text(examples_dir, b.mark[1], b.mark[2])
        if want != b.lines:
            first = b.start - 1
            lines[first:first + len(b.lines)] = want
            changed += 1
    if changed:
        with open(doc_path, 'w', encoding='utf-8') as fh:
            fh.write('\n'.join(lines))
    print('%d excerpt(s) updated' % changed)
    return True


# ---------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------

SELFTEST_HEADER = '''
#define FOLIO_EXPORT __attribute__((visibility("default")))
#define FOLIO_FLAG_A 1u
struct folio;
typedef unsigned long folio_cookie_t;
/* FOLIO_EXPORT int folio_commented_out(void); */
/**
 * folio_alpha() - the first function.
 * @f: a folio.
 * Context: any thread.
 * Return: 0.
 */
FOLIO_EXPORT int folio_alpha(struct folio *f);
/**
 * folio_beta() - a declaration over several lines.
 * @f:     a folio.
 * @flags: flags.
 *
 * Context: any thread.
 * Return: @f.
 */
FOLIO_EXPORT struct folio *
folio_beta(struct folio *f,
           int flags);
'''

# Header mistakes 'check' must find (each replaces a piece of
# SELFTEST_HEADER), and variants it must accept.
SELFTEST_HEADER_CASES = {
    'missing parameter line': (' * @flags: flags.\n', '', False),
    'parameter named without colon': (' * @flags: flags.', ' * flags.',
                                      False),
    'missing Context': (' * Context: any thread.\n * Return: 0.',
                        ' * Return: 0.', False),
    'missing Return': (' * Return: @f.\n', '', False),
    'no doc block': ('''/**
 * folio_alpha() - the first function.
 * @f: a folio.
 * Context: any thread.
 * Return: 0.
 */
''', '', False),
    'plain comment is no doc block': ('/**\n * folio_alpha()',
                                      '/*\n * folio_alpha()', False),
    'doc block of another function': (' * folio_alpha() - the first',
                                      ' * folio_beta() - the first', False),
    'void function needs no Return': (
        'FOLIO_EXPORT int folio_alpha(struct folio *f);',
        'FOLIO_EXPORT void folio_alpha(struct folio *f);', True),
    'pointer return still needs Return': (
        'FOLIO_EXPORT int folio_alpha(struct folio *f);',
        'FOLIO_EXPORT void *folio_alpha(struct folio *f);', True),
    'function pointer parameter': (
        '           int flags);',
        '           int (*flags)(int pos, void *arg));', True),
    'function pointer parameter undocumented': (
        '           int flags);',
        '           int (*fn)(int pos, void *arg));', False),
}

SELFTEST_DOC = '''# Guide
See [alpha](#using-alpha) and example.c.
`folio_beta()` returns its folio.
<!-- example: example.c part -->
```c
int x = FOLIO_FLAG_A;
```
### Using alpha
`folio_alpha()` takes a folio.
```c
folio_alpha(f);
```
`folio_cookie_t` and `struct folio`; see [the header](h.h).
'''

# A second header: its names count together with the first one's.
SELFTEST_HEADER2 = '''
#include "h.h"
#define FOLIO_FLAG_G 2u
/**
 * folio_gamma() - from the second header.
 * @f: a folio.
 * Context: any thread.
 * Return: 0.
 */
FOLIO_EXPORT int folio_gamma(struct folio *f);
'''

SELFTEST_EXAMPLE = '''int main(void)
{
	/* doc:begin part */
	int x = FOLIO_FLAG_A;
	/* doc:end part */
	return x;
}
'''


def selftest():
    cases = {
        'good': (SELFTEST_DOC, True),
        'function not mentioned': (SELFTEST_DOC.replace(
            '`folio_beta()` returns its folio.\n', ''), False),
        'function only in code': (SELFTEST_DOC.replace(
            '`folio_beta()` returns its folio.\n',
            '```c\nfolio_beta(f, 0);\n```\n'), False),
        'function only as a link target': (SELFTEST_DOC.replace(
            '`folio_beta()` returns its folio.',
            'See [beta](h.h#folio_beta).'), False),
        'broken file link': (SELFTEST_DOC.replace('(h.h)', '(nope.h)'),
                             False),
        'file link with anchor': (SELFTEST_DOC.replace('(h.h)', '(h.h#top)'),
                                  True),
        'external link': (SELFTEST_DOC + '[w](https://example.org/x)\n',
                          True),
        'unknown function': (SELFTEST_DOC + 'Call folio_gamma().\n', False),
        'type called as function': (SELFTEST_DOC + 'folio_cookie_t(1)\n',
                                    False),
        'unknown constant': (SELFTEST_DOC + 'FOLIO_FLAG_B\n', False),
        'stale excerpt': (SELFTEST_DOC.replace('int x = FOLIO_FLAG_A;\n```',
                                               'int y = FOLIO_FLAG_A;\n```',
                                               1), False),
        'example not mentioned': (SELFTEST_DOC.replace(
            ' and example.c.', '.').replace(
            '<!-- example: example.c part -->\n', ''), False),
        'families': (SELFTEST_DOC + 'folio_a*() and FOLIO_FLAG_*\n', True),
        'bad family': (SELFTEST_DOC + 'folio_z*()\n', False),
        'dangling link': (SELFTEST_DOC + '[x](#nowhere)\n', False),
        'commented-out name': (SELFTEST_DOC + 'folio_commented_out\n',
                               False),
    }
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        hpath = os.path.join(tmp, 'h.h')
        exdir = os.path.join(tmp, 'examples')
        os.mkdir(exdir)
        with open(hpath, 'w') as fh:
            fh.write(SELFTEST_HEADER)
        with open(os.path.join(exdir, 'example.c'), 'w') as fh:
            fh.write(SELFTEST_EXAMPLE)
        hdr = Header(hpath)
        if hdr.functions != ['folio_alpha', 'folio_beta']:
            print('selftest: header parsed as %r' % hdr.functions)
            ok = False
        decls = header_decls(hpath)
        if [(d.name, d.params) for d in decls] != [
                ('folio_alpha', ['f']), ('folio_beta', ['f', 'flags'])]:
            print('selftest: doc blocks parsed as %r'
                  % [(d.name, d.params) for d in decls])
            ok = False
        # The doc-block rules, one header mistake at a time.
        bad_hpath = os.path.join(tmp, 'bad.h')
        dpath = os.path.join(tmp, 'api.md')
        with open(dpath, 'w') as fh:
            fh.write(SELFTEST_DOC)
        for name, (old, new, want) in SELFTEST_HEADER_CASES.items():
            if old not in SELFTEST_HEADER:
                print('selftest: header case %r does not apply' % name)
                ok = False
                continue
            with open(bad_hpath, 'w') as fh:
                fh.write(SELFTEST_HEADER.replace(old, new, 1))
            with open(os.devnull, 'w') as sink:
                got = check(bad_hpath, dpath, exdir, out=sink)
            if got != want:
                print('selftest: header case %r: check returned %r, '
                      'expected %r' % (name, got, want))
                ok = False
        # 'pointer return still needs Return' must fail once Return goes.
        with open(bad_hpath, 'w') as fh:
            fh.write(SELFTEST_HEADER.replace(
                'FOLIO_EXPORT int folio_alpha(struct folio *f);',
                'FOLIO_EXPORT void *folio_alpha(struct folio *f);').replace(
                ' * Return: 0.\n', ''))
        with open(os.devnull, 'w') as sink:
            if check(bad_hpath, dpath, exdir, out=sink):
                print('selftest: a pointer-returning function without '
                      'Return: passed')
                ok = False
        for name, (doc, want) in cases.items():
            dpath = os.path.join(tmp, 'api.md')
            with open(dpath, 'w') as fh:
                fh.write(doc)
            with open(os.devnull, 'w') as sink:
                got = check(hpath, dpath, exdir, out=sink)
            if got != want:
                print('selftest: case %r: check returned %r, expected %r'
                      % (name, got, want))
                ok = False
        # Two headers: the second one's function needs a heading too, and
        # its names are known to the guide.
        h2path = os.path.join(tmp, 'h2.h')
        with open(h2path, 'w') as fh:
            fh.write(SELFTEST_HEADER2)
        two = [hpath, h2path]
        dpath = os.path.join(tmp, 'api.md')
        for doc, want in (
                (SELFTEST_DOC, False),
                (SELFTEST_DOC + '`folio_gamma()`, FOLIO_FLAG_G\n', True),
                (SELFTEST_DOC + '`folio_gamma()`, FOLIO_FLAG_H\n', False)):
            with open(dpath, 'w') as fh:
                fh.write(doc)
            with open(os.devnull, 'w') as sink:
                got = check(two, dpath, exdir, out=sink)
            if got != want:
                print('selftest: two headers: check returned %r, expected '
                      '%r' % (got, want))
                ok = False
        # The second header's doc blocks are checked too.
        with open(h2path, 'w') as fh:
            fh.write(SELFTEST_HEADER2.replace(' * @f: a folio.\n', ''))
        with open(dpath, 'w') as fh:
            fh.write(SELFTEST_DOC + '`folio_gamma()`, FOLIO_FLAG_G\n')
        with open(os.devnull, 'w') as sink:
            if check(two, dpath, exdir, out=sink):
                print('selftest: two headers: a parameter undocumented in '
                      'the second one passed')
                ok = False
        with open(h2path, 'w') as fh:
            fh.write(SELFTEST_HEADER2)
        if Header(two).functions != ['folio_alpha', 'folio_beta',
                                     'folio_gamma']:
            print('selftest: two headers parsed as %r'
                  % Header(two).functions)
            ok = False
        # update() repairs a stale excerpt.
        dpath = os.path.join(tmp, 'api.md')
        with open(dpath, 'w') as fh:
            fh.write(cases['stale excerpt'][0])
        update(dpath, exdir)
        with open(os.devnull, 'w') as sink:
            if not check(hpath, dpath, exdir, out=sink):
                print('selftest: update() did not repair the excerpt')
                ok = False
        # fragments() wraps bodies and keeps file-scope blocks.
        out = os.path.join(tmp, 'frag.c')
        n = fragments(dpath, out)
        with open(out) as fh:
            c = fh.read()
        if n != 1 or 'folio_alpha(f);' not in c or 'int x' in c:
            print('selftest: fragments() output unexpected (%d bodies)' % n)
            ok = False
    print('selftest: %s' % ('ok' if ok else 'FAILED'))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('command',
                    choices=['check', 'fragments', 'update', 'selftest'])
    ap.add_argument('--header', action='append',
                    help='a public header (repeat for several; default: '
                    'folio_state.h and folio_state_mem.h)')
    ap.add_argument('--doc', default=DEFAULT_DOC)
    ap.add_argument('--examples', default=DEFAULT_EXAMPLES)
    ap.add_argument('--out', help='output C file (fragments)')
    ap.add_argument('--line-path', help='file name for #line (fragments)')
    a = ap.parse_args()
    if a.command == 'check':
        ok = check(a.header or DEFAULT_HEADERS, a.doc, a.examples)
    elif a.command == 'fragments':
        if not a.out:
            ap.error('fragments needs --out')
        fragments(a.doc, a.out, a.line_path)
        ok = True
    elif a.command == 'update':
        ok = update(a.doc, a.examples)
    else:
        ok = selftest()
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
