/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the mapping layer over the mem engine.
 *
 * An input is decoded into a geometry, a mem engine (optionally with a
 * map() of small or scattered extents, SYNC or POLL completions), a
 * pre-filled backing store and then a sequence of operations: write,
 * read, write_begin/write_end (full, short and bad copies), truncate,
 * invalidate (with and without DISCARD), writeback with random options,
 * sync, fault rules and clearing them, mode switches, reopening, and
 * calls with bad arguments. Every result is checked against a byte array
 * model of the object:
 *
 *  - a read returns exactly the model's bytes; it may be short (or fail)
 *    only when a fault rule fired during it, and then what it returned is
 *    a correct prefix;
 *  - a write's return value says which prefix the model records; with
 *    state map allocations failing (arm_map_failures()) a buffered write
 *    may fail with -ENOMEM or stop short, a direct write may not;
 *  - folio_mapping_size() equals the model's size after every operation;
 *  - after a sync that returns 0 the backing store equals the model;
 *  - once the faults are cleared a sync returns 0 (at the latest the
 *    second one, which no longer sees old errors) and nothing was lost;
 *  - bad arguments return a negative errno and change nothing.
 *
 * Weaker knowledge is tracked per byte: after an invalidate with DISCARD a
 * byte holds either the model's value or the store's (EITHER, learnt from
 * the next read or successful sync), or anything (ANY) where the store's
 * value was not flushed yet; with FOLIO_MAPPING_DROP_ON_ERROR a
 * byte written since the last clean sync may be anything once a fault
 * fired (ANY, until it is written again).
 *
 * Durability: after a sync whose flush failed, the harness overwrites in
 * the store every byte written since the last good flush with garbage (a
 * device that lost its volatile cache). The library must have made those
 * blocks dirty again, so the next successful sync rewrites them. When a
 * flush of that sync succeeded before the one that failed (a durable
 * write's barrier), what it covered is durable and which bytes those were
 * depends on completion order: nothing is overwritten then, and no byte
 * counts as unflushed any more.
 *
 * Known library bugs can be masked while their fixes land: the
 * environment variable FUZZ_SKIP_KNOWN (or the compile-time default
 * FUZZ_SKIP_KNOWN_DEFAULT) is a list of letters, e.g. "a,c,f", or "all";
 * "none" or "" masks nothing. Masking a bug stops the harness from
 * producing the situation that triggers it:
 *   a  read faults with map() extents smaller than a block
 *   b  write_end outside the range write_begin prepared
 *   c  failing engine truncates (fault rules, sizes past the capacity)
 *   d  invalidate with overflowing ranges
 *   e  the store size check after a discard of an appended tail
 *   f  garbage in the store after a failed flush
 * FUZZ_TRACE=1 prints every operation to stderr.
 *
 * Direct I/O: an input whose first byte has both top bits set (no input
 * made before they existed has) turns write_begin into
 * folio_mapping_write_direct() (block-aligned, sometimes DSYNC, sometimes
 * bad arguments) and lookup into folio_mapping_read_direct(). The library
 * keeps no copy of a direct write: bytes direct-written since the last
 * good flush become ANY when a flush fails, and a failed or short direct
 * write leaves the rest of its range ANY (superseded in the cache, the
 * store holding whatever reached it).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "folio/folio.h" /* folio_map_fail_next: out of memory for maps */
#include "fuzz_mapping.h"

#ifndef FUZZ_SKIP_KNOWN_DEFAULT
#define FUZZ_SKIP_KNOWN_DEFAULT ""
#endif

#define SPACE (1u << 20)        /* positions and sizes stay below this */
#define CAPACITY (SPACE * 2ull) /* mem engine capacity */
#define MAX_OPS 256
#define MAX_RULES 64
#define MAX_RANGES 4096
#define HUGE_POS (UINT64_C(1) << 62)

/* Per-byte knowledge. */
enum { ST_KNOWN = 0, ST_EITHER = 1, ST_ANY = 2 };

static unsigned char model[SPACE]; /* the object; zero past the size */
static unsigned char alt[SPACE];   /* the other value of an EITHER byte */
static unsigned char state[SPACE];
static unsigned char mod_flush[SPACE]; /* written since the last good flush */
static unsigned char mod_sync[SPACE];  /* ... since the last fault-free sync */
/* Direct-written since the last good flush: nothing rewrites them. */
static unsigned char mod_direct[SPACE];
/* Direct I/O wants an aligned buffer. */
static _Alignas(4096) unsigned char dbuf[SPACE];
static unsigned char buf[SPACE];
static unsigned char store[SPACE];
static uint64_t hwm; /* model arrays are pristine from here on */
static uint64_t unknown; /* bytes not in ST_KNOWN (upper bound) */

static unsigned skip_mask;
static bool trace;
static uint64_t watch = UINT64_MAX; /* FUZZ_WATCH: a byte traced per op */

#define KNOWN_BUG(c) (skip_mask & (1u << ((c) - 'a')))

struct input {
	const uint8_t *p;
	size_t n, i;
};

struct flush_rule {
	uint64_t flushes0; /* engine flush count when it was added */
	uint64_t skip, count;
};

struct range {
	uint64_t pos, len;
};

struct world {
	struct folio_engine *e;
	struct folio_mapping *m;
	size_t bs, minf, maxf;
	unsigned mflags;
	uint64_t extent;
	bool scatter;
	bool poll;
	bool direct; /* write_begin and lookup are direct I/O instead */
	bool map_failures; /* writes may run out of memory for state maps */
	uint64_t size; /* the model's size */
	folio_errseq_t cursor;
	uint64_t faults_at_sync[2]; /* per cursor: faults at its last sync */
	uint64_t faults_seen;       /* for the DROP_ON_ERROR bookkeeping */
	struct flush_rule frules[MAX_RULES];
	unsigned nfrules;
	bool read_rules; /* a read rule is installed */
	bool endless_short; /* a short-write rule that never stops */
	unsigned short_syncs; /* syncs made with endless_short */
	bool discarded;
	/* A sync failed while truncate faults were armed: its redo of a
	 * lost resize may have failed too, and the next flush round then
	 * redoes it and fails with -EIO by design, with no fault of its
	 * own (commit.c, run_flush()). That -EIO is recorded like any
	 * error, so each cursor that has not looked since may see it: per
	 * cursor, cleared when that cursor's own sync returns 0. */
	bool truncate_faults, redo_may_be_owed[2];
	uint64_t rng;
	unsigned op; /* index of the current operation */
	const char *opname;
	struct range ranges[MAX_RANGES];
	unsigned nranges;
};

__attribute__((noreturn, format(printf, 4, 5))) static void
fail(const struct world *w, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr,
		"fuzz_mapping: CHECK FAILED (line %d, op %u %s): %s\n  ", line,
		w ? w->op : 0, w && w->opname ? w->opname : "-", cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (w)
		fprintf(stderr,
			"\n  geometry: block %zu folio %zu..%zu flags %#x "
			"extent %llu%s %s size %llu\n",
			w->bs, w->minf, w->maxf, w->mflags,
			(unsigned long long)w->extent,
			w->scatter ? " scatter" : "", w->poll ? "POLL" : "SYNC",
			(unsigned long long)w->size);
	else
		fputc('\n', stderr);
	abort();
}

#define CHECK(w, cond, ...) \
	((cond) ? (void)0 : fail((w), __LINE__, #cond, __VA_ARGS__))

#define TRACE(...) \
	do { \
		if (trace) \
			fprintf(stderr, __VA_ARGS__); \
	} while (0)

static void parse_env(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	const char *s = getenv("FUZZ_SKIP_KNOWN");
	if (!s)
		s = FUZZ_SKIP_KNOWN_DEFAULT;
	if (!strcmp(s, "all"))
		skip_mask = 0x3f;
	else
		for (; *s; s++)
			if (*s >= 'a' && *s <= 'f')
				skip_mask |= 1u << (*s - 'a');
	const char *t = getenv("FUZZ_TRACE");
	trace = t && *t && strcmp(t, "0");
	const char *wp = getenv("FUZZ_WATCH");
	if (wp && *wp)
		watch = strtoull(wp, NULL, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	parse_env();
	return 0;
}

/* ---- input decoding -------------------------------------------------- */

static bool more(const struct input *in)
{
	return in->i < in->n;
}

static uint8_t u8(struct input *in)
{
	return in->i < in->n ? in->p[in->i++] : 0;
}

static uint16_t u16(struct input *in)
{
	uint16_t v = u8(in);
	return (uint16_t)(v | (uint16_t)u8(in) << 8);
}

static uint32_t u32(struct input *in)
{
	uint32_t v = u16(in);
	return v | (uint32_t)u16(in) << 16;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Fill with fresh bytes, all odd: never zero (fresh folio memory and
 * bytes past EOF are zero) and never equal to their complement. */
static void fill(struct world *w, unsigned char *p, size_t n)
{
	uint64_t s = xorshift(&w->rng) | 1;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = xorshift(&s) | UINT64_C(0x0101010101010101);
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (unsigned char)(xorshift(&s) | 1);
}

/* A position in [0, SPACE): mostly near the start, around EOF or block
 * aligned, so operations overlap. */
static uint64_t gen_pos(struct world *w, struct input *in)
{
	uint8_t c = u8(in);
	uint64_t p;
	switch (c & 7) {
	case 0:
	case 1:
	case 2:
		p = u16(in);
		break;
	case 3:
		p = u32(in) % SPACE;
		break;
	case 4: {
		int16_t d = (int16_t)u16(in);
		int64_t q = (int64_t)w->size + d / 8;
		p = q < 0 ? 0 : (uint64_t)q;
		break;
	}
	case 5:
		p = (uint64_t)u8(in) * w->bs;
		break;
	case 6:
		p = (uint64_t)u8(in) * w->minf + (c >> 3);
		break;
	default:
		p = (uint64_t)u16(in) * 16;
		break;
	}
	return p % SPACE;
}

static size_t gen_len(struct world *w, struct input *in)
{
	uint8_t c = u8(in);
	switch (c & 7) {
	case 0:
	case 1:
		return (size_t)1 + (c >> 3);
	case 2:
	case 3:
		return (size_t)1 + u16(in) % 8192;
	case 4:
		return (size_t)1 + u16(in);
	case 5:
		return (size_t)1 + u32(in) % (256u << 10);
	case 6:
		return w->bs * (size_t)(1 + (c >> 3));
	default:
		return w->minf * (size_t)(1 + (c >> 6));
	}
}

/* ---- engine and mapping observations -------------------------------- */

static struct folio_mem_stats mstats(struct world *w)
{
	struct folio_mem_stats st;
	memset(&st, 0, sizeof(st));
	st.sz = sizeof(st);
	int r = folio_engine_mem_stats(w->e, &st);
	CHECK(w, r == 0, "folio_engine_mem_stats: %d", r);
	return st;
}

static struct folio_mapping_stats mapstats(struct world *w)
{
	struct folio_mapping_stats st;
	memset(&st, 0, sizeof(st));
	st.sz = sizeof(st);
	int r = folio_mapping_stats(w->m, &st);
	CHECK(w, r == 0, "folio_mapping_stats: %d", r);
	return st;
}

/* What must not change across a call with bad arguments. */
struct snapshot {
	int64_t size;
	uint64_t cached, dirty, folios, written, read;
	uint64_t reqs, truncates, flushes, faults;
};

static struct snapshot snap(struct world *w)
{
	struct folio_mapping_stats ms = mapstats(w);
	struct folio_mem_stats es = mstats(w);
	struct snapshot s = {
		folio_mapping_size(w->m), ms.cached_bytes, ms.dirty_bytes,
		ms.folios, ms.bytes_written, ms.bytes_read,
		es.read_requests + es.write_requests, es.truncates,
		es.flushes, es.faults};
	return s;
}

static void check_unchanged(struct world *w, const struct snapshot *a,
			    const char *what)
{
	struct snapshot b = snap(w);
	CHECK(w, !memcmp(a, &b, sizeof(b)),
	      "%s changed state: size %lld->%lld cached %llu->%llu dirty "
	      "%llu->%llu folios %llu->%llu written %llu->%llu requests "
	      "%llu->%llu truncates %llu->%llu",
	      what, (long long)a->size, (long long)b.size,
	      (unsigned long long)a->cached, (unsigned long long)b.cached,
	      (unsigned long long)a->dirty, (unsigned long long)b.dirty,
	      (unsigned long long)a->folios, (unsigned long long)b.folios,
	      (unsigned long long)a->written, (unsigned long long)b.written,
	      (unsigned long long)a->reqs, (unsigned long long)b.reqs,
	      (unsigned long long)a->truncates,
	      (unsigned long long)b.truncates);
}

static void check_size(struct world *w)
{
	int64_t s = folio_mapping_size(w->m);
	CHECK(w, s >= 0 && (uint64_t)s == w->size,
	      "folio_mapping_size %lld, model %llu", (long long)s,
	      (unsigned long long)w->size);
}

/* ---- the model -------------------------------------------------------- */

static void touch(uint64_t end)
{
	if (end > hwm)
		hwm = end;
}

static void model_write(struct world *w, uint64_t pos, const void *src,
			size_t n)
{
	if (!n)
		return;
	memcpy(model + pos, src, n);
	memset(state + pos, ST_KNOWN, n);
	memset(mod_flush + pos, 1, n);
	memset(mod_sync + pos, 1, n);
	if (pos + n > w->size)
		w->size = pos + n;
	touch(pos + n);
}

/* Forget everything at and past `size` (it reads as zeros). */
static void model_cut(struct world *w, uint64_t size)
{
	if (size < w->size) {
		size_t n = (size_t)(w->size - size);
		memset(model + size, 0, n);
		memset(state + size, ST_KNOWN, n);
		memset(mod_flush + size, 0, n);
		memset(mod_sync + size, 0, n);
		memset(mod_direct + size, 0, n);
	}
	w->size = size;
	touch(size);
}

/* A direct write put n bytes at pos: in the store, not in the cache. */
static void model_write_direct(struct world *w, uint64_t pos,
			       const void *src, size_t n)
{
	model_write(w, pos, src, n);
	memset(mod_flush + pos, 0, n);
	memset(mod_direct + pos, 1, n);
}

/* Nothing is known of [pos, end) any more. */
static void model_any(uint64_t pos, uint64_t end)
{
	for (uint64_t i = pos; i < end; i++)
		if (state[i] != ST_ANY) {
			state[i] = ST_ANY;
			unknown++;
		}
	touch(end);
}

/* A flush failed: direct-written bytes it should have made durable may
 * be gone, and no copy exists to write them again. */
static void lose_direct(void)
{
	for (uint64_t i = 0; i < hwm; i++)
		if (mod_direct[i]) {
			model_any(i, i + 1);
			mod_direct[i] = 0;
		}
}

#define CHUNK 256

/* Are all of [pos, pos+n) in ST_KNOWN? */
static bool all_known(uint64_t pos, size_t n)
{
	const unsigned char *p = state + pos;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		if (v)
			return false;
	}
	for (; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * Check bytes the library returned (a read, or the store after a sync)
 * for [pos, pos+n) against the model, learning EITHER bytes. `from_store`:
 * the bytes come from the backing store (ANY bytes are never learnt: with
 * DROP_ON_ERROR the cache may legitimately keep other bytes than the
 * store).
 */
static void check_bytes(struct world *w, uint64_t pos, const unsigned char *got,
			size_t n, const char *what)
{
	if (!n)
		return;
	if (!unknown) {
		if (!memcmp(got, model + pos, n))
			return;
	}
	uint64_t bad_at = UINT64_MAX;
	size_t nbad = 0;
	unsigned char bad_got = 0, bad_want = 0, bad_state = 0, bad_alt = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = pos + i;
		if (!(i % CHUNK) && n - i >= CHUNK &&
		    all_known(b, CHUNK) && !memcmp(got + i, model + b, CHUNK)) {
			i += CHUNK - 1;
			continue;
		}
		switch (state[b]) {
		case ST_KNOWN:
		case ST_EITHER:
			if (got[i] != model[b] &&
			    (state[b] == ST_KNOWN || got[i] != alt[b])) {
				if (bad_at == UINT64_MAX) {
					bad_at = b;
					bad_got = got[i];
					bad_want = model[b];
					bad_state = state[b];
					bad_alt = alt[b];
				}
				nbad++;
			}
			if (state[b] == ST_KNOWN)
				break;
			model[b] = got[i];
			state[b] = ST_KNOWN;
			break;
		default:
			break;
		}
	}
	if (bad_at != UINT64_MAX) {
		fail(w, __LINE__, "bytes == model",
		     "%s [%llu, +%zu): %zu bad bytes, first at %llu (block "
		     "%llu, +%llu in block): got %#x want %#x (state %d alt "
		     "%#x); read rules %d",
		     what, (unsigned long long)pos, n, nbad,
		     (unsigned long long)bad_at,
		     (unsigned long long)(bad_at / w->bs),
		     (unsigned long long)(bad_at % w->bs), bad_got, bad_want,
		     bad_state, bad_alt, w->read_rules);
	}
}

/* Did a flush rule fire on the engine's flush call number `call`? */
static bool flush_call_faulted(const struct world *w, uint64_t call)
{
	for (unsigned i = 0; i < w->nfrules; i++) {
		const struct flush_rule *r = &w->frules[i];
		if (call <= r->flushes0)
			continue;
		uint64_t nth = call - r->flushes0;
		if (nth > r->skip && (!r->count || nth <= r->skip + r->count))
			return true;
	}
	return false;
}

/* The last of the flush calls (f0, f1] a rule fired on, or 0. */
static uint64_t flush_last_faulted(const struct world *w, uint64_t f0,
				   uint64_t f1)
{
	for (uint64_t call = f1; call > f0; call--)
		if (flush_call_faulted(w, call))
			return call;
	return 0;
}

/* Did one of the flush calls (f0, f1] succeed? */
static bool flush_any_succeeded(const struct world *w, uint64_t f0,
				uint64_t f1)
{
	for (uint64_t call = f0 + 1; call <= f1; call++)
		if (!flush_call_faulted(w, call))
			return true;
	return false;
}

/* The store must equal the model (after a sync that returned 0). */
static void verify_store(struct world *w, const char *what)
{
	struct folio_mem_stats st = mstats(w);
	/* Readahead may still have reads in flight: a sync waits only for
	 * writes. */
	CHECK(w, st.inflight_writes == 0, "%s: %llu writes in flight", what,
	      (unsigned long long)st.inflight_writes);
	CHECK(w, st.misdirected == 0, "%s: misdirected requests", what);
	bool size_ok = st.size == w->size;
	/* Known bug (e): a discarded appended tail leaves the mapping larger
	 * than the store; the bytes are compared below all the same. */
	if (!size_ok && KNOWN_BUG('e') && w->discarded && st.size < w->size)
		size_ok = true;
	/* DROP_ON_ERROR: dropped writes may have been the ones that would
	 * have grown the store. */
	if (!size_ok && (w->mflags & FOLIO_MAPPING_DROP_ON_ERROR) && unknown &&
	    st.size < w->size)
		size_ok = true;
	CHECK(w, size_ok, "%s: store size %llu, model size %llu", what,
	      (unsigned long long)st.size, (unsigned long long)w->size);
	CHECK(w, st.size <= SPACE, "store size %llu",
	      (unsigned long long)st.size);
	size_t n = (size_t)w->size;
	int r = folio_engine_mem_peek(w->e, store, n, 0);
	CHECK(w, r == 0, "peek: %d", r);
	check_bytes(w, 0, store, n, what);
}

/* A flush failed: lose what the store got since the last good flush. */
static void lose_unflushed(struct world *w)
{
	struct folio_mem_stats st = mstats(w);
	if (st.inflight)
		return;
	uint64_t end = st.size < w->size ? st.size : w->size;
	uint64_t i = 0;
	unsigned runs = 0;
	while (i < end) {
		if (!mod_flush[i] || state[i] != ST_KNOWN) {
			i++;
			continue;
		}
		uint64_t j = i;
		while (j < end && mod_flush[j] && state[j] == ST_KNOWN) {
			buf[j - i] = (unsigned char)~model[j];
			j++;
		}
		int r = folio_engine_mem_poke(w->e, buf, (size_t)(j - i), i);
		CHECK(w, r == 0, "poke: %d", r);
		runs++;
		i = j;
	}
	TRACE("    lost unflushed data: %u runs below %llu\n", runs,
	      (unsigned long long)end);
}

/* With DROP_ON_ERROR any fault may have cleaned dirty data. */
static void drop_bookkeeping(struct world *w)
{
	if (!(w->mflags & FOLIO_MAPPING_DROP_ON_ERROR))
		return;
	uint64_t f = mstats(w).faults;
	if (f == w->faults_seen)
		return;
	w->faults_seen = f;
	for (uint64_t i = 0; i < w->size; i++)
		if (mod_sync[i] && state[i] != ST_ANY) {
			state[i] = ST_ANY;
			unknown++;
		}
}

/*
 * The engine's flush calls (f0, f1] ran during one call of the library:
 * what the device kept and lost. Returns true when one of them failed.
 *
 * A failed flush loses what the store took since the last good flush.
 * When one of this call's flushes succeeded before the failure (a sync's
 * durable write barrier then its flush, or a direct write that first
 * flushed a pending truncate and then lost its own barrier), what the
 * store took before the good one is durable and a device does not lose
 * it at the next failure. Which bytes came after it depends on
 * completion order, so none is known to be unflushed and none is lost;
 * the direct write's own bytes become unknown either way.
 */
static bool flushes_ran(struct world *w, uint64_t f0, uint64_t f1)
{
	uint64_t last_fail = flush_last_faulted(w, f0, f1);
	if (!last_fail) {
		if (f1 > f0) {
			memset(mod_flush, 0, (size_t)hwm);
			memset(mod_direct, 0, (size_t)hwm);
		}
		return false;
	}
	lose_direct();
	if (flush_any_succeeded(w, f0, last_fail - 1))
		memset(mod_flush, 0, (size_t)hwm);
	else if (!(w->mflags & FOLIO_MAPPING_DROP_ON_ERROR) &&
		 !KNOWN_BUG('f'))
		lose_unflushed(w);
	return true;
}

static folio_errseq_t *cursor_of(struct world *w, unsigned c)
{
	return c ? &w->cursor : NULL;
}

/* Sync with one of the two cursors and check what it claims. */
static int do_sync(struct world *w, unsigned c)
{
	struct folio_mem_stats a = mstats(w);
	int r = folio_mapping_sync(w->m, cursor_of(w, c));
	struct folio_mem_stats b = mstats(w);
	TRACE("    sync(cursor %u) = %d\n", c, r);
	CHECK(w, r <= 0 && r >= -4095, "sync returned %d", r);
	CHECK(w,
	      r == 0 || b.faults > w->faults_at_sync[c] ||
		      (r == -EIO && w->redo_may_be_owed[c]),
	      "sync failed (%d) without any fault since this cursor's last "
	      "sync",
	      r);
	if (r && w->truncate_faults)
		w->redo_may_be_owed[0] = w->redo_may_be_owed[1] = true;
	else if (!r)
		w->redo_may_be_owed[c] = false;
	bool ffail = flushes_ran(w, a.flushes, b.flushes);
	CHECK(w, !(r == 0 && ffail), "sync returned 0 but its flush failed");
	if (r == 0) {
		verify_store(w, "store after sync");
		if (b.faults == a.faults && a.inflight == 0)
			memset(mod_sync, 0, (size_t)hwm);
	}
	w->faults_at_sync[c] = b.faults;
	return r;
}

/* ---- setup and teardown ---------------------------------------------- */

static int open_mapping(struct world *w, struct input *in)
{
	unsigned bshift = 9 + u8(in) % 8;
	unsigned minshift = bshift + u8(in) % (22 - bshift);
	unsigned maxshift = minshift + u8(in) % (22 - minshift);
	uint8_t fl = u8(in);
	w->bs = (size_t)1 << bshift;
	w->minf = (size_t)1 << minshift;
	w->maxf = (size_t)1 << maxshift;
	w->mflags = 0;
	if (fl & 1)
		w->mflags |= FOLIO_MAPPING_STABLE_WRITES;
	if (fl & 2)
		w->mflags |= FOLIO_MAPPING_FOLIO_DIRTY;
	if ((fl >> 4) == 0xf)
		w->mflags |= FOLIO_MAPPING_DROP_ON_ERROR;
	w->map_failures = fl & 4;
	struct folio_mapping_opts o;
	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.block_size = w->bs;
	o.min_folio_size = w->minf;
	o.max_folio_size = w->maxf;
	o.size = w->size;
	o.flags = w->mflags;
	o.engine = w->e;
	int r = folio_mapping_new(&w->m, &o);
	CHECK(w, r == 0, "folio_mapping_new: %d", r);
	w->cursor = folio_mapping_err_cursor(w->m);
	uint64_t f = mstats(w).faults;
	w->faults_at_sync[0] = w->faults_at_sync[1] = f;
	w->faults_seen = f;
	TRACE("  mapping: block %zu folio %zu..%zu flags %#x size %llu\n",
	      w->bs, w->minf, w->maxf, w->mflags,
	      (unsigned long long)w->size);
	return 0;
}

static void setup(struct world *w, struct input *in)
{
	int r = folio_engine_mem(&w->e, CAPACITY);
	CHECK(w, r == 0, "folio_engine_mem: %d", r);
	uint8_t mp = u8(in);
	w->direct = (mp >> 6) == 3;
	if (mp & 2) {
		w->extent = UINT64_C(1) << (9 + (mp >> 2) % 16);
		w->scatter = mp & 1;
		r = folio_engine_mem_set_map(w->e, w->extent, w->scatter);
		CHECK(w, r == 0, "set_map: %d", r);
	}
	uint8_t md = u8(in);
	w->poll = md & 1;
	if (w->poll) {
		r = folio_engine_mem_set_mode(w->e, FOLIO_MEM_POLL, md >> 1);
		CHECK(w, r == 0, "set_mode: %d", r);
	}
	w->rng = (uint64_t)u16(in) * 0x9E3779B97F4A7C15ull + 1;
	uint8_t init = u8(in);
	if (init & 1) {
		size_t n = (size_t)((init >> 1) * 4099u + u8(in)) % (512u << 10);
		fill(w, buf, n);
		r = folio_engine_mem_poke(w->e, buf, n, 0);
		CHECK(w, r == 0, "poke: %d", r);
		memcpy(model, buf, n);
		w->size = n;
		touch(n);
	}
	TRACE("input: extent %llu%s %s store %llu\n",
	      (unsigned long long)w->extent, w->scatter ? " scatter" : "",
	      w->poll ? "POLL" : "SYNC", (unsigned long long)w->size);
	open_mapping(w, in);
}

static void reset_model(void)
{
	memset(model, 0, (size_t)hwm);
	memset(alt, 0, (size_t)hwm);
	memset(state, 0, (size_t)hwm);
	memset(mod_flush, 0, (size_t)hwm);
	memset(mod_sync, 0, (size_t)hwm);
	memset(mod_direct, 0, (size_t)hwm);
	hwm = 0;
	unknown = 0;
}

/* ---- operations ------------------------------------------------------- */

/*
 * In a world with map failures, about every other write finds the next
 * one to three allocations of a folio's state map failing, as out of
 * memory would (a new large folio's, or one taken back from the shared
 * map before a copy). A buffered write must then fail with -ENOMEM or
 * stop short, having changed nothing it did not count; a direct write
 * must not fail at all (it forgets a clean folio it cannot mark). Returns
 * how many were armed; draws from the world's generator only in such a
 * world, so other inputs replay as before.
 */
static unsigned arm_map_failures(struct world *w)
{
	if (!w->map_failures || (xorshift(&w->rng) & 1))
		return 0;
	unsigned n = 1 + (unsigned)(xorshift(&w->rng) % 3);
	atomic_store(&folio_map_fail_next, n);
	return n;
}

/* Disarm what arm_map_failures() armed; true when one fired. */
static bool map_failure_fired(unsigned armed)
{
	unsigned left = atomic_exchange(&folio_map_fail_next, 0);
	if (armed)
		TRACE("    map failures armed %u, fired %u\n", armed,
		      armed - left);
	return left < armed;
}

static void op_write(struct world *w, struct input *in)
{
	uint64_t pos = gen_pos(w, in);
	size_t len = gen_len(w, in);
	if (len > SPACE - pos)
		len = (size_t)(SPACE - pos);
	fill(w, buf, len);
	uint64_t f0 = mstats(w).faults;
	unsigned armed = arm_map_failures(w);
	ssize_t r = folio_mapping_write(w->m, buf, len, pos);
	bool oom = map_failure_fired(armed);
	uint64_t f1 = mstats(w).faults;
	TRACE("  write(%llu, %zu) = %zd\n", (unsigned long long)pos, len, r);
	CHECK(w, r >= -4095 && r <= (ssize_t)len, "write returned %zd", r);
	CHECK(w, r == (ssize_t)len || f1 > f0 || oom,
	      "write of %zu at %llu returned %zd without a fault", len,
	      (unsigned long long)pos, r);
	CHECK(w, r >= 0 || r == -ENOMEM || f1 > f0,
	      "write of %zu at %llu failed with %zd, not -ENOMEM", len,
	      (unsigned long long)pos, r);
	if (r > 0)
		model_write(w, pos, buf, (size_t)r);
}

static void op_read(struct world *w, struct input *in)
{
	uint64_t pos = gen_pos(w, in);
	size_t len = gen_len(w, in);
	uint8_t how = u8(in);
	if (how & 1) /* sometimes past EOF and past the space */
		pos += SPACE / 2;
	uint64_t f0 = mstats(w).faults;
	/* Readahead changes what is cached, never what a read returns:
	 * sometimes ask for it explicitly, sometimes read the lengths
	 * before in a row, so that the stream detection starts windows
	 * (whose reads may meet the injected faults). */
	if ((how & 6) == 6) {
		int ra = folio_mapping_readahead(w->m, pos, len);
		TRACE("  readahead(%llu, %zu) = %d\n", (unsigned long long)pos,
		      len, ra);
		CHECK(w, ra == 0, "readahead(%llu, %zu) returned %d",
		      (unsigned long long)pos, len, ra);
	} else if ((how & 6) == 4 && len && pos >= 2 * (uint64_t)len) {
		for (uint64_t at = pos - 2 * len; at < pos; at += len) {
			ssize_t rr = folio_mapping_read(w->m, buf, len, at);
			TRACE("  read ahead of it (%llu, %zu) = %zd\n",
			      (unsigned long long)at, len, rr);
			if (rr > 0)
				check_bytes(w, at, buf, (size_t)rr, "read");
		}
	}
	memset(buf, 0xAA, len < SPACE ? len : SPACE);
	ssize_t r = folio_mapping_read(w->m, buf, len, pos);
	uint64_t f1 = mstats(w).faults;
	TRACE("  read(%llu, %zu) = %zd\n", (unsigned long long)pos, len, r);
	uint64_t want = pos >= w->size ? 0
			: (w->size - pos < len ? w->size - pos : len);
	CHECK(w, r >= -4095 && r <= (ssize_t)want,
	      "read of %zu at %llu returned %zd, at most %llu expected", len,
	      (unsigned long long)pos, r, (unsigned long long)want);
	CHECK(w, r == (ssize_t)want || f1 > f0,
	      "read of %zu at %llu returned %zd (want %llu) without a fault",
	      len, (unsigned long long)pos, r, (unsigned long long)want);
	if (r > 0)
		check_bytes(w, pos, buf, (size_t)r, "read");
}

/* Call write_end with a range write_begin did not prepare. */
static void bad_write_end(struct world *w, struct input *in,
			  struct folio *f, uint64_t pos, size_t n)
{
	size_t off = (size_t)(pos - folio_pos(f));
	size_t fsz = folio_size(f);
	uint64_t epos = pos;
	size_t ecopied;
	uint8_t how = u8(in);
	if ((how & 1) && fsz - off > n) {
		/* runs past what write_begin returned, inside the folio */
		ecopied = n + 1 + u16(in) % (fsz - off - n);
	} else if (off > 0) {
		/* starts before the prepared range */
		size_t back = 1 + u16(in) % off;
		epos = pos - back;
		ecopied = back + u8(in) % (n + 1);
	} else {
		/* past the folio */
		ecopied = fsz + 1 + u8(in);
	}
	struct snapshot s = snap(w);
	folio_get(f); /* to look at it after write_end released it */
	ssize_t r = folio_mapping_write_end(w->m, f, epos, ecopied);
	TRACE("  bad write_end(%llu, %zu) [prepared %llu +%zu] = %zd\n",
	      (unsigned long long)epos, ecopied, (unsigned long long)pos, n,
	      r);
	CHECK(w, r == -EINVAL,
	      "write_end(%llu, %zu) outside the prepared range [%llu, +%zu) "
	      "returned %zd",
	      (unsigned long long)epos, ecopied, (unsigned long long)pos, n,
	      r);
	if (folio_test_locked(f)) /* kept: release it properly */
		folio_mapping_write_end(w->m, f, pos, 0);
	folio_put(f);
	check_unchanged(w, &s, "bad write_end");
}

static void op_write_begin(struct world *w, struct input *in)
{
	uint64_t pos = gen_pos(w, in);
	size_t len = gen_len(w, in);
	if (len > SPACE - pos)
		len = (size_t)(SPACE - pos);
	uint8_t mode = u8(in);
	struct folio *f = NULL;
	uint64_t f0 = mstats(w).faults;
	unsigned armed = arm_map_failures(w);
	ssize_t n = folio_mapping_write_begin(w->m, pos, len, &f);
	bool oom = map_failure_fired(armed);
	uint64_t f1 = mstats(w).faults;
	TRACE("  write_begin(%llu, %zu) = %zd\n", (unsigned long long)pos, len,
	      n);
	CHECK(w, n >= -4095 && n != 0 && n <= (ssize_t)len,
	      "write_begin returned %zd", n);
	if (n < 0) {
		CHECK(w, f1 > f0 || (oom && n == -ENOMEM),
		      "write_begin failed (%zd) without a fault", n);
		return;
	}
	CHECK(w, f && folio_test_locked(f), "write_begin: no locked folio");
	uint64_t fpos = folio_pos(f);
	size_t fsz = folio_size(f);
	CHECK(w, fpos <= pos && pos - fpos < fsz && fpos % fsz == 0,
	      "write_begin folio [%llu, +%zu) for %llu",
	      (unsigned long long)fpos, fsz, (unsigned long long)pos);
	size_t room = fsz - (size_t)(pos - fpos);
	CHECK(w, (size_t)n == (len < room ? len : room),
	      "write_begin returned %zd, want %zu", n,
	      len < room ? len : room);
	if ((mode & 7) == 7 && !KNOWN_BUG('b')) {
		bad_write_end(w, in, f, pos, (size_t)n);
		return;
	}
	size_t c;
	switch (mode & 7) {
	case 0:
	case 1:
	case 2:
		c = (size_t)n;
		break;
	case 3:
		c = 0;
		break;
	case 4:
		/* short, ending on a block boundary when possible */
		c = (size_t)((pos + (size_t)n) & ~(uint64_t)(w->bs - 1));
		c = c > pos ? (size_t)(c - pos) : (size_t)n / 2;
		break;
	default:
		c = (size_t)(u16(in) % (uint64_t)n);
		break;
	}
	fill(w, buf, c);
	memcpy((unsigned char *)folio_data(f) + (pos - fpos), buf, c);
	ssize_t k = folio_mapping_write_end(w->m, f, pos, c);
	TRACE("  write_end(%llu, %zu) = %zd\n", (unsigned long long)pos, c, k);
	uint64_t bstart = (pos + c) & ~(uint64_t)(w->bs - 1);
	size_t alt_k = bstart > pos ? (size_t)(bstart - pos) : 0;
	CHECK(w, k == (ssize_t)c || (c < (size_t)n && k == (ssize_t)alt_k),
	      "write_end(%zu of %zd) returned %zd", c, n, k);
	if (k > 0)
		model_write(w, pos, buf, (size_t)k);
}

/* A block-aligned range [*pos, *pos + *len) inside the space. */
static void gen_block_range(struct world *w, struct input *in, uint64_t *pos,
			    size_t *len)
{
	*pos = gen_pos(w, in) / w->bs * w->bs;
	size_t n = (gen_len(w, in) + w->bs - 1) / w->bs * w->bs;
	if (n > SPACE - *pos)
		n = (size_t)(SPACE - *pos);
	*len = n;
}

static void op_write_direct_bad(struct world *w, uint8_t how, uint64_t pos,
				size_t len)
{
	struct snapshot s = snap(w);
	const unsigned char *b = dbuf;
	unsigned flags = 0;
	switch ((how >> 4) & 3) {
	case 0:
		pos += w->bs / 2;
		break;
	case 1:
		len += w->bs / 2;
		break;
	case 2:
		b += 8;
		len = len ? len : w->bs;
		break;
	default:
		flags = 0x100;
		break;
	}
	ssize_t r = folio_mapping_write_direct(w->m, b, len, pos, flags);
	TRACE("  bad write_direct(%llu, %zu, flags %#x) = %zd\n",
	      (unsigned long long)pos, len, flags, r);
	CHECK(w, r == -EINVAL, "bad write_direct returned %zd", r);
	check_unchanged(w, &s, "bad write_direct");
}

static void op_write_direct(struct world *w, struct input *in)
{
	uint8_t how = u8(in);
	uint64_t pos;
	size_t len;
	gen_block_range(w, in, &pos, &len);
	if ((how & 7) == 7) {
		op_write_direct_bad(w, how, pos, len);
		return;
	}
	unsigned flags = (how & 8) ? FOLIO_DIRECT_DSYNC : 0;
	fill(w, dbuf, len);
	struct folio_mem_stats a = mstats(w);
	unsigned armed = arm_map_failures(w);
	ssize_t r = folio_mapping_write_direct(w->m, dbuf, len, pos, flags);
	(void)map_failure_fired(armed); /* no excuse for failing */
	struct folio_mem_stats b = mstats(w);
	TRACE("  write_direct(%llu, %zu, flags %#x) = %zd\n",
	      (unsigned long long)pos, len, flags, r);
	CHECK(w, r >= -4095 && r <= (ssize_t)len, "write_direct returned %zd",
	      r);
	/* A DSYNC write reports any error recorded while it ran (a flush
	 * another thread ran for it reports through the error sequence),
	 * also that of a request in flight when it began, which waiting
	 * for writeback completed: that fault was counted when the request
	 * was submitted, before the call. */
	bool inherited = (flags & FOLIO_DIRECT_DSYNC) && a.inflight && a.faults;
	CHECK(w, r == (ssize_t)len || b.faults > a.faults || inherited,
	      "write_direct of %zu at %llu returned %zd without a fault", len,
	      (unsigned long long)pos, r);
	size_t done = r > 0 ? (size_t)r : 0;
	if (done)
		model_write_direct(w, pos, dbuf, done);
	if (done < len) {
		/* The cache dropped the range; the store took any part of
		 * it, and grew to hold what it took. */
		int64_t sz = folio_mapping_size(w->m);
		CHECK(w, sz >= 0 && (uint64_t)sz >= w->size &&
			 (uint64_t)sz <= (w->size > pos + len ? w->size
							     : pos + len),
		      "size %lld after a failed write_direct (model %llu)",
		      (long long)sz, (unsigned long long)w->size);
		w->size = (uint64_t)sz;
		uint64_t end = pos + len < w->size ? pos + len : w->size;
		if (pos + done < end)
			model_any(pos + done, end);
	}
	(void)flushes_ran(w, a.flushes, b.flushes);
}

static void op_read_direct(struct world *w, struct input *in)
{
	uint8_t how = u8(in);
	uint64_t pos;
	size_t len;
	gen_block_range(w, in, &pos, &len);
	if (how & 1) /* sometimes past EOF */
		pos += SPACE / 2;
	if ((how & 6) == 6) {
		struct snapshot s = snap(w);
		ssize_t r = folio_mapping_read_direct(w->m, dbuf + 16, len,
						      pos);
		TRACE("  bad read_direct(%llu, %zu) = %zd\n",
		      (unsigned long long)pos, len, r);
		CHECK(w, r == -EINVAL || (!len && r == 0),
		      "misaligned read_direct returned %zd", r);
		check_unchanged(w, &s, "bad read_direct");
		return;
	}
	memset(dbuf, 0xAA, len);
	uint64_t f0 = mstats(w).faults;
	ssize_t r = folio_mapping_read_direct(w->m, dbuf, len, pos);
	uint64_t f1 = mstats(w).faults;
	TRACE("  read_direct(%llu, %zu) = %zd\n", (unsigned long long)pos,
	      len, r);
	uint64_t want = pos >= w->size ? 0
			: (w->size - pos < len ? w->size - pos : len);
	CHECK(w, r >= -4095 && r <= (ssize_t)want,
	      "read_direct of %zu at %llu returned %zd, at most %llu", len,
	      (unsigned long long)pos, r, (unsigned long long)want);
	CHECK(w, r == (ssize_t)want || f1 > f0,
	      "read_direct of %zu at %llu returned %zd (want %llu) without a "
	      "fault",
	      len, (unsigned long long)pos, r, (unsigned long long)want);
	/* With DROP_ON_ERROR a write failing in the read's writeback pass
	 * was dropped: the store, which this read returns, never got it. */
	drop_bookkeeping(w);
	if (r > 0)
		check_bytes(w, pos, dbuf, (size_t)r, "read_direct");
}

static void op_truncate(struct world *w, struct input *in)
{
	uint8_t c = u8(in);
	uint64_t t;
	switch (c & 7) {
	case 0:
	case 1:
		t = w->size ? u32(in) % w->size : 0; /* shrink */
		break;
	case 2:
	case 3:
		t = w->size + u16(in) % (64u << 10); /* grow */
		break;
	case 4:
		t = (uint64_t)u8(in) * w->bs;
		break;
	case 5:
		t = 0;
		break;
	case 6:
		t = w->size; /* no change */
		break;
	default:
		t = gen_pos(w, in);
		break;
	}
	if (t > SPACE)
		t = SPACE;
	if ((c >> 3) == 0x1f && !KNOWN_BUG('c'))
		t = CAPACITY + 1 + u8(in); /* the engine refuses */
	uint64_t old = w->size;
	uint64_t f0 = mstats(w).faults;
	int r = folio_mapping_truncate(w->m, t);
	uint64_t f1 = mstats(w).faults;
	TRACE("  truncate(%llu) = %d (size %llu)\n", (unsigned long long)t, r,
	      (unsigned long long)old);
	CHECK(w, r <= 0 && r >= -4095, "truncate returned %d", r);
	if (r == 0) {
		CHECK(w, t <= CAPACITY, "truncate past the capacity succeeded");
		model_cut(w, t);
		return;
	}
	CHECK(w, f1 > f0 || t > CAPACITY,
	      "truncate(%llu) failed (%d) without a fault",
	      (unsigned long long)t, r);
	/* A failed truncate changes nothing visible. */
	int64_t s = folio_mapping_size(w->m);
	CHECK(w, s >= 0 && (uint64_t)s == old,
	      "failed truncate(%llu) (%d) left size %lld, was %llu",
	      (unsigned long long)t, r, (long long)s,
	      (unsigned long long)old);
}

static void op_invalidate(struct world *w, struct input *in)
{
	uint64_t pos = gen_pos(w, in);
	uint8_t c = u8(in);
	uint64_t len = (c & 3) == 0 ? 0 : gen_len(w, in);
	bool discard = c & 4;
	unsigned flags = discard ? FOLIO_INVALIDATE_DISCARD : 0;
	uint64_t old = w->size;
	struct folio_mem_stats before = mstats(w);
	int r = folio_mapping_invalidate(w->m, pos, len, flags);
	TRACE("  invalidate(%llu, %llu, %s) = %d\n", (unsigned long long)pos,
	      (unsigned long long)len, discard ? "DISCARD" : "keep", r);
	if (!discard) {
		CHECK(w, r == 0 || r == -EBUSY, "invalidate returned %d", r);
		return;
	}
	CHECK(w, r == 0, "invalidate DISCARD returned %d", r);
	w->discarded = true;
	uint64_t end = len ? pos + len : UINT64_MAX;
	if (end > old)
		end = old;
	/* Bytes in the range now hold the model's value (kept: a dirty
	 * block only partly inside) or the store's. */
	if (pos < end) {
		size_t n = (size_t)(end - pos);
		int pr = folio_engine_mem_peek(w->e, store, n, pos);
		CHECK(w, pr == 0, "peek: %d", pr);
		for (size_t i = 0; i < n; i++) {
			uint64_t b = pos + i;
			/* Store bytes not flushed yet are no one's to keep
			 * once discarded: a failed flush may take them back
			 * to anything older (a redone truncate zeroes them),
			 * so they are ANY. Otherwise not poked after a failed
			 * flush (the store is the truth now); mod_sync stays:
			 * a kept dirty block may still be dropped
			 * (DROP_ON_ERROR). */
			bool unflushed = mod_flush[b];
			mod_flush[b] = 0;
			if (unflushed) {
				unknown += state[b] == ST_KNOWN;
				state[b] = ST_ANY;
			} else if (state[b] == ST_KNOWN && store[i] != model[b]) {
				state[b] = ST_EITHER;
				alt[b] = store[i];
				unknown++;
			} else if (state[b] == ST_EITHER &&
				   store[i] != model[b] && store[i] != alt[b]) {
				state[b] = ST_ANY;
			}
		}
	}
	int64_t s = folio_mapping_size(w->m);
	CHECK(w, s >= 0, "size %lld", (long long)s);
	if ((uint64_t)s != old) {
		/* Discarding an appended tail gives the size back, to the
		 * larger of the store's size and the end of the last dirty
		 * block before the range (at most the range's start). A
		 * failed write may have landed past that size: the discard
		 * then cuts the store too, and when that truncate fails the
		 * cut is owed (the next flush redoes it), so meanwhile the
		 * store may be larger than the mapping. */
		struct folio_mem_stats st = mstats(w);
		bool cut_failed = st.truncates > before.truncates &&
				  st.faults > before.faults;
		bool to_store = (uint64_t)s >= st.size &&
				((uint64_t)s <= pos || (uint64_t)s == st.size);
		CHECK(w,
		      (uint64_t)s < old && (!len || pos + len >= old) &&
			      (to_store ||
			       (cut_failed && (uint64_t)s < st.size)),
		      "discard [%llu, +%llu) changed size %llu -> %lld "
		      "(store %llu)",
		      (unsigned long long)pos, (unsigned long long)len,
		      (unsigned long long)old, (long long)s,
		      (unsigned long long)st.size);
		model_cut(w, (uint64_t)s);
	}
}

static int collect_range(uint64_t pos, uint64_t len, void *arg)
{
	struct world *w = arg;
	if (w->nranges == MAX_RANGES)
		return 12345;
	w->ranges[w->nranges].pos = pos;
	w->ranges[w->nranges].len = len;
	w->nranges++;
	return 0;
}

/* Dirty ranges over [start, end): well formed, and with nothing in
 * flight every byte where the store differs from the model is inside one. */
static void check_dirty_ranges(struct world *w, uint64_t start, uint64_t end,
			       bool expect_none)
{
	w->nranges = 0;
	int r = folio_mapping_dirty_ranges(w->m, start, end, collect_range, w);
	CHECK(w, r == 0 || r == 12345, "dirty_ranges returned %d", r);
	if (r)
		return;
	uint64_t stop = end && end < w->size ? end : w->size;
	uint64_t prev_end = 0;
	for (unsigned i = 0; i < w->nranges; i++) {
		struct range *x = &w->ranges[i];
		CHECK(w, x->len > 0 && x->pos >= start && x->pos + x->len <= stop,
		      "dirty range [%llu, +%llu) outside [%llu, %llu)",
		      (unsigned long long)x->pos, (unsigned long long)x->len,
		      (unsigned long long)start, (unsigned long long)stop);
		CHECK(w, i == 0 || x->pos > prev_end,
		      "dirty ranges not sorted and merged at %llu",
		      (unsigned long long)x->pos);
		CHECK(w, x->pos % w->bs == 0 || x->pos == start,
		      "dirty range start %llu not block aligned",
		      (unsigned long long)x->pos);
		CHECK(w, (x->pos + x->len) % w->bs == 0 ||
			      x->pos + x->len == stop,
		      "dirty range end %llu not block aligned",
		      (unsigned long long)(x->pos + x->len));
		prev_end = x->pos + x->len;
	}
	CHECK(w, !expect_none || w->nranges == 0,
	      "dirty data left after a waiting writeback: [%llu, +%llu)",
	      (unsigned long long)w->ranges[0].pos,
	      (unsigned long long)w->ranges[0].len);
	if (start >= stop || mstats(w).inflight)
		return;
	size_t n = (size_t)(stop - start);
	int pr = folio_engine_mem_peek(w->e, store, n, start);
	CHECK(w, pr == 0, "peek: %d", pr);
	unsigned ri = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = start + i;
		if (!(i % CHUNK) && n - i >= CHUNK &&
		    !memcmp(store + i, model + b, CHUNK)) {
			i += CHUNK - 1;
			continue;
		}
		if (state[b] != ST_KNOWN || store[i] == model[b])
			continue;
		while (ri < w->nranges &&
		       w->ranges[ri].pos + w->ranges[ri].len <= b)
			ri++;
		CHECK(w, ri < w->nranges && w->ranges[ri].pos <= b,
		      "byte %llu differs from the store (%#x, model %#x) but "
		      "is not dirty",
		      (unsigned long long)b, store[i], model[b]);
	}
}

static void op_writeback(struct world *w, struct input *in)
{
	struct folio_writeback_opts o;
	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	uint8_t c = u8(in);
	if (c & 1) {
		o.start = gen_pos(w, in);
		if (c & 2)
			o.end = o.start + gen_len(w, in);
	}
	if (c & 4)
		o.flags |= FOLIO_WB_WAIT;
	if (c & 8)
		o.budget = (uint64_t)u16(in) * 8;
	if (c & 16)
		o.max_request = 512 + u16(in) * (size_t)8;
	if (c & 32)
		o.max_segments = 1 + u16(in) % 1024;
	if (c & 64)
		o.merge_gap = u16(in);
	bool null_opts = c == 0x80;
	uint64_t inflight0 = mstats(w).inflight;
	uint64_t f0 = mstats(w).faults;
	int64_t r = folio_mapping_writeback(w->m, null_opts ? NULL : &o);
	uint64_t f1 = mstats(w).faults;
	TRACE("  writeback([%llu, %llu) flags %u budget %llu req %zu segs %u "
	      "gap %zu) = %lld\n",
	      (unsigned long long)o.start, (unsigned long long)o.end, o.flags,
	      (unsigned long long)o.budget, o.max_request, o.max_segments,
	      o.merge_gap, (long long)r);
	/* A request smaller than a block could not carry a dirty block. */
	if (!null_opts && o.max_request && o.max_request < w->bs) {
		CHECK(w, r == -EINVAL, "writeback with max_request %zu below "
		      "the block size %zu returned %lld", o.max_request,
		      (size_t)w->bs, (long long)r);
		return;
	}
	CHECK(w, r >= 0, "writeback returned %lld", (long long)r);
	if (!null_opts && (o.flags & FOLIO_WB_WAIT) && !o.budget &&
	    f1 == f0 && inflight0 == 0)
		check_dirty_ranges(w, o.start, o.end, true);
}

static void op_inject(struct world *w, struct input *in)
{
	static const int errs[] = {-EIO, -ENOSPC, -EROFS, -EDQUOT, -ENOMEM,
				   -EAGAIN, -4095, -1};
	struct folio_mem_fault f;
	memset(&f, 0, sizeof(f));
	f.sz = sizeof(f);
	uint8_t c = u8(in);
	uint8_t e = u8(in);
	switch (c & 7) {
	case 0:
	case 1:
		f.ops = FOLIO_MEM_OP_READ;
		break;
	case 2:
	case 3:
	case 4:
		f.ops = FOLIO_MEM_OP_WRITE;
		break;
	case 5:
		f.ops = FOLIO_MEM_OP_FLUSH;
		break;
	case 6:
		f.ops = FOLIO_MEM_OP_TRUNCATE;
		break;
	default:
		f.ops = FOLIO_MEM_OP_READ | FOLIO_MEM_OP_WRITE;
		break;
	}
	bool io = !(f.ops & (FOLIO_MEM_OP_FLUSH | FOLIO_MEM_OP_TRUNCATE));
	if (io && (e & 8))
		f.short_len = 1 + u16(in) % (2 * w->bs);
	else
		f.error = errs[e & 7];
	/* A write that lands and fails all the same (a remote store that
	 * applied it and lost the reply). */
	if (f.ops == FOLIO_MEM_OP_WRITE && f.error && (e & 0x10))
		f.flags = FOLIO_MEM_FAULT_APPLIED;
	if (io && (c & 8)) {
		f.pos = gen_pos(w, in);
		f.len = gen_len(w, in);
	}
	f.skip = (c >> 4) & 3;
	f.count = (c >> 6) ? (c >> 6) : (e >> 7 ? 0 : 1);
	if ((f.ops & FOLIO_MEM_OP_READ) && KNOWN_BUG('a') && w->extent &&
	    w->extent < w->bs)
		return;
	if ((f.ops & FOLIO_MEM_OP_TRUNCATE) && KNOWN_BUG('c'))
		return;
	int r = folio_engine_mem_inject(w->e, &f);
	if (!r && (f.ops & FOLIO_MEM_OP_TRUNCATE))
		w->truncate_faults = true;
	TRACE("  inject(ops %#x [%llu, +%llu) skip %llu count %llu err %d "
	      "short %zu flags %#x) = %d\n",
	      f.ops, (unsigned long long)f.pos, (unsigned long long)f.len,
	      (unsigned long long)f.skip, (unsigned long long)f.count, f.error,
	      f.short_len, f.flags, r);
	CHECK(w, r == 0 || r == -ENOSPC, "inject returned %d", r);
	if (r)
		return;
	if (f.ops & FOLIO_MEM_OP_READ)
		w->read_rules = true;
	if ((f.ops & FOLIO_MEM_OP_WRITE) && f.short_len && !f.count)
		w->endless_short = true;
	if (f.ops & FOLIO_MEM_OP_FLUSH) {
		struct flush_rule *fr = &w->frules[w->nfrules++];
		fr->flushes0 = mstats(w).flushes;
		fr->skip = f.skip;
		fr->count = f.count;
	}
}

static void clear_faults(struct world *w)
{
	int r = folio_engine_mem_clear_faults(w->e);
	CHECK(w, r == 0, "clear_faults: %d", r);
	w->nfrules = 0;
	w->read_rules = false;
	w->endless_short = false;
	TRACE("  clear faults\n");
}

static void op_lookup(struct world *w, struct input *in)
{
	uint64_t pos = gen_pos(w, in);
	struct folio *f = NULL;
	int r = folio_mapping_lookup(w->m, pos, &f);
	TRACE("  lookup(%llu) = %d\n", (unsigned long long)pos, r);
	CHECK(w, r == 0 || r == -ENOENT, "lookup returned %d", r);
	if (r == 0) {
		uint64_t fp = folio_pos(f);
		size_t fs = folio_size(f);
		CHECK(w, fp <= pos && pos - fp < fs && fs >= w->minf &&
			      fs <= w->maxf && !(fs & (fs - 1)) &&
			      fp % fs == 0 && folio_block_size(f) == w->bs,
		      "folio [%llu, +%zu) block %zu for %llu",
		      (unsigned long long)fp, fs, folio_block_size(f),
		      (unsigned long long)pos);
		CHECK(w, !folio_test_locked(f), "cached folio left locked");
		folio_lock(f);
		const unsigned char *d = folio_data(f);
		for (size_t off = 0; off < fs; off += w->bs) {
			int up = folio_is_uptodate(f, off, w->bs);
			int dirty = folio_is_dirty(f, off, w->bs);
			CHECK(w, up >= 0 && dirty >= 0 && (!dirty || up),
			      "block at %llu: uptodate %d dirty %d",
			      (unsigned long long)(fp + off), up, dirty);
			if (up != 1)
				continue;
			/* An uptodate block holds the object's bytes, and
			 * zeros past EOF. */
			uint64_t b0 = fp + off;
			if (b0 + w->bs <= SPACE && all_known(b0, w->bs) &&
			    !memcmp(d + off, model + b0, w->bs))
				continue;
			for (size_t i = 0; i < w->bs; i++) {
				uint64_t b = fp + off + i;
				unsigned char want =
					b < SPACE ? model[b] : 0;
				if (b < SPACE && b < w->size &&
				    state[b] != ST_KNOWN)
					continue;
				CHECK(w, d[off + i] == want,
				      "uptodate byte %llu is %#x, want %#x "
				      "(size %llu)",
				      (unsigned long long)b, d[off + i], want,
				      (unsigned long long)w->size);
			}
		}
		folio_unlock(f);
		folio_put(f);
	}
	struct folio_mapping_stats st = mapstats(w);
	uint64_t sum = 0;
	for (unsigned i = 0; i < FOLIO_STATS_SHIFTS; i++)
		sum += st.folios_by_shift[i];
	CHECK(w, sum == st.folios && st.dirty_bytes <= st.cached_bytes,
	      "stats: folios %llu (by size %llu) cached %llu dirty %llu",
	      (unsigned long long)st.folios, (unsigned long long)sum,
	      (unsigned long long)st.cached_bytes,
	      (unsigned long long)st.dirty_bytes);
}

static void op_set_mode(struct world *w, struct input *in)
{
	uint8_t c = u8(in);
	bool poll = c & 1;
	int r = folio_engine_mem_set_mode(w->e, poll ? FOLIO_MEM_POLL
						      : FOLIO_MEM_SYNC,
					  c >> 1);
	TRACE("  set_mode(%s) = %d\n", poll ? "POLL" : "SYNC", r);
	CHECK(w, r == 0, "set_mode: %d", r);
	w->poll = poll;
}

/* Sync, free the mapping and open a new one with another geometry. */
static void op_reopen(struct world *w, struct input *in)
{
	if (do_sync(w, 0))
		return;
	struct folio_mapping_stats st = mapstats(w);
	CHECK(w, st.dirty_bytes == 0, "dirty bytes %llu after a good sync",
	      (unsigned long long)st.dirty_bytes);
	int r = folio_mapping_free(w->m);
	TRACE("  free mapping = %d\n", r);
	CHECK(w, r == 0, "folio_mapping_free after a good sync: %d", r);
	w->m = NULL;
	/* Whatever the cache held, the store is the object now (its size
	 * too: with DROP_ON_ERROR, or known bug (e), it may be smaller). */
	uint64_t ssize = mstats(w).size;
	if (ssize < w->size) {
		for (uint64_t i = ssize; i < w->size; i++)
			CHECK(w, state[i] != ST_KNOWN || !model[i],
			      "byte %llu lost in the store", (unsigned long long)i);
		model_cut(w, ssize);
	}
	if (unknown) {
		r = folio_engine_mem_peek(w->e, store, (size_t)w->size, 0);
		CHECK(w, r == 0, "peek: %d", r);
		for (uint64_t i = 0; i < w->size; i++)
			if (state[i] != ST_KNOWN) {
				model[i] = store[i];
				state[i] = ST_KNOWN;
			}
		unknown = 0;
	}
	open_mapping(w, in);
	/* Read rules and the new block size may now meet known bug (a). */
	if (KNOWN_BUG('a') && w->read_rules && w->extent && w->extent < w->bs)
		clear_faults(w);
}

/* ---- bad arguments ---------------------------------------------------- */

static int never(uint64_t pos, uint64_t len, void *arg)
{
	(void)pos;
	(void)len;
	(void)arg;
	return 0;
}

static void op_bad(struct world *w, struct input *in)
{
	uint8_t c = u8(in);
	uint64_t pos = gen_pos(w, in);
	size_t len = gen_len(w, in);
	struct snapshot s = snap(w);
	long long r = 0;
	const char *what = "?";
	struct folio *f = NULL;
	unsigned char b[8] = {0};
	switch (c % 24) {
	case 0:
		what = "write(NULL mapping)";
		r = folio_mapping_write(NULL, b, 1, pos);
		break;
	case 1:
		what = "write(NULL buf)";
		r = folio_mapping_write(w->m, NULL, len, pos);
		break;
	case 2:
		what = "write past 2^62";
		r = folio_mapping_write(w->m, b, sizeof(b),
					HUGE_POS - (c >> 5));
		break;
	case 3:
		what = "write with a wrapping range";
		r = folio_mapping_write(w->m, buf, SIZE_MAX - (c >> 5), pos + 16);
		break;
	case 4:
		what = "read(NULL buf)";
		r = folio_mapping_read(w->m, NULL, len, pos);
		break;
	case 5:
		what = "read past 2^62";
		r = folio_mapping_read(w->m, b, sizeof(b), UINT64_MAX - pos);
		break;
	case 6:
		what = "write_begin(len 0)";
		r = folio_mapping_write_begin(w->m, pos, 0, &f);
		break;
	case 7:
		what = "write_begin(NULL folio)";
		r = folio_mapping_write_begin(w->m, pos, len, NULL);
		break;
	case 8:
		what = "write_begin past 2^62";
		r = folio_mapping_write_begin(w->m, HUGE_POS + pos, len, &f);
		break;
	case 9:
		what = "write_end(NULL folio)";
		r = folio_mapping_write_end(w->m, NULL, pos, len);
		break;
	case 10: {
		what = "write_end(unlocked folio)";
		struct folio *g = NULL;
		if (folio_mapping_lookup(w->m, pos, &g))
			return;
		r = folio_mapping_write_end(w->m, g, pos, 1);
		CHECK(w, !folio_test_locked(g), "write_end locked a folio");
		folio_put(g);
		break;
	}
	case 11:
		what = "truncate past 2^62";
		r = folio_mapping_truncate(w->m, HUGE_POS + 1 + pos);
		break;
	case 12:
		what = "truncate(NULL)";
		r = folio_mapping_truncate(NULL, pos);
		break;
	case 13:
		what = "invalidate(unknown flags)";
		r = folio_mapping_invalidate(w->m, pos, len,
					     2u << (c >> 5));
		break;
	case 14:
	case 15:
		if (KNOWN_BUG('d'))
			return;
		what = "invalidate(overflowing range)";
		/* pos + len wraps: pos >= 8, len >= 2^64 - 8 */
		r = folio_mapping_invalidate(
			w->m, pos + 8, UINT64_MAX - (c >> 5),
			(c & 1) ? FOLIO_INVALIDATE_DISCARD : 0);
		CHECK(w, r == -ERANGE || r == -EINVAL,
		      "invalidate(%llu, overflowing len) returned %lld",
		      (unsigned long long)(pos + 8), r);
		break;
	case 16: {
		what = "writeback(bad opts)";
		struct folio_writeback_opts o;
		memset(&o, 0, sizeof(o));
		o.sz = sizeof(o);
		switch ((c >> 5) & 7) {
		case 0:
			o.start = pos + 2;
			o.end = pos + 1;
			break;
		case 1:
			o.max_request = 1 + len % 511;
			break;
		case 2:
			o.max_segments = 1025 + (unsigned)len;
			break;
		case 3:
			o.flags = 2;
			break;
		case 4:
			o.sz = sizeof(size_t);
			break;
		default:
			o.flags = 0x80000000u;
			break;
		}
		r = folio_mapping_writeback(w->m, &o);
		break;
	}
	case 17:
		what = "sync(NULL)";
		r = folio_mapping_sync(NULL, NULL);
		break;
	case 18:
		what = "dirty_ranges(bad)";
		r = (c & 32) ? folio_mapping_dirty_ranges(w->m, 0, 0, NULL, NULL)
			     : folio_mapping_dirty_ranges(w->m, pos + 2, pos + 1,
							  never, NULL);
		break;
	case 19: {
		what = "inject(bad rule)";
		struct folio_mem_fault fr;
		memset(&fr, 0, sizeof(fr));
		fr.sz = sizeof(fr);
		fr.ops = FOLIO_MEM_OP_WRITE;
		fr.error = -EIO;
		switch ((c >> 5) & 7) {
		case 0:
			fr.ops = 0;
			break;
		case 1:
			fr.ops = 0x10;
			break;
		case 2:
			fr.error = -4096;
			break;
		case 3:
			fr.short_len = 1; /* both set */
			break;
		case 4:
			fr.error = 0; /* neither */
			break;
		case 5:
			fr.ops = FOLIO_MEM_OP_FLUSH;
			fr.error = 0;
			fr.short_len = 1;
			break;
		case 6:
			fr.pos = UINT64_MAX - 1;
			fr.len = 2 + len;
			break;
		default:
			fr.sz = 1;
			break;
		}
		r = folio_engine_mem_inject(w->e, &fr);
		break;
	}
	case 20: {
		what = "mapping_new(bad geometry)";
		struct folio_mapping_opts o;
		memset(&o, 0, sizeof(o));
		o.sz = sizeof(o);
		o.engine = w->e;
		o.block_size = w->bs;
		switch ((c >> 5) & 7) {
		case 0:
			o.block_size = w->bs + 1;
			break;
		case 1:
			o.block_size = 256;
			break;
		case 2:
			o.block_size = 1u << 17;
			break;
		case 3:
			o.min_folio_size = w->bs / 2;
			break;
		case 4:
			o.min_folio_size = w->bs * 4;
			o.max_folio_size = w->bs * 2;
			break;
		case 5:
			o.max_folio_size = FOLIO_MAX_SIZE * 2;
			break;
		case 6:
			o.size = HUGE_POS + 1;
			break;
		default:
			o.flags = 0x100;
			break;
		}
		struct folio_mapping *m2 = (struct folio_mapping *)b;
		r = folio_mapping_new(&m2, &o);
		CHECK(w, m2 == (struct folio_mapping *)b,
		      "mapping_new wrote its out-parameter on failure");
		break;
	}
	case 21: {
		what = "lookup/stats(NULL)";
		struct folio_mapping_stats st;
		memset(&st, 0, sizeof(st));
		st.sz = (c & 32) ? 1 : sizeof(st);
		r = (c & 32) ? folio_mapping_stats(w->m, &st)
			     : folio_mapping_lookup(w->m, pos, NULL);
		break;
	}
	case 22:
		what = "peek(bad range)";
		r = folio_engine_mem_peek(w->e, store, 16,
					  (c & 32) ? UINT64_MAX - 4
						   : CAPACITY - 8);
		break;
	default:
		what = "set_map/engine_free while in use";
		r = (c & 32) ? folio_engine_mem_set_map(w->e, 4096, false)
			     : folio_engine_free(w->e);
		break;
	}
	TRACE("  bad: %s = %lld\n", what, r);
	CHECK(w, r < 0 && r >= -4095, "%s returned %lld", what, r);
	check_unchanged(w, &s, what);
	check_size(w);
}

/* ---- driver ----------------------------------------------------------- */

static const char *const opnames[] = {
	"write", "read", "write_begin", "truncate", "invalidate", "writeback",
	"sync", "inject", "clear", "bad", "dirty_ranges", "lookup",
	"set_mode", "reopen",
};

enum {
	OP_WRITE, OP_READ, OP_WBEGIN, OP_TRUNCATE, OP_INVALIDATE, OP_WRITEBACK,
	OP_SYNC, OP_INJECT, OP_CLEAR, OP_BAD, OP_DIRTY, OP_LOOKUP, OP_MODE,
	OP_REOPEN,
};

/* Opcode byte -> operation, weighted. */
static const unsigned char optable[32] = {
	OP_WRITE, OP_WRITE, OP_WRITE, OP_WRITE, OP_WRITE, OP_READ, OP_READ,
	OP_READ, OP_READ, OP_WBEGIN, OP_WBEGIN, OP_TRUNCATE, OP_TRUNCATE,
	OP_INVALIDATE, OP_INVALIDATE, OP_WRITEBACK, OP_WRITEBACK, OP_SYNC,
	OP_SYNC, OP_INJECT, OP_INJECT, OP_INJECT, OP_CLEAR, OP_BAD, OP_BAD,
	OP_DIRTY, OP_LOOKUP, OP_MODE, OP_REOPEN, OP_WRITE, OP_READ, OP_SYNC,
};

/* FUZZ_WATCH=pos: what the store, the model and the cache say about one
 * byte after each op, to follow a bad byte back to the op that made it. */
static void trace_watch(struct world *w)
{
	if (!trace || watch >= SPACE)
		return;
	unsigned char s = 0;
	int pr = folio_engine_mem_peek(w->e, &s, 1, watch);
	int dirty = -1;
	w->nranges = 0;
	if (!folio_mapping_dirty_ranges(w->m, watch, watch + 1, collect_range,
					w))
		dirty = w->nranges > 0;
	TRACE("    watch %llu: store %#x%s model %#x state %d alt %#x "
	      "mod_flush %d dirty %d\n",
	      (unsigned long long)watch, s, pr ? " (past end)" : "",
	      model[watch], state[watch], alt[watch], mod_flush[watch], dirty);
}

static void run_op(struct world *w, struct input *in)
{
	unsigned op = optable[u8(in) % 32];
	w->opname = opnames[op];
	switch (op) {
	case OP_WRITE:
		op_write(w, in);
		break;
	case OP_READ:
		op_read(w, in);
		break;
	case OP_WBEGIN:
		if (w->direct) {
			w->opname = "write_direct";
			op_write_direct(w, in);
		} else {
			op_write_begin(w, in);
		}
		break;
	case OP_TRUNCATE:
		op_truncate(w, in);
		break;
	case OP_INVALIDATE:
		op_invalidate(w, in);
		break;
	case OP_WRITEBACK:
		op_writeback(w, in);
		break;
	case OP_SYNC: {
		unsigned c = u8(in) & 1;
		/* Each sync against an engine that always writes short makes
		 * 16 passes of tiny requests: a few of them are enough. */
		if (w->endless_short && ++w->short_syncs > 4)
			break;
		do_sync(w, c);
		break;
	}
	case OP_INJECT:
		op_inject(w, in);
		break;
	case OP_CLEAR:
		clear_faults(w);
		break;
	case OP_BAD:
		op_bad(w, in);
		break;
	case OP_DIRTY: {
		uint64_t s = gen_pos(w, in);
		uint64_t e = (u8(in) & 1) ? s + gen_len(w, in) : 0;
		check_dirty_ranges(w, s, e, false);
		break;
	}
	case OP_LOOKUP:
		if (w->direct) {
			w->opname = "read_direct";
			op_read_direct(w, in);
		} else {
			op_lookup(w, in);
		}
		break;
	case OP_MODE:
		op_set_mode(w, in);
		break;
	default:
		op_reopen(w, in);
		break;
	}
	drop_bookkeeping(w);
	check_size(w);
	trace_watch(w);
	CHECK(w, mstats(w).misdirected == 0, "misdirected request");
}

/* Faults cleared: a sync must succeed and nothing may be lost. */
static void finish(struct world *w)
{
	w->opname = "finish";
	clear_faults(w);
	if (do_sync(w, 0) != 0) {
		int r = do_sync(w, 0);
		CHECK(w, r == 0, "second sync after clearing faults: %d", r);
	}
	struct folio_mapping_stats st = mapstats(w);
	CHECK(w, st.dirty_bytes == 0, "dirty bytes %llu after a good sync",
	      (unsigned long long)st.dirty_bytes);
	if (w->size) {
		ssize_t r = folio_mapping_read(w->m, buf, (size_t)w->size, 0);
		CHECK(w, r == (ssize_t)w->size, "final read: %zd of %llu", r,
		      (unsigned long long)w->size);
		check_bytes(w, 0, buf, (size_t)w->size, "final read");
	}
	int r = folio_mapping_invalidate(w->m, 0, 0, FOLIO_INVALIDATE_DISCARD);
	CHECK(w, r == 0, "final invalidate: %d", r);
	r = folio_mapping_free(w->m);
	CHECK(w, r == 0, "folio_mapping_free: %d", r);
	r = folio_engine_free(w->e);
	CHECK(w, r == 0, "folio_engine_free: %d", r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct world w;
	parse_env();
	reset_model();
	memset(&w, 0, sizeof(w));
	struct input in = {data, size, 0};
	setup(&w, &in);
	for (w.op = 0; w.op < MAX_OPS && more(&in); w.op++)
		run_op(&w, &in);
	finish(&w);
	return 0;
}
