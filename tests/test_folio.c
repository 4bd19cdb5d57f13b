/* SPDX-License-Identifier: MIT */
/*
 * The folio layer through the public API only, checked against a model of
 * two bool arrays (uptodate[], dirty[]).
 *
 * Each model step puts the folio into a generated state (loaded through the
 * API and checked), applies one operation to folio and model, and compares
 * the return value and the whole resulting state, including the lock-free
 * flags. States are generated per step, not carried over, so that every
 * (operation, range) pair meets the states that matter for it: empty, full,
 * "full except exactly this range" (where the FOLIO_BECAME_UPTODATE
 * transition must fire) and random mixtures.
 *
 * Small geometries (1..64 blocks) are swept over every pair of interesting
 * byte offsets (each block boundary, one past it and one before the next,
 * and the folio's end); a one-block 512 B folio over every byte pair. The
 * 512- and 4096-block geometries use all pairs near both edges plus
 * thousands of random pairs.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "folio_state.h"
#include "base/epoch.h"
#include "folio/folio.h"
#include "folio/unstable.h"
#include "test_util.h"

#define MAX_BLOCKS 4096u
#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static uint64_t rng;

/* ---- model ---------------------------------------------------------- */

struct model {
	size_t size, bs, n;
	bool up[MAX_BLOCKS];
	bool dirty[MAX_BLOCKS];
};

static void model_init(struct model *m, size_t size, size_t bs)
{
	memset(m, 0, sizeof(*m));
	m->size = size;
	m->bs = bs;
	m->n = size / bs;
}

static bool model_all_up(const struct model *m)
{
	for (size_t b = 0; b < m->n; b++)
		if (!m->up[b])
			return false;
	return true;
}

static bool model_any_up(const struct model *m)
{
	for (size_t b = 0; b < m->n; b++)
		if (m->up[b])
			return true;
	return false;
}

static bool model_any_dirty(const struct model *m)
{
	for (size_t b = 0; b < m->n; b++)
		if (m->dirty[b])
			return true;
	return false;
}

static bool range_ok(const struct model *m, size_t off, size_t len)
{
	return off <= m->size && len <= m->size - off;
}

enum op {
	OP_SET_UPTODATE,
	OP_SET_DIRTY,
	OP_SET_DIRTY_UPTODATE,
	OP_CLEAR_DIRTY,
	OP_CLEAR_UPTODATE,
	OP_IS_UPTODATE,
	OP_IS_DIRTY,
	OP_COUNT,
};

static const char *const op_name[OP_COUNT] = {
	"set_uptodate", "set_dirty",	  "set_dirty_uptodate",
	"clear_dirty",	"clear_uptodate", "is_uptodate",
	"is_dirty",
};

/* The documented result of `op` on the model, applied to the model. */
static int model_apply(struct model *m, enum op op, size_t off, size_t len)
{
	if (!range_ok(m, off, len))
		return -ERANGE;
	/* Outward rounding: every block that holds a byte of the range. */
	size_t ofirst = off / m->bs;
	size_t oend = len ? (off + len - 1) / m->bs + 1 : ofirst;
	/* Inward rounding: only blocks wholly inside the range. */
	size_t ifirst = (off + m->bs - 1) / m->bs;
	size_t iend = (off + len) / m->bs;
	if (iend < ifirst)
		iend = ifirst;

	switch (op) {
	case OP_SET_UPTODATE:
	case OP_SET_DIRTY:
	case OP_SET_DIRTY_UPTODATE: {
		bool was_up = model_all_up(m), was_dirty = model_any_dirty(m);
		for (size_t b = ofirst; b < oend; b++) {
			if (op != OP_SET_DIRTY)
				m->up[b] = true;
			if (op != OP_SET_UPTODATE)
				m->dirty[b] = true;
		}
		return (!was_dirty && model_any_dirty(m) ? FOLIO_BECAME_DIRTY
							  : 0) |
		       (!was_up && model_all_up(m) ? FOLIO_BECAME_UPTODATE : 0);
	}
	case OP_CLEAR_DIRTY:
		for (size_t b = ifirst; b < iend; b++)
			m->dirty[b] = false;
		return 0;
	case OP_CLEAR_UPTODATE:
		/* A dirty block is the only copy of its data. */
		for (size_t b = ifirst; b < iend; b++)
			if (!m->dirty[b])
				m->up[b] = false;
		return 0;
	case OP_IS_UPTODATE:
		for (size_t b = ofirst; b < oend; b++)
			if (!m->up[b])
				return 0;
		return 1;
	case OP_IS_DIRTY:
		for (size_t b = ofirst; b < oend; b++)
			if (m->dirty[b])
				return 1;
		return 0;
	default:
		return -1;
	}
}

static int folio_apply(struct folio *f, enum op op, size_t off, size_t len)
{
	switch (op) {
	case OP_SET_UPTODATE: return folio_set_uptodate(f, off, len);
	case OP_SET_DIRTY: return folio_set_dirty(f, off, len);
	case OP_SET_DIRTY_UPTODATE: return folio_set_dirty_uptodate(f, off, len);
	case OP_CLEAR_DIRTY: return folio_clear_dirty(f, off, len);
	case OP_CLEAR_UPTODATE: return folio_clear_uptodate(f, off, len);
	case OP_IS_UPTODATE: return folio_is_uptodate(f, off, len);
	case OP_IS_DIRTY: return folio_is_dirty(f, off, len);
	default: return -1;
	}
}

/* First run at or after the block holding *off of blocks whose bit in
 * `bits` equals `want`; the contract of folio_next_dirty/next_missing. */
static ssize_t model_next(const struct model *m, const bool *bits, bool want,
			  size_t *off)
{
	if (*off > m->size)
		return -ERANGE;
	size_t b = *off / m->bs;
	while (b < m->n && bits[b] != want)
		b++;
	if (b >= m->n)
		return 0;
	size_t e = b;
	while (e < m->n && bits[e] == want)
		e++;
	*off = b * m->bs;
	return (ssize_t)((e - b) * m->bs);
}

static int model_take(struct model *m, struct folio_range *runs, size_t max)
{
	size_t taken = 0, off = 0;
	while (taken < max) {
		ssize_t len = model_next(m, m->dirty, true, &off);
		if (len <= 0)
			break;
		runs[taken].off = off;
		runs[taken].len = (size_t)len;
		for (size_t b = off / m->bs; b < (off + (size_t)len) / m->bs; b++)
			m->dirty[b] = false;
		off += (size_t)len;
		taken++;
	}
	return (int)taken;
}

/* ---- failure context ------------------------------------------------ */

/* What the current step is doing, printed only when a check fails. */
static struct {
	size_t size, bs;
	const char *op;
	size_t off, len;
	const char *shape;
} ctx;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			print_error("folio %zu/%zu, %s(%zu, %zu), state %s: ", \
				    ctx.size, ctx.bs, ctx.op ? ctx.op : "-",  \
				    ctx.off, ctx.len,                      \
				    ctx.shape ? ctx.shape : "-");          \
			print_error(__VA_ARGS__);                          \
			fail();                                            \
		}                                                          \
	} while (0)

/* ---- comparing folio and model ------------------------------------- */

/* The whole state through the run walkers plus the lock-free flags: the
 * walks visit every block, so any bit that differs shows up as a run
 * that differs. */
static void verify(struct folio *f, const struct model *m)
{
	CHECK(folio_test_uptodate(f) == model_all_up(m),
	      "UPTODATE flag %d disagrees with the blocks\n",
	      folio_test_uptodate(f));
	CHECK(folio_test_dirty(f) == model_any_dirty(m),
	      "DIRTY flag %d disagrees with the blocks\n", folio_test_dirty(f));

	for (int kind = 0; kind < 2; kind++) {
		size_t off = 0, moff = 0;
		for (;;) {
			ssize_t got = kind ? folio_next_dirty(f, &off)
					   : folio_next_missing(f, &off);
			ssize_t want = kind ? model_next(m, m->dirty, true, &moff)
					    : model_next(m, m->up, false, &moff);
			CHECK(got == want && (want <= 0 || off == moff),
			      "%s walk: got run (%zu, %zd), want (%zu, %zd)\n",
			      kind ? "dirty" : "missing", off, got, moff, want);
			if (want <= 0)
				break;
			off += (size_t)got;
			moff += (size_t)want;
		}
	}
}

/* Per block, through the range predicates: independent of the walkers. */
static void verify_blocks(struct folio *f, const struct model *m)
{
	for (size_t b = 0; b < m->n; b++) {
		CHECK(folio_is_uptodate(f, b * m->bs, m->bs) == m->up[b],
		      "block %zu uptodate\n", b);
		CHECK(folio_is_dirty(f, b * m->bs, m->bs) == m->dirty[b],
		      "block %zu dirty\n", b);
	}
}

/* Make the folio's state equal to the model's. */
static void load(struct folio *f, const struct model *m)
{
	/* Dirty first: clear_uptodate spares dirty blocks. */
	CHECK(folio_clear_dirty(f, 0, m->size) == 0, "load: clear_dirty\n");
	CHECK(folio_clear_uptodate(f, 0, m->size) == 0,
	      "load: clear_uptodate\n");
	for (int kind = 0; kind < 2; kind++) {
		const bool *bits = kind ? m->dirty : m->up;
		for (size_t b = 0; b < m->n;) {
			if (!bits[b]) {
				b++;
				continue;
			}
			size_t e = b;
			while (e < m->n && bits[e])
				e++;
			int r = kind ? folio_set_dirty(f, b * m->bs, (e - b) * m->bs)
				     : folio_set_uptodate(f, b * m->bs,
							  (e - b) * m->bs);
			CHECK(r >= 0, "load: set returned %d\n", r);
			b = e;
		}
	}
	/* An empty folio of many blocks, half the time, holds the shared
	 * map of nothing uptodate (forgotten contents, as a direct write
	 * leaves it when out of memory), which the operation meets. */
	if (m->n > FOLIO_MAP_INLINE_MAX && !model_any_up(m) &&
	    !model_any_dirty(m) && (test_rand(&rng) & 1)) {
		CHECK(folio_set_uptodate(f, 0, m->size) ==
			      FOLIO_BECAME_UPTODATE,
		      "load: whole fill\n");
		/* (0 when the fill shared the map already) */
		(void)folio_compact_state(f);
		CHECK(folio_forget_shared(f), "load: forget refused\n");
		return;
	}
	/* Half the time a wholly uptodate, clean folio of many blocks
	 * gives its map back, and the operation meets the shared one. */
	if (test_rand(&rng) & 1) {
		size_t before = folio_outside_map_bytes();
		bool shared = folio_flags(f) & FOLIO_F_MAP_SHARED;
		size_t back = folio_compact_state(f);
		bool may = m->n > FOLIO_MAP_INLINE_MAX && model_all_up(m) &&
			   !model_any_dirty(m);
		CHECK(may && !shared ? back > 0 : back == 0,
		      "load: compaction gave back %zu\n", back);
		CHECK(!may || (folio_flags(f) & FOLIO_F_MAP_SHARED),
		      "load: no shared map after compaction\n");
		CHECK(folio_outside_map_bytes() == before - back,
		      "load: outside map bytes %zu, want %zu\n",
		      folio_outside_map_bytes(), before - back);
	}
}

/* ---- generated states ---------------------------------------------- */

/* Random runs with mean length `mean` blocks covering about half. */
static void random_runs(bool *bits, size_t n, size_t mean)
{
	bool v = test_rand(&rng) & 1;
	for (size_t b = 0; b < n;) {
		size_t len = 1 + (size_t)test_rand_below(&rng, 2 * mean);
		for (size_t i = 0; i < len && b < n; i++, b++)
			bits[b] = v;
		v = !v;
	}
}

enum shape {
	SH_EMPTY,
	SH_FULL_CLEAN,
	SH_FULL_SOME_DIRTY,
	SH_ALL_BUT_RANGE,   /* uptodate everywhere except the range's blocks */
	SH_ALL_BUT_ONE,     /* uptodate everywhere except one random block */
	SH_MIXED,           /* random runs, dirty inside uptodate */
	SH_INDEPENDENT,     /* random runs, dirty need not be uptodate */
	SH_COUNT,
};

static const char *const shape_name[SH_COUNT] = {
	"empty", "full-clean", "full-some-dirty", "all-but-range",
	"all-but-one", "mixed", "independent",
};

/* Fill `m` (already initialised for its geometry) with a state of shape
 * `sh`; (off, len) is the range the next operation will use. */
static void gen_state(struct model *m, enum shape sh, size_t off, size_t len)
{
	size_t n = m->n;
	/* Per-block randomness for small folios, longer runs for big ones
	 * so that loading a state stays a few dozen calls. */
	size_t mean = n <= 64 ? 1 + (size_t)test_rand_below(&rng, 3)
			      : n / 16;

	memset(m->up, 0, n);
	memset(m->dirty, 0, n);
	switch (sh) {
	case SH_EMPTY:
		break;
	case SH_FULL_CLEAN:
		memset(m->up, 1, n);
		break;
	case SH_FULL_SOME_DIRTY:
		memset(m->up, 1, n);
		random_runs(m->dirty, n, mean);
		break;
	case SH_ALL_BUT_RANGE: {
		memset(m->up, 1, n);
		size_t first = off / m->bs;
		size_t end = len ? (off + len - 1) / m->bs + 1 : first;
		for (size_t b = first; b < end && b < n; b++)
			m->up[b] = false;
		if (test_rand(&rng) & 1)
			for (size_t b = 0; b < n; b++)
				m->dirty[b] = m->up[b] && (test_rand(&rng) & 1);
		break;
	}
	case SH_ALL_BUT_ONE:
		memset(m->up, 1, n);
		m->up[test_rand_below(&rng, n)] = false;
		break;
	case SH_MIXED:
		random_runs(m->up, n, mean);
		random_runs(m->dirty, n, mean);
		for (size_t b = 0; b < n; b++)
			m->dirty[b] = m->dirty[b] && m->up[b];
		break;
	default:
		random_runs(m->up, n, mean);
		random_runs(m->dirty, n, mean);
		break;
	}
}

/* ---- the model sweep ------------------------------------------------ */

struct geom {
	size_t size, bs;
};

static void step(struct folio *f, struct model *m, enum op op, size_t off,
		 size_t len)
{
	enum shape sh = (enum shape)test_rand_below(&rng, SH_COUNT);
	gen_state(m, sh, off, len);
	ctx.op = "load";
	ctx.shape = shape_name[sh];
	ctx.off = off;
	ctx.len = len;
	load(f, m);
	verify(f, m);

	ctx.op = op_name[op];
	int want = model_apply(m, op, off, len);
	int got = folio_apply(f, op, off, len);
	CHECK(got == want, "returned %d, want %d\n", got, want);
	verify(f, m);
}

/* Interesting byte offsets of a geometry: each block boundary, one past
 * it, one before the next, and the folio's end. With `edges` only the
 * first and last `edges` blocks contribute. */
static size_t offsets(const struct geom *g, size_t edges, size_t *out)
{
	size_t n = g->size / g->bs, k = 0;
	for (size_t b = 0; b < n; b++) {
		if (edges && b >= edges && b + edges < n)
			continue;
		out[k++] = b * g->bs;
		out[k++] = b * g->bs + 1;
		out[k++] = b * g->bs + g->bs - 1;
	}
	out[k++] = g->size;
	return k;
}

/* Under valgrind only a seeded sample of the exhaustive pairs runs. */
static bool keep_pair(void)
{
	return !test_slow_env() || test_rand_below(&rng, 8) == 0;
}

static void sweep_pairs(struct folio *f, struct model *m, const size_t *pos,
			size_t npos)
{
	for (size_t i = 0; i < npos; i++)
		for (size_t j = i; j < npos; j++) {
			if (pos[j] < pos[i] || !keep_pair())
				continue;
			for (int op = 0; op < OP_COUNT; op++)
				step(f, m, (enum op)op, pos[i], pos[j] - pos[i]);
		}
}

static struct model model;

static void model_sweep(const struct geom *g, size_t edges,
			unsigned random_pairs)
{
	struct folio *f;
	size_t *pos = malloc((3 * MAX_BLOCKS + 1) * sizeof(*pos));
	assert_non_null(pos);
	assert_int_equal(folio_new(&f, 0, g->size, g->bs), 0);
	model_init(&model, g->size, g->bs);
	ctx.size = g->size;
	ctx.bs = g->bs;

	size_t npos = offsets(g, edges, pos);
	sweep_pairs(f, &model, pos, npos);
	for (unsigned i = 0; i < random_pairs; i++) {
		size_t a = (size_t)test_rand_below(&rng, g->size + 1);
		size_t b = (size_t)test_rand_below(&rng, g->size + 1);
		/* Half the ends snap to a block boundary. */
		if (test_rand(&rng) & 1)
			a -= a % g->bs;
		if (test_rand(&rng) & 1)
			b -= b % g->bs;
		if (a > b) {
			size_t t = a;
			a = b;
			b = t;
		}
		step(f, &model, (enum op)test_rand_below(&rng, OP_COUNT), a,
		     b - a);
	}
	folio_put(f);
	free(pos);
}

static const struct geom small_geoms[] = {
	{512, 512},	    {4096, 4096},	{64 * KIB, 64 * KIB},
	{1024, 512},	    {8192, 4096},	{8192, 512},
	{64 * KIB, 4096},   {16 * KIB, 512},	{128 * KIB, 4096},
	{32 * KIB, 512},    {256 * KIB, 4096},	{64 * KIB, 1024},
};

static void test_model_small(void **state)
{
	(void)state;
	rng = test_seed("folio model small");
	for (size_t i = 0; i < sizeof(small_geoms) / sizeof(small_geoms[0]); i++)
		model_sweep(&small_geoms[i], 0, 0);
}

/* Every byte pair of a one-block folio: rounding has nowhere to hide. */
static void test_model_one_block_every_byte(void **state)
{
	(void)state;
	rng = test_seed("folio model one block, every byte");
	struct geom g = {512, 512};
	size_t pos[513];
	for (size_t i = 0; i <= 512; i++)
		pos[i] = i;
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, g.size, g.bs), 0);
	model_init(&model, g.size, g.bs);
	ctx.size = g.size;
	ctx.bs = g.bs;
	sweep_pairs(f, &model, pos, 513);
	folio_put(f);
}

static void test_model_large(void **state)
{
	(void)state;
	rng = test_seed("folio model large");
	static const struct geom large[] = {
		{256 * KIB, 512}, {2 * MIB, 4096}, {2 * MIB, 512},
	};
	for (size_t i = 0; i < 3; i++)
		model_sweep(&large[i], 3, test_iters(3000, 300));
}

/* ---- run walkers and take_dirty ------------------------------------ */

static const struct geom walk_geoms[] = {
	{512, 512},	  {8192, 4096},	    {8192, 512},     {16 * KIB, 512},
	{32 * KIB, 512},  {256 * KIB, 4096}, {256 * KIB, 512}, {2 * MIB, 4096},
	{2 * MIB, 512},
};

static void test_next_dirty_missing(void **state)
{
	(void)state;
	rng = test_seed("folio next_dirty/next_missing");
	size_t *pos = malloc((3 * MAX_BLOCKS + 3) * sizeof(*pos));
	assert_non_null(pos);
	for (size_t gi = 0; gi < sizeof(walk_geoms) / sizeof(walk_geoms[0]);
	     gi++) {
		const struct geom *g = &walk_geoms[gi];
		struct folio *f;
		assert_int_equal(folio_new(&f, 0, g->size, g->bs), 0);
		model_init(&model, g->size, g->bs);
		ctx.size = g->size;
		ctx.bs = g->bs;
		size_t n = g->size / g->bs;
		size_t npos = offsets(g, n > 64 ? 4 : 0, pos);
		pos[npos++] = g->size + 1;
		pos[npos++] = SIZE_MAX;
		unsigned states = test_iters(40, 8);
		for (unsigned s = 0; s < states; s++) {
			enum shape sh = (enum shape)(s % SH_COUNT);
			gen_state(&model, sh, 0, 0);
			ctx.shape = shape_name[sh];
			ctx.op = "load";
			load(f, &model);
			verify_blocks(f, &model);
			ctx.op = "next_dirty/next_missing";
			for (size_t i = 0; i < npos; i++) {
				size_t o = pos[i], mo = pos[i];
				ctx.off = o;
				ssize_t got = folio_next_dirty(f, &o);
				ssize_t want = model_next(&model, model.dirty,
							  true, &mo);
				CHECK(got == want && o == mo,
				      "next_dirty: (%zu, %zd), want (%zu, %zd)\n",
				      o, got, mo, want);
				o = mo = pos[i];
				got = folio_next_missing(f, &o);
				want = model_next(&model, model.up, false, &mo);
				CHECK(got == want && o == mo,
				      "next_missing: (%zu, %zd), want (%zu, %zd)\n",
				      o, got, mo, want);
			}
			/* Random unaligned starts inside big folios. */
			for (unsigned i = 0; n > 64 && i < 200; i++) {
				size_t o = (size_t)test_rand_below(&rng, g->size);
				size_t mo = o;
				ctx.off = o;
				ssize_t got = folio_next_dirty(f, &o);
				ssize_t want = model_next(&model, model.dirty,
							  true, &mo);
				CHECK(got == want && o == mo, "next_dirty\n");
				o = mo = ctx.off;
				got = folio_next_missing(f, &o);
				want = model_next(&model, model.up, false, &mo);
				CHECK(got == want && o == mo, "next_missing\n");
			}
			verify(f, &model);
		}
		folio_put(f);
	}
	free(pos);
}

static void test_take_dirty(void **state)
{
	(void)state;
	rng = test_seed("folio take_dirty");
	static const size_t caps[] = {1, 2, 3, 7, MAX_BLOCKS};
	struct folio_range got[MAX_BLOCKS + 1], want[MAX_BLOCKS];
	for (size_t gi = 0; gi < sizeof(walk_geoms) / sizeof(walk_geoms[0]);
	     gi++) {
		const struct geom *g = &walk_geoms[gi];
		struct folio *f;
		assert_int_equal(folio_new(&f, 0, g->size, g->bs), 0);
		model_init(&model, g->size, g->bs);
		ctx.size = g->size;
		ctx.bs = g->bs;
		unsigned states = test_iters(30, 6);
		for (unsigned s = 0; s < states; s++) {
			size_t cap = caps[s % 5];
			enum shape sh = (enum shape)(s % SH_COUNT);
			gen_state(&model, sh, 0, 0);
			ctx.shape = shape_name[sh];
			ctx.op = "load";
			load(f, &model);
			ctx.op = "take_dirty";
			ctx.len = cap;
			/* Repeated takes hand out every run exactly once. */
			for (;;) {
				/* A canary past the capacity catches overruns. */
				got[cap].off = got[cap].len = 0xabcd;
				int r = folio_take_dirty(f, got, cap);
				int w = model_take(&model, want, cap);
				CHECK(r == w, "returned %d, want %d\n", r, w);
				for (int i = 0; i < w; i++)
					CHECK(got[i].off == want[i].off &&
						      got[i].len == want[i].len,
					      "run %d: (%zu, %zu), want (%zu, %zu)\n",
					      i, got[i].off, got[i].len,
					      want[i].off, want[i].len);
				CHECK(got[cap].off == 0xabcd &&
					      got[cap].len == 0xabcd,
				      "wrote past max_runs\n");
				verify(f, &model);
				if (!w)
					break;
			}
			CHECK(!folio_test_dirty(f), "dirty after taking all\n");
		}
		folio_put(f);
	}
}

/* ---- explicit rules ------------------------------------------------- */

static struct folio *new_folio(size_t size, size_t bs)
{
	struct folio *f = NULL;
	assert_int_equal(folio_new(&f, 0, size, bs), 0);
	assert_non_null(f);
	return f;
}

static void test_rounding(void **state)
{
	(void)state;
	/* Four 512 B blocks. */
	struct folio *f = new_folio(2048, 512);

	/* Set rounds outward: one byte marks its whole block. */
	assert_int_equal(folio_set_uptodate(f, 1, 1), 0);
	assert_int_equal(folio_is_uptodate(f, 0, 512), 1);
	assert_int_equal(folio_is_uptodate(f, 511, 2), 0);
	/* Two bytes straddling a boundary mark both blocks. */
	assert_int_equal(folio_set_dirty(f, 511, 2), FOLIO_BECAME_DIRTY);
	assert_int_equal(folio_is_dirty(f, 0, 1), 1);
	assert_int_equal(folio_is_dirty(f, 1023, 1), 1);
	assert_int_equal(folio_is_dirty(f, 1024, 1024), 0);

	/* Clear rounds inward: [1, 1023) holds no whole block... */
	assert_int_equal(folio_clear_dirty(f, 1, 1022), 0);
	assert_int_equal(folio_is_dirty(f, 0, 1), 1);
	assert_int_equal(folio_is_dirty(f, 512, 1), 1);
	/* ...[1, 1024) holds block 1 only. */
	assert_int_equal(folio_clear_dirty(f, 1, 1023), 0);
	assert_int_equal(folio_is_dirty(f, 0, 1), 1);
	assert_int_equal(folio_is_dirty(f, 512, 512), 0);
	assert_int_equal(folio_clear_dirty(f, 0, 512), 0);
	assert_false(folio_test_dirty(f));

	/* The same for uptodate. */
	assert_int_equal(folio_set_uptodate(f, 0, 2048), FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_clear_uptodate(f, 513, 1022), 0);
	assert_int_equal(folio_is_uptodate(f, 0, 2048), 1);
	assert_int_equal(folio_clear_uptodate(f, 511, 1025), 0);
	assert_int_equal(folio_is_uptodate(f, 512, 1), 0);
	assert_int_equal(folio_is_uptodate(f, 0, 512), 1);
	assert_int_equal(folio_is_uptodate(f, 1536, 512), 1);

	/* len == 0 is a no-op that succeeds, also at the very end... */
	assert_int_equal(folio_set_dirty(f, 700, 0), 0);
	assert_int_equal(folio_set_uptodate(f, 512, 0), 0);
	assert_int_equal(folio_set_dirty_uptodate(f, 2048, 0), 0);
	assert_false(folio_test_dirty(f));
	assert_int_equal(folio_is_uptodate(f, 512, 1), 0);
	/* ...and the predicates answer for the empty range. */
	assert_int_equal(folio_is_uptodate(f, 512, 0), 1);
	assert_int_equal(folio_set_dirty(f, 0, 2048), FOLIO_BECAME_DIRTY);
	assert_int_equal(folio_is_dirty(f, 512, 0), 0);
	assert_int_equal(folio_clear_dirty(f, 0, 0), 0);
	assert_int_equal(folio_clear_dirty(f, 2048, 0), 0);
	assert_int_equal(folio_is_dirty(f, 0, 2048), 1);
	folio_put(f);
}

static void test_transitions(void **state)
{
	(void)state;
	static const struct geom geoms[] = {
		{4096, 4096}, {8192, 4096}, {64 * KIB, 4096}, {256 * KIB, 4096},
		{2 * MIB, 4096}, {2 * MIB, 512},
	};
	for (size_t gi = 0; gi < 6; gi++) {
		size_t size = geoms[gi].size, bs = geoms[gi].bs, n = size / bs;
		struct folio *f = new_folio(size, bs);

		/* Only the block that completes the folio reports it, and
		 * only the first dirtying call reports that. */
		for (size_t b = 0; b < n; b++) {
			size_t blk = (b * 7 + 3) % n; /* n is a power of two */
			int want = (b == 0 ? FOLIO_BECAME_DIRTY : 0) |
				   (b == n - 1 ? FOLIO_BECAME_UPTODATE : 0);
			assert_int_equal(folio_set_dirty_uptodate(f, blk * bs, bs),
					 want);
			assert_int_equal(folio_test_uptodate(f), b == n - 1);
			assert_true(folio_test_dirty(f));
		}
		/* Again: no transition left to make. */
		assert_int_equal(folio_set_dirty_uptodate(f, 0, size), 0);
		assert_int_equal(folio_set_uptodate(f, 0, size), 0);
		assert_int_equal(folio_set_dirty(f, 0, size), 0);

		/* Clean it; dirtying again is a new transition, even on an
		 * uptodate folio where only the dirty bits are touched. */
		struct folio_range r[4];
		assert_int_equal(folio_take_dirty(f, r, 4), 1);
		assert_int_equal(r[0].off, 0);
		assert_int_equal(r[0].len, size);
		assert_int_equal(folio_set_dirty_uptodate(f, size - 1, 1),
				 FOLIO_BECAME_DIRTY);
		assert_int_equal(folio_clear_dirty(f, 0, size), 0);
		assert_false(folio_test_dirty(f));
		assert_int_equal(folio_set_dirty(f, 0, 1), FOLIO_BECAME_DIRTY);
		assert_int_equal(folio_clear_dirty(f, 0, size), 0);

		/* Forgetting a block and reading it back completes the folio
		 * once more; setting dirty alone never does. */
		assert_int_equal(folio_clear_uptodate(f, size - bs, bs), 0);
		assert_false(folio_test_uptodate(f));
		assert_int_equal(folio_set_dirty(f, size - bs, bs),
				 FOLIO_BECAME_DIRTY);
		assert_false(folio_test_uptodate(f));
		assert_int_equal(folio_set_uptodate(f, size - 1, 1),
				 FOLIO_BECAME_UPTODATE);
		assert_int_equal(folio_clear_dirty(f, 0, size), 0);

		/* Both at once from an empty folio. */
		assert_int_equal(folio_clear_uptodate(f, 0, size), 0);
		assert_int_equal(folio_set_dirty_uptodate(f, 0, size),
				 FOLIO_BECAME_DIRTY | FOLIO_BECAME_UPTODATE);
		folio_put(f);
	}
}

static void test_dirty_keeps_uptodate(void **state)
{
	(void)state;
	struct folio *f = new_folio(4 * 4096, 4096);
	assert_int_equal(folio_set_uptodate(f, 0, 4 * 4096),
			 FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_set_dirty(f, 4096, 1), FOLIO_BECAME_DIRTY);
	assert_int_equal(folio_clear_uptodate(f, 0, 4 * 4096), 0);
	assert_int_equal(folio_is_uptodate(f, 4096, 4096), 1);
	assert_int_equal(folio_is_uptodate(f, 0, 1), 0);
	assert_int_equal(folio_is_uptodate(f, 8192, 8192), 0);
	size_t off = 0;
	assert_int_equal(folio_next_missing(f, &off), 4096);
	assert_int_equal(off, 0);
	off = 4096;
	assert_int_equal(folio_next_missing(f, &off), 8192);
	assert_int_equal(off, 8192);
	/* Once written back the block may go. */
	assert_int_equal(folio_clear_dirty(f, 4096, 4096), 0);
	assert_int_equal(folio_clear_uptodate(f, 0, 4 * 4096), 0);
	assert_int_equal(folio_is_uptodate(f, 4096, 1), 0);
	folio_put(f);

	/* A one-block folio has no bitmap; the rule still holds. */
	f = new_folio(4096, 4096);
	assert_int_equal(folio_set_dirty_uptodate(f, 10, 10),
			 FOLIO_BECAME_DIRTY | FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_clear_uptodate(f, 0, 4096), 0);
	assert_true(folio_test_uptodate(f));
	assert_int_equal(folio_clear_dirty(f, 0, 4096), 0);
	assert_int_equal(folio_clear_uptodate(f, 0, 4096), 0);
	assert_false(folio_test_uptodate(f));
	folio_put(f);
}

/*
 * The state array holds N uptodate bits and then N dirty bits, so the
 * dirty half starts mid-word for N = 16 and 32 and at a word boundary for
 * N = 64. (An N of 65, which would straddle differently, cannot exist:
 * block counts are powers of two; see test_geometry_rejected.)
 */
static void test_word_boundaries(void **state)
{
	(void)state;
	static const size_t ns[] = {2, 16, 32, 64, 128};
	for (size_t i = 0; i < 5; i++) {
		size_t n = ns[i], bs = 512, size = n * bs;
		struct folio *f = new_folio(size, bs);
		size_t off;

		/* Uptodate bits never spill into the dirty half. */
		assert_int_equal(folio_set_uptodate(f, 0, size),
				 FOLIO_BECAME_UPTODATE);
		assert_false(folio_test_dirty(f));
		assert_int_equal(folio_is_dirty(f, 0, size), 0);
		off = 0;
		assert_int_equal(folio_next_dirty(f, &off), 0);

		/* The last uptodate bit and the first dirty bit are
		 * neighbours in the array; each moves alone. */
		assert_int_equal(folio_clear_uptodate(f, size - bs, bs), 0);
		assert_int_equal(folio_is_uptodate(f, 0, size - bs), 1);
		assert_int_equal(folio_set_dirty(f, 0, 1), FOLIO_BECAME_DIRTY);
		off = 0;
		assert_int_equal(folio_next_dirty(f, &off), (ssize_t)bs);
		assert_int_equal(off, 0);
		off = 0;
		assert_int_equal(folio_next_missing(f, &off), (ssize_t)bs);
		assert_int_equal(off, size - bs);

		/* Dirty bits never spill into the uptodate half. */
		assert_int_equal(folio_set_dirty(f, 0, size), 0);
		off = 0;
		assert_int_equal(folio_next_dirty(f, &off), (ssize_t)size);
		assert_int_equal(folio_is_uptodate(f, size - bs, bs), 0);
		assert_int_equal(folio_clear_dirty(f, 0, size), 0);
		assert_int_equal(folio_is_uptodate(f, 0, size - bs), 1);
		assert_false(folio_test_dirty(f));

		/* The last dirty bit is the last bit of the array. */
		assert_int_equal(folio_set_dirty(f, size - 1, 1),
				 FOLIO_BECAME_DIRTY);
		off = 0;
		assert_int_equal(folio_next_dirty(f, &off), (ssize_t)bs);
		assert_int_equal(off, size - bs);
		struct folio_range r[2];
		assert_int_equal(folio_take_dirty(f, r, 2), 1);
		assert_int_equal(r[0].off, size - bs);
		assert_int_equal(r[0].len, bs);
		assert_false(folio_test_dirty(f));
		folio_put(f);
	}
}

/* ---- geometry ------------------------------------------------------- */

static bool all_zero(const unsigned char *p, size_t n)
{
	static const unsigned char zero[4096];
	for (size_t i = 0; i < n; i += sizeof(zero)) {
		size_t chunk = n - i < sizeof(zero) ? n - i : sizeof(zero);
		if (memcmp(p + i, zero, chunk))
			return false;
	}
	return true;
}

static void check_fresh(struct folio *f, uint64_t pos, size_t size, size_t bs)
{
	assert_int_equal(folio_pos(f), pos);
	assert_int_equal(folio_size(f), size);
	assert_int_equal(folio_block_size(f), bs);
	assert_non_null(folio_data(f));
	/* Aligned to its size, up to FOLIO_DATA_ALIGN (folios below a page
	 * share one). */
	size_t align = size < FOLIO_DATA_ALIGN ? size : FOLIO_DATA_ALIGN;
	assert_int_equal((uintptr_t)folio_data(f) % align, 0);
	assert_false(folio_test_uptodate(f));
	assert_false(folio_test_dirty(f));
	assert_false(folio_test_writeback(f));
	assert_false(folio_test_locked(f));
	assert_int_equal(folio_is_uptodate(f, 0, size), 0);
	assert_int_equal(folio_is_dirty(f, 0, size), 0);
	size_t off = 0;
	assert_int_equal(folio_next_missing(f, &off), (ssize_t)size);
	assert_int_equal(off, 0);
	assert_int_equal(folio_next_dirty(f, &off), 0);
}

static void test_geometry_valid(void **state)
{
	(void)state;
	for (size_t bs = FOLIO_MIN_BLOCK_SIZE; bs <= FOLIO_MAX_BLOCK_SIZE;
	     bs *= 2)
		for (size_t size = bs; size <= FOLIO_MAX_SIZE; size *= 2) {
			const uint64_t limit = UINT64_C(1) << 62;
			const uint64_t positions[] = {0, size, 3 * (uint64_t)size,
						      limit - size};
			for (size_t i = 0; i < 4; i++) {
				struct folio *f = NULL;
				assert_int_equal(folio_new(&f, positions[i],
							   size, bs), 0);
				check_fresh(f, positions[i], size, bs);
				/* Zero-fill matters once memory is reused,
				 * which is likely after a scribbled folio
				 * of the same size was freed. */
				assert_true(all_zero(folio_data(f), size));
				memset(folio_data(f), 0xa5, size);
				folio_put(f);
			}
		}
}

static void test_geometry_rejected(void **state)
{
	(void)state;
	struct bad {
		uint64_t pos;
		size_t size, bs;
	} const bad[] = {
		/* 65 blocks: not a power of two (the design's example). */
		{0, 65 * 4096, 4096},
		{0, 65 * 512, 512},
		{0, 3 * 512, 512},
		{0, 96 * 4096, 4096},
		{0, 0, 4096},
		{0, 4096, 0},
		{0, 0, 0},
		{0, 4096, 1536},	/* block not a power of two */
		{0, 4096, 256},		/* block too small */
		{0, 256, 256},
		{0, 128 * KIB, 128 * KIB}, /* block too large */
		{0, 2048, 4096},	/* folio smaller than a block */
		{0, 2 * FOLIO_MAX_SIZE, 4096}, /* folio too large */
		{0, 4 * FOLIO_MAX_SIZE, 65536},
		{0, (size_t)1 << 40, 4096},
		{0, SIZE_MAX, 4096},
		{0, (SIZE_MAX >> 1) + 1, 4096},
		{0, 4096, SIZE_MAX},
		{2048, 4096, 512},	/* pos not a multiple of the size */
		{1, 512, 512},
		{64 * KIB + 4096, 64 * KIB, 4096},
		{UINT64_MAX, 4096, 4096},
		/* aligned, but past the largest object position */
		{UINT64_C(1) << 62, 4096, 4096},
		{UINT64_MAX - 4095, 4096, 4096},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct folio *sentinel = (struct folio *)&bad[i];
		struct folio *f = sentinel;
		int r = folio_new(&f, bad[i].pos, bad[i].size, bad[i].bs);
		if (r != -EINVAL || f != sentinel) {
			print_error("folio_new(pos %llu, size %zu, block %zu) "
				    "= %d, out %s\n",
				    (unsigned long long)bad[i].pos, bad[i].size,
				    bad[i].bs, r,
				    f == sentinel ? "untouched" : "written");
			fail();
		}
	}
	assert_int_equal(folio_new(NULL, 0, 4096, 4096), -EINVAL);
}

/* ---- bad input leaves state alone ----------------------------------- */

/* A folio in a state where any stray change shows: some blocks
 * uptodate, some dirty, some neither. */
static struct folio *mixed_folio(struct model *m)
{
	struct folio *f = new_folio(16 * 512, 512);
	model_init(m, 16 * 512, 512);
	for (size_t b = 0; b < 16; b++) {
		m->up[b] = b % 3 != 0;
		m->dirty[b] = b % 4 == 1;
	}
	load(f, m);
	verify(f, m);
	return f;
}

static void test_bad_ranges(void **state)
{
	(void)state;
	struct model *m = &model;
	struct folio *f = mixed_folio(m);
	const size_t S = m->size;
	struct {
		size_t off, len;
	} const bad[] = {
		{S + 1, 0},
		{S, 1},
		{0, S + 1},
		{1, S},
		{S / 2, S / 2 + 1},
		{S - 1, 2},
		{SIZE_MAX, 0},
		{SIZE_MAX, 1},
		{1, SIZE_MAX},
		{0, SIZE_MAX},
		{SIZE_MAX, SIZE_MAX},
		/* off + len wraps around to exactly 0 and to small values. */
		{S, SIZE_MAX - S + 1},
		{512, SIZE_MAX - 511},
		{512, SIZE_MAX - 510},
		{SIZE_MAX - 511, 1024},
	};
	ctx.size = S;
	ctx.bs = 512;
	ctx.shape = "mixed";
	for (int op = 0; op < OP_COUNT; op++) {
		ctx.op = op_name[op];
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			ctx.off = bad[i].off;
			ctx.len = bad[i].len;
			int r = folio_apply(f, (enum op)op, bad[i].off, bad[i].len);
			CHECK(r == -ERANGE, "returned %d, want -ERANGE\n", r);
			verify(f, m);
		}
		/* NULL, with a good and with an empty range. */
		ctx.off = 0;
		ctx.len = 512;
		CHECK(folio_apply(NULL, (enum op)op, 0, 512) == -EINVAL,
		      "NULL folio\n");
		CHECK(folio_apply(NULL, (enum op)op, 0, 0) == -EINVAL,
		      "NULL folio, len 0\n");
	}
	verify_blocks(f, m);
	folio_put(f);
}

static void test_bad_next_and_take(void **state)
{
	(void)state;
	struct model *m = &model;
	struct folio *f = mixed_folio(m);
	const size_t S = m->size;
	ctx.size = S;
	ctx.bs = 512;
	ctx.shape = "mixed";
	ctx.op = "next/take";

	for (int dirty = 0; dirty < 2; dirty++) {
		ssize_t (*next)(struct folio *, size_t *) =
			dirty ? folio_next_dirty : folio_next_missing;
		size_t off = 0;
		assert_int_equal(next(NULL, &off), -EINVAL);
		assert_int_equal(next(f, NULL), -EINVAL);
		const size_t bad[] = {S + 1, S + 512, SIZE_MAX, SIZE_MAX / 2};
		for (size_t i = 0; i < 4; i++) {
			off = bad[i];
			assert_int_equal(next(f, &off), -ERANGE);
			assert_int_equal(off, bad[i]);
		}
		/* The end itself is fine: nothing follows it. */
		off = S;
		assert_int_equal(next(f, &off), 0);
		assert_int_equal(off, S);
		verify(f, m);
	}

	struct folio_range runs[3] = {{7, 7}, {7, 7}, {7, 7}};
	assert_int_equal(folio_take_dirty(NULL, runs, 3), -EINVAL);
	assert_int_equal(folio_take_dirty(f, NULL, 3), -EINVAL);
	assert_int_equal(folio_take_dirty(f, runs, 0), -EINVAL);
	for (int i = 0; i < 3; i++)
		assert_true(runs[i].off == 7 && runs[i].len == 7);
	verify(f, m);
	verify_blocks(f, m);
	folio_put(f);
}

static void test_null_accessors(void **state)
{
	(void)state;
	assert_null(folio_get(NULL));
	folio_put(NULL);
	assert_null(folio_data(NULL));
	assert_int_equal(folio_pos(NULL), 0);
	assert_int_equal(folio_size(NULL), 0);
	assert_int_equal(folio_block_size(NULL), 0);
	assert_false(folio_test_uptodate(NULL));
	assert_false(folio_test_dirty(NULL));
	assert_false(folio_test_writeback(NULL));
	assert_false(folio_test_locked(NULL));
	assert_int_equal(folio_lock(NULL), -EINVAL);
	assert_int_equal(folio_trylock(NULL), -EINVAL);
	assert_int_equal(folio_unlock(NULL), -EINVAL);
	assert_int_equal(folio_start_writeback(NULL), -EINVAL);
	assert_int_equal(folio_end_writeback(NULL), -EINVAL);
	assert_int_equal(folio_wait_writeback(NULL), -EINVAL);
}

/* ---- references, lock, writeback ------------------------------------ */

static void test_refcount(void **state)
{
	(void)state;
	struct folio *f = new_folio(64 * KIB, 4096);
	for (int i = 0; i < 10; i++)
		assert_ptr_equal(folio_get(f), f);
	for (int i = 0; i < 10; i++) {
		folio_put(f);
		/* Still ours: valgrind/ASan would flag a premature free. */
		assert_int_equal(folio_set_dirty_uptodate(f, 0, 1),
				 i == 0 ? FOLIO_BECAME_DIRTY : 0);
		memset(folio_data(f), i, folio_size(f));
	}
	/* The last put frees everything; valgrind's leak check would
	 * report a folio or its data that survived. */
	folio_put(f);
}

static void test_lock_and_writeback(void **state)
{
	(void)state;
	struct model *m = &model;
	struct folio *f = mixed_folio(m);

	assert_int_equal(folio_unlock(f), -EPERM);
	assert_int_equal(folio_trylock(f), 1);
	assert_true(folio_test_locked(f));
	assert_int_equal(folio_trylock(f), 0);
	assert_int_equal(folio_unlock(f), 0);
	assert_false(folio_test_locked(f));
	assert_int_equal(folio_unlock(f), -EPERM);
	assert_int_equal(folio_lock(f), 0);
	assert_true(folio_test_locked(f));
	assert_int_equal(folio_trylock(f), 0);

	/* Writeback is independent of the lock. */
	assert_int_equal(folio_end_writeback(f), -EPERM);
	assert_int_equal(folio_wait_writeback(f), 0); /* not set: no wait */
	assert_int_equal(folio_start_writeback(f), 0);
	assert_true(folio_test_writeback(f));
	assert_int_equal(folio_start_writeback(f), -EBUSY);
	assert_int_equal(folio_unlock(f), 0);
	assert_true(folio_test_writeback(f));
	assert_false(folio_test_locked(f));

	/* Neither flag touches the block state, nor the state the flags. */
	verify(f, m);
	assert_int_equal(folio_set_dirty_uptodate(f, 0, m->size),
			 model_apply(m, OP_SET_DIRTY_UPTODATE, 0, m->size));
	struct folio_range r[4];
	assert_int_equal(folio_take_dirty(f, r, 4), 1);
	memset(m->dirty, 0, sizeof(m->dirty));
	verify(f, m);
	assert_true(folio_test_writeback(f));
	assert_false(folio_test_locked(f));

	assert_int_equal(folio_end_writeback(f), 0);
	assert_false(folio_test_writeback(f));
	assert_int_equal(folio_end_writeback(f), -EPERM);
	assert_int_equal(folio_wait_writeback(f), 0);
	assert_int_equal(folio_start_writeback(f), 0);
	assert_int_equal(folio_end_writeback(f), 0);
	verify(f, m);
	folio_put(f);
}

/* Speculative references (lock-free lookups) and the reclaim's freeze. */
/*
 * The version optimistic readers check (folio.h, FOLIO_SEQ_SHIFT): a
 * snapshot stays valid while nothing happens, never across a lock held
 * and let go (every writer's changes are made under the lock), never
 * while locked or removed, and never across a full turn of the 20-bit
 * version (the wrap count). Each assertion fails if its piece is taken
 * out of folio_unlock_held() or folio_read_valid().
 */
static void test_read_version(void **state)
{
	(void)state;
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, 16384, 4096), 0);
	struct folio_seq s;
	/* Not uptodate: nothing to read without the lock. */
	assert_false(folio_read_begin(f, &s));
	assert_int_equal(folio_set_uptodate(f, 0, 16384),
			 FOLIO_BECAME_UPTODATE);
	assert_true(folio_read_begin(f, &s));
	assert_true(folio_read_valid(f, &s));
	/* A flag nobody reads optimistically changes nothing. */
	assert_int_equal(folio_start_writeback(f), 0);
	assert_int_equal(folio_end_writeback(f), 0);
	assert_true(folio_read_valid(f, &s));
	/* Locked: no snapshot, and a snapshot taken before fails. */
	assert_int_equal(folio_trylock(f), 1);
	assert_false(folio_read_valid(f, &s));
	struct folio_seq locked;
	assert_false(folio_read_begin(f, &locked));
	assert_int_equal(folio_unlock(f), 0);
	/* Unlocked again: the version moved. */
	assert_false(folio_read_valid(f, &s));
	assert_true(folio_read_begin(f, &s));
	/* A full turn of the version: the same bits, but the wrap count
	 * moved. */
	unsigned before = folio_flags(f) & FOLIO_SEQ_MASK;
	unsigned wraps = atomic_load(&folio_seq_wraps);
	for (unsigned i = 0; i < (1u << (32 - FOLIO_SEQ_SHIFT)); i++) {
		assert_true(folio_lock_nowait(f));
		folio_unlock_held(f);
	}
	assert_int_equal(folio_flags(f) & FOLIO_SEQ_MASK, before);
	assert_int_equal(atomic_load(&folio_seq_wraps), wraps + 1);
	assert_false(folio_read_valid(f, &s));
	/* Removed (set under the lock, seen even before the unlock). */
	assert_true(folio_read_begin(f, &s));
	folio_mark_removed(f);
	assert_false(folio_read_valid(f, &s));
	assert_false(folio_read_begin(f, &s));
	/* A bare folio: its free must not wait for a grace period. */
	atomic_fetch_and(&f->flags, ~FOLIO_F_REMOVED);
	folio_put(f);
}

static void test_try_get_and_freeze(void **state)
{
	(void)state;
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, 16384, 4096), 0);
	/* One reference (the creator's): a try-get succeeds. */
	assert_true(folio_try_get(f));
	assert_int_equal(folio_unpinned_refs(f), 2);
	/* A hint pin does not count; a freeze wants the others exactly. */
	bool pinned = folio_hint_get(f);
	assert_true(pinned);
	assert_int_equal(folio_unpinned_refs(f), 2);
	assert_false(folio_ref_freeze(f, 1));
	assert_false(folio_ref_freeze(f, 3));
	assert_true(folio_ref_freeze(f, 2));
	/* Frozen: no try-get, but plain references still move. */
	assert_false(folio_try_get(f));
	folio_hint_put(f, pinned);
	assert_false(folio_try_get(f));
	folio_ref_unfreeze(f);
	assert_int_equal(folio_unpinned_refs(f), 2);
	assert_true(folio_try_get(f));
	folio_put(f);
	/* A hint that adopts a reference adds none. */
	assert_true(folio_try_get(f));
	pinned = folio_hint_adopt(f);
	assert_int_equal(folio_unpinned_refs(f), 2);
	folio_hint_put(f, pinned);
	folio_put(f);
	assert_int_equal(folio_unpinned_refs(f), 1);
	/* Dying (its last reference gone while a lookup still sees the
	 * header): a try-get fails. The header of a folio that left an
	 * index waits for a grace period, so the look below is legal
	 * (ASan poisons a freed header). */
	folio_mark_removed(f);
	folio_put(f);
	assert_false(folio_try_get(f));
	epoch_barrier();
}

/*
 * A folio of many blocks keeps its state map outside its header, and
 * gives it back while wholly uptodate, clean and stable (the pool of a
 * read cache then keeps 64 bytes of header per 2 MiB folio, not 256).
 * Compaction is refused while anything is dirty, unstable or under
 * writeback (a write's completion must mark its blocks without
 * allocating); every state call on the shared map sees "all uptodate,
 * nothing dirty or unstable" and writes nothing to it; a change takes a
 * map of its own again, or fails with -ENOMEM changing nothing. The
 * process-wide count of outside map bytes follows each step.
 */
static void test_outside_map(void **state)
{
	(void)state;
	const size_t size = 2 * MIB, bs = 4096, mapb = 3 * 512 / 8;
	size_t b0 = folio_outside_map_bytes(), u, d, un;
	struct folio *f;
	assert_int_equal(folio_new(&f, 0, size, bs), 0);
	assert_int_equal(folio_outside_map_bytes(), b0 + mapb);
	assert_int_equal(folio_compact_state(f), 0); /* nothing uptodate */
	assert_int_equal(folio_set_uptodate(f, 0, size), FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_compact_state(f), mapb);
	assert_int_equal(folio_outside_map_bytes(), b0);
	assert_int_equal(folio_compact_state(f), 0); /* shared already */

	/* Every call sees the state the shared map says. */
	folio_count_blocks(f, &u, &d, &un);
	assert_true(u == 512 && d == 0 && un == 0);
	assert_int_equal(folio_is_uptodate(f, 0, size), 1);
	assert_int_equal(folio_is_dirty(f, 0, size), 0);
	size_t off = 0;
	assert_int_equal(folio_next_dirty(f, &off), 0);
	assert_int_equal(folio_next_missing(f, &off), 0);
	struct folio_range runs[4];
	assert_int_equal(folio_take_dirty(f, runs, 4), 0);
	assert_int_equal(folio_clear_dirty(f, 0, size), 0);
	assert_int_equal(folio_forget_unstable(f, 0, size), 0);
	assert_int_equal(folio_redirty_unstable(f, &un, &d), 0);
	assert_int_equal(folio_stabilize(f, 1, 0, &un), 0);
	assert_int_equal(folio_set_uptodate(f, 0, size), 0);
	folio_drain(f, &d, &un);
	assert_true(d == 0 && un == 0);
	assert_int_equal(folio_outside_map_bytes(), b0);

	/* Out of memory: the write's dirtying fails and changes nothing. */
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_set_dirty(f, 8192, 4096), -ENOMEM);
	assert_int_equal(folio_own_state(f), 0);
	assert_int_equal(folio_outside_map_bytes(), b0 + mapb);
	assert_int_equal(folio_compact_state(f), mapb);
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_own_state(f), -ENOMEM);
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_clear_uptodate(f, 0, 4096), -ENOMEM);
	assert_int_equal(folio_is_uptodate(f, 0, size), 1);

	/* A write, its writeback, its flush. */
	assert_int_equal(folio_set_dirty(f, 8192, 4096), FOLIO_BECAME_DIRTY);
	assert_int_equal(folio_outside_map_bytes(), b0 + mapb);
	folio_count_blocks(f, &u, &d, &un);
	assert_true(u == 512 && d == 1 && un == 0);
	assert_int_equal(folio_compact_state(f), 0); /* dirty */
	assert_true(folio_trystart_writeback(f));
	assert_int_equal(folio_take_dirty(f, runs, 4), 1);
	assert_true(runs[0].off == 8192 && runs[0].len == 4096);
	assert_int_equal(folio_compact_state(f), 0); /* under writeback */
	assert_int_equal(folio_mark_unstable(f, 8192, 4096, 1, 0, &un),
			 FOLIO_BECAME_UNSTABLE);
	folio_end_writeback_held(f);
	assert_int_equal(folio_compact_state(f), 0); /* unstable */
	assert_int_equal(folio_stabilize(f, 1, 0, &un), 0);
	assert_int_equal(un, 1);
	assert_int_equal(folio_compact_state(f), mapb);

	/* Invalidating part of it takes a map again. */
	assert_int_equal(folio_clear_uptodate(f, 4096, 8192), 0);
	folio_count_blocks(f, &u, &d, &un);
	assert_true(u == 510 && d == 0 && un == 0);
	assert_int_equal(folio_compact_state(f), 0);
	assert_false(folio_forget_shared(f)); /* its own map: not shared */

	/* Forgetting all of it needs no map: the shared one of nothing
	 * uptodate. A whole fill shares the other one again, a partial
	 * one takes a map (or fails, changing nothing). */
	assert_int_equal(folio_set_uptodate(f, 0, size), FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_compact_state(f), mapb);
	assert_true(folio_forget_shared(f));
	assert_int_equal(folio_outside_map_bytes(), b0);
	folio_count_blocks(f, &u, &d, &un);
	assert_true(u == 0 && d == 0 && un == 0);
	assert_int_equal(folio_is_uptodate(f, 0, 4096), 0);
	off = 0;
	assert_int_equal(folio_next_missing(f, &off), (ssize_t)size);
	assert_int_equal(folio_clear_uptodate(f, 0, size), 0); /* no map */
	assert_int_equal(folio_outside_map_bytes(), b0);
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_set_uptodate(f, 0, 4096), -ENOMEM);
	assert_int_equal(folio_is_uptodate(f, 0, 4096), 0);
	assert_int_equal(folio_set_uptodate(f, 0, size), FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_outside_map_bytes(), b0);
	assert_int_equal(folio_is_uptodate(f, 0, size), 1);
	assert_true(folio_forget_shared(f));
	assert_int_equal(folio_set_uptodate(f, 8192, 4096), 0);
	assert_int_equal(folio_outside_map_bytes(), b0 + mapb);
	folio_count_blocks(f, &u, &d, &un);
	assert_true(u == 1 && d == 0 && un == 0);
	assert_true(folio_forget_shared(f) == false);
	folio_put(f);
	assert_int_equal(folio_outside_map_bytes(), b0);

	/* Up to FOLIO_MAP_INLINE_MAX blocks the map stays in the header. */
	assert_int_equal(folio_new(&f, 0, 128 * KIB, bs), 0);
	assert_int_equal(folio_set_uptodate(f, 0, 128 * KIB),
			 FOLIO_BECAME_UPTODATE);
	assert_int_equal(folio_compact_state(f), 0);
	assert_int_equal(folio_outside_map_bytes(), b0);
	folio_put(f);
	/* A folio whose map cannot be had is not made. */
	atomic_store(&folio_map_fail_next, 1);
	assert_int_equal(folio_new(&f, 0, size, bs), -ENOMEM);
	assert_int_equal(folio_outside_map_bytes(), b0);
	epoch_barrier();
}

/* Unstable blocks are released by a flush that began after their writes
 * completed (flush generations) and counted no failed flush their
 * writes were not submitted under; a failure counted since makes the
 * flush report them lost and change nothing. Stamps compare modulo
 * 2^32. */
static void test_unstable_stamps(void **state)
{
	(void)state;
	static const struct { size_t size, bs; } geo[] = {
		{4096, 4096}, {65536, 4096}};
	for (size_t g = 0; g < 2; g++) {
		struct folio *f;
		assert_int_equal(folio_new(&f, 0, geo[g].size, geo[g].bs), 0);
		size_t n;
		const uint64_t base = 0xfffffff0ull; /* crosses 2^32 */
		assert_int_equal(folio_mark_unstable(f, 0, 4096, base + 3,
						     base + 1, &n),
				 FOLIO_BECAME_UNSTABLE);
		/* A second write, submitted after a failure, completing
		 * later: the oldest count and the newest generation stay. */
		assert_int_equal(folio_mark_unstable(f, 0, geo[g].bs,
						     base + 20, base + 17, &n),
				 0);
		size_t released = 99;
		/* A flush that began before the newest completion. */
		assert_int_equal(folio_stabilize(f, base + 19, base + 1,
						 &released),
				 FOLIO_STABLE_LEFT);
		assert_int_equal(released, 0);
		/* One that counted a failure the first write was not
		 * submitted under (also with the count past 2^32). */
		assert_int_equal(folio_stabilize(f, base + 25, base + 2,
						 &released),
				 FOLIO_STABLE_LOST);
		assert_int_equal(released, 0);
		assert_true(folio_test_unstable(f));
		assert_int_equal(folio_stabilize(f, base + 25, base + 0x20,
						 &released),
				 FOLIO_STABLE_LOST);
		/* The one that proves them durable. */
		assert_int_equal(folio_stabilize(f, base + 20, base + 1,
						 &released),
				 0);
		assert_int_equal(released, 1);
		assert_false(folio_test_unstable(f));
		/* Stamps start afresh once nothing is unstable. */
		assert_int_equal(folio_mark_unstable(f, 0, 4096, base + 30,
						     base + 40, &n),
				 FOLIO_BECAME_UNSTABLE);
		assert_int_equal(folio_stabilize(f, base + 30, base + 40,
						 &released),
				 0);
		assert_int_equal(released, 1);
		folio_put(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry_valid),
		cmocka_unit_test(test_geometry_rejected),
		cmocka_unit_test(test_null_accessors),
		cmocka_unit_test(test_rounding),
		cmocka_unit_test(test_transitions),
		cmocka_unit_test(test_dirty_keeps_uptodate),
		cmocka_unit_test(test_unstable_stamps),
		cmocka_unit_test(test_outside_map),
		cmocka_unit_test(test_word_boundaries),
		cmocka_unit_test(test_bad_ranges),
		cmocka_unit_test(test_bad_next_and_take),
		cmocka_unit_test(test_refcount),
		cmocka_unit_test(test_try_get_and_freeze),
		cmocka_unit_test(test_lock_and_writeback),
		cmocka_unit_test(test_model_one_block_every_byte),
		cmocka_unit_test(test_model_small),
		cmocka_unit_test(test_model_large),
		cmocka_unit_test(test_next_dirty_missing),
		cmocka_unit_test(test_take_dirty),
		cmocka_unit_test(test_read_version),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
