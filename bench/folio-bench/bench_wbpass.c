/* SPDX-License-Identifier: MIT */
/*
 * wbpass: a writeback pass must cost in proportion to the dirty folios,
 * not the cached ones (the index's DIRTY tags let it skip clean subtrees).
 * One mapping caches many folios of which a few are dirty; the other
 * caches only those few, at the same positions, all dirty. Same dirty
 * folios, same positions, so the same engine requests: the only
 * difference is the clean folios the pass has to step over.
 *
 * With --inline-engine the store is an engine that completes each request
 * inside submit() without touching its bytes, so what a pass costs is the
 * library's own work, request building included. The pass itself is
 * wbpass_pass(), a function of its own for callgrind --toggle-collect
 * (folio-bench callgrind writeback).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static uint64_t ndirty = 1000;
static uint64_t rounds = 21;
static bool inline_engine;
static bool whole_sync;
static const char *only;

static const char *const only_choices[] = {"few-dirty", "all-dirty", NULL};

static struct bench_xopt xopts[] = {
	{.name = "dirty", .type = BENCH_X_UINT, .var = &ndirty, .metavar = "N",
	 .help = "dirty folios per pass"},
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds,
	 .metavar = "N", .help = "passes timed (the median is reported)"},
	{.name = "inline-engine", .type = BENCH_X_FLAG, .var = &inline_engine,
	 .help = "store that completes requests inside submit() and moves "
		 "no bytes: the pass costs only the library's work"},
	{.name = "sync", .type = BENCH_X_FLAG, .var = &whole_sync,
	 .help = "time folio_mapping_sync() (pass, wait, flush and the "
		 "settling of unstable blocks) instead of the pass alone"},
	{.name = "only", .type = BENCH_X_STR, .var = &only, .metavar = "SIDE",
	 .choices = only_choices,
	 .help = "run one mapping: few-dirty (many cached) or all-dirty"},
	{0},
};

struct side {
	struct bench_engine be;
	struct folio_mapping *m;
};

static int engine_open(struct bench_ctx *c, struct bench_engine *be)
{
	if (!inline_engine)
		return bench_engine_open(c, be, c->o.engine, -1, c->o.size);
	memset(be, 0, sizeof(*be));
	int err = bench_inline_engine(&be->engine);
	if (err)
		fprintf(stderr, "folio-bench wbpass: inline engine: %s\n",
			strerror(-err));
	return err;
}

static void engine_close(struct bench_engine *be)
{
	if (inline_engine)
		folio_engine_free(be->engine);
	else
		bench_engine_close(be);
}

static int side_open(struct bench_ctx *c, struct side *s, uint64_t size)
{
	const struct bench_opts *o = &c->o;
	memset(s, 0, sizeof(*s));
	int err = engine_open(c, &s->be);
	if (err)
		return err;
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = o->block_size,
		.min_folio_size = o->folio_size,
		.max_folio_size = o->folio_size,
		.size = size,
		.flags = o->tracking == BENCH_TRACK_FOLIO
				 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
		.engine = s->be.engine,
	};
	err = folio_mapping_new(&s->m, &mo);
	if (err)
		engine_close(&s->be);
	return err;
}

static int side_close(struct side *s)
{
	int err = 0;
	if (s->m) {
		err = folio_mapping_sync(s->m, NULL);
		int f = folio_mapping_free(s->m);
		if (!err)
			err = f;
	}
	engine_close(&s->be);
	return err;
}

/* Bytes dirtied in each dirty folio. */
static size_t dirty_len(const struct bench_opts *o)
{
	return (size_t)(o->bs < o->folio_size ? o->bs : o->folio_size);
}

static int dirty_all(struct bench_ctx *c, struct folio_mapping *m,
		     uint64_t stride, const char *buf)
{
	const struct bench_opts *o = &c->o;
	size_t len = dirty_len(o);
	for (uint64_t i = 0; i < ndirty; i++) {
		ssize_t r = folio_mapping_write(m, buf, len,
						i * stride * o->folio_size);
		if (r != (ssize_t)len)
			return r < 0 ? (int)r : -EIO;
	}
	return 0;
}

/* The measured pass, alone in its function for callgrind. */
BENCH_NOINLINE static int64_t wbpass_pass(struct folio_mapping *m,
					  const struct folio_writeback_opts *wo)
{
	return folio_mapping_writeback(m, wo);
}

/* The measured sync, alone in its function for callgrind (folio-bench
 * callgrind sync). */
BENCH_NOINLINE static int wbpass_sync(struct folio_mapping *m)
{
	return folio_mapping_sync(m, NULL);
}

/* One measured round: the pass, or with --sync the whole sync. Returns
 * the bytes written back (a sync: the dirty bytes it had to write) or a
 * negative errno. */
static int64_t measured(struct folio_mapping *m,
			const struct folio_writeback_opts *wo,
			int64_t dirty_bytes)
{
	if (!whole_sync)
		return wbpass_pass(m, wo);
	int r = wbpass_sync(m);
	return r ? r : dirty_bytes;
}

/* Time `rounds` passes, re-dirtying the same folios before each. */
static int passes(struct bench_ctx *c, struct folio_mapping *m,
		  uint64_t stride, const char *name, double *median_us)
{
	const struct bench_opts *o = &c->o;
	double *t = calloc(rounds, sizeof(*t));
	char *buf = malloc(o->folio_size);
	int err = t && buf ? 0 : -ENOMEM;
	int64_t bytes = 0;
	size_t len = dirty_len(o);
	struct folio_writeback_opts wo = {.sz = sizeof(wo),
					  .flags = FOLIO_WB_WAIT};
	for (uint64_t r = 0; r < rounds && !err; r++) {
		memset(buf, (int)r, o->folio_size);
		err = dirty_all(c, m, stride, buf);
		if (err)
			break;
		uint64_t t0 = bench_now_ns();
		bytes = measured(m, &wo, (int64_t)(ndirty * len));
		uint64_t t1 = bench_now_ns();
		if (bytes < 0)
			err = (int)bytes;
		t[r] = (double)(t1 - t0) / 1e3;
		bench_progress("wbpass [%s]: %llu/%llu passes", name,
			       (unsigned long long)r + 1,
			       (unsigned long long)rounds);
	}
	bench_progress_done();
	if (!err) {
		*median_us = bench_median(t, rounds);
		struct bench_variant *v = bench_variant(c, name);
		bench_num(v, "pass_us_median", *median_us);
		bench_num(v, "pass_us_min", t[0]);
		bench_num(v, "pass_us_max", t[rounds - 1]);
		bench_num(v, "ns_per_dirty_folio", *median_us * 1e3 /
							   (double)ndirty);
		bench_num(v, "bytes_per_pass", (double)bytes);
		struct folio_mapping_stats st = {.sz = sizeof(st)};
		folio_mapping_stats(m, &st);
		bench_num(v, "cached_folios", (double)st.folios);
		bench_num(v, "wb_requests_total", (double)st.wb_requests);
	}
	free(t);
	free(buf);
	return err;
}

/* The mapping caching every folio, a few of them dirty. */
static int run_few_dirty(struct bench_ctx *c, uint64_t cached,
			 uint64_t stride, double *pass_us, double *walk_ms)
{
	const struct bench_opts *o = &c->o;
	struct side big;
	double fill_s = 0;
	int err = side_open(c, &big, cached * o->folio_size);
	if (!err) {
		uint64_t t0 = bench_now_ns();
		/* Cache it clean: the store is empty, so reads give zeros and
		 * cost no device time. */
		err = bench_populate(big.m, cached * o->folio_size, MIB);
		fill_s = (double)(bench_now_ns() - t0) / 1e9;
	}
	if (!err) {
		/* What visiting every cached folio costs, for scale. */
		struct folio_mapping_stats st = {.sz = sizeof(st)};
		uint64_t t0 = bench_now_ns();
		folio_mapping_stats(big.m, &st);
		*walk_ms = (double)(bench_now_ns() - t0) / 1e6;
		err = passes(c, big.m, stride, "many cached, few dirty",
			     pass_us);
	}
	int e2 = side_close(&big);
	if (!err)
		err = e2;
	bench_param_num(c, "populate_s", fill_s);
	return err;
}

/* The mapping caching only the dirty folios. */
static int run_all_dirty(struct bench_ctx *c, uint64_t stride,
			 double *pass_us)
{
	struct side small;
	int err = side_open(c, &small, 0);
	if (err)
		return err;
	err = passes(c, small.m, stride, "few cached, all dirty", pass_us);
	int e2 = side_close(&small);
	return err ? err : e2;
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	uint64_t cached = o->size / o->folio_size;
	if (!rounds || !ndirty || !cached) {
		fprintf(stderr, "folio-bench wbpass: --dirty, --rounds and "
				"--size / --folio-size must be > 0\n");
		return 2;
	}
	if (ndirty > cached)
		ndirty = cached;
	uint64_t stride = cached / ndirty;
	bool few = !only || !strcmp(only, "few-dirty");
	bool all = !only || !strcmp(only, "all-dirty");
	const char *store = inline_engine ? "inline"
					  : bench_engine_name(o->engine);
	char s1[32];
	bench_title(c, "one %s, %llu dirty of "
		       "%llu cached %s folios vs %llu cached all dirty, same "
		       "positions, %s engine, median of %llu",
		    whole_sync ? "folio_mapping_sync()"
			       : "writeback pass (FOLIO_WB_WAIT)",
		    (unsigned long long)ndirty, (unsigned long long)cached,
		    bench_fmt_size(s1, sizeof(s1), o->folio_size),
		    (unsigned long long)ndirty, store,
		    (unsigned long long)rounds);
	bench_param_num(c, "cached_folios", (double)cached);
	bench_param_num(c, "dirty_folios", (double)ndirty);
	bench_param_num(c, "rounds", (double)rounds);

	double big_us = 0, small_us = 0, walk_ms = 0;
	int err = few ? run_few_dirty(c, cached, stride, &big_us, &walk_ms)
		      : 0;
	if (!err && all)
		err = run_all_dirty(c, stride, &small_us);
	if (err) {
		fprintf(stderr, "folio-bench wbpass: %s\n", strerror(-err));
		return 1;
	}

	char fig[96], cmp[64];
	snprintf(cmp, sizeof(cmp), "%llu cached, all dirty",
		 (unsigned long long)ndirty);
	if (few) {
		snprintf(fig, sizeof(fig), "pass: %llu dirty of %llu cached",
			 (unsigned long long)ndirty,
			 (unsigned long long)cached);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = big_us,
				     .unit = "us", .cmp = all ? cmp : NULL,
				     .ratio = all ? big_us / small_us : 0,
				     .flags = BENCH_ROW_HEADLINE});
	}
	if (all) {
		snprintf(fig, sizeof(fig), "pass: %s", cmp);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = small_us,
				     .unit = "us",
				     .flags = few ? 0 : BENCH_ROW_HEADLINE});
		bench_row(c, &(struct bench_row){
				     .figure = "per dirty folio, all dirty",
				     .value = small_us * 1e3 / (double)ndirty,
				     .unit = "ns"});
	}
	if (!few)
		return 0;
	snprintf(fig, sizeof(fig), "per dirty folio, %llu cached",
		 (unsigned long long)cached);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = big_us * 1e3 / (double)ndirty,
			     .unit = "ns"});
	snprintf(fig, sizeof(fig), "walk of all %llu folios (stats)",
		 (unsigned long long)cached);
	bench_row(c, &(struct bench_row){.figure = fig, .value = walk_ms * 1e3,
					 .unit = "us", .cmp = "the pass",
					 .ratio = walk_ms * 1e3 / big_us});
	if (all) {
		double x = big_us / small_us;
		bench_note(c, "target: within 2x of the all-dirty mapping: "
			      "%.2fx, %s",
			   x, x <= 2 ? "met" : "NOT met");
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "wbpass",
	.summary = "cost of one writeback pass: few dirty among many cached "
		   "folios vs only those cached",
	.exec = run,
	.in_default = true,
	.order = 50,
	.help =
	"Caches --size / --folio-size clean folios (default 10^6 x 4K; about\n"
	"4 GB of memory) in one mapping and --dirty of them, evenly spread,\n"
	"in another mapping at the same positions. Each round re-dirties the\n"
	"same --dirty folios (--bs bytes each, untimed), then times\n"
	"folio_mapping_writeback(FOLIO_WB_WAIT) alone. The median of --rounds\n"
	"passes is compared: a pass should cost in proportion to the dirty\n"
	"folios (target: within 2x). A walk over every cached folio\n"
	"(folio_mapping_stats) is shown for scale. --only runs one of the\n"
	"two mappings; --inline-engine replaces the store by one that\n"
	"completes each request inside submit() without moving bytes, so a\n"
	"pass costs only the library's work (folio-bench callgrind writeback\n"
	"counts its instructions per dirty folio). --sync times\n"
	"folio_mapping_sync() instead of the pass: the pass, the wait, the\n"
	"flush and the settling of the unstable blocks (folio-bench callgrind\n"
	"sync).",
	.defaults = {.size = 1000000 * 4 * KIB, .bs = 4 * KIB,
		     .folio_size = 4 * KIB, .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_MEM},
	/* Always the mem engine: 4 GB of clean cache must cost no I/O. */
	.uses = BOPT_SIZE | BOPT_BS | BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE |
		BOPT_TRACKING | BOPT_DEVMODEL,
	.xopts = xopts,
	/* 10^6 folios take ~40 s here, mostly first-touch page faults. */
	.quick_size = 100000 * 4 * KIB,
};
BENCH_REGISTER(cmd)
