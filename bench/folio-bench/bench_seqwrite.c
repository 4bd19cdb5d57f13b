/* SPDX-License-Identifier: MIT */
/*
 * seqwrite: large sequential writes into an empty mapping, with small vs
 * large maximum folio sizes. New folios are sized from the write length
 * (the large-folio order hint), so 128 KiB writes get 128 KiB folios when
 * the maximum allows: fewer folios to allocate, look up, lock and mark,
 * and fewer, larger requests at writeback.
 *
 * Each repetition starts from an empty mapping (the hint only acts when a
 * folio is created), times the writes (nothing is synced in the loop),
 * then times the sync separately. The median repetition is reported.
 *
 * Folio memory comes from malloc, and glibc serves allocations of 128 KiB
 * and more with fresh mmap()s while smaller ones reuse the heap: left
 * alone, the comparison would mostly measure page faults for one side
 * and not the other. So the workload asks glibc to keep freed memory
 * (mallopt) and discards a first, cold repetition: every timed
 * repetition then writes into memory faulted in before, and the figures
 * are the library's own work. The first repetition's figure is kept in
 * the JSON.
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static struct bench_list sizes = {2, {4 * KIB, 2 * MIB}};

static struct bench_xopt xopts[] = {
	{.name = "folio-sizes", .type = BENCH_X_SIZES, .var = &sizes,
	 .metavar = "LIST",
	 .help = "max folio sizes to compare; ratios are against the first"},
	{0},
};

#define MAX_REPS 64

struct result {
	double write_mbs, total_mbs, sync_ms;
	uint64_t typical_folio;
};

/* One repetition: returns write and write+sync seconds. */
static int one_rep(struct bench_ctx *c, int fd, uint64_t max_folio,
		   const char *src, double *w_s, double *t_s,
		   struct folio_mapping_stats *st)
{
	const struct bench_opts *o = &c->o;
	struct bench_engine be;
	if (fd >= 0 && ftruncate(fd, 0))
		return -errno;
	int err = bench_engine_open(c, &be, o->engine, fd, o->size);
	if (err)
		return err;
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = o->block_size < max_folio ? o->block_size
							: max_folio,
		.max_folio_size = max_folio,
		.flags = o->tracking == BENCH_TRACK_FOLIO
				 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
		.engine = be.engine,
	};
	struct folio_mapping *m;
	err = folio_mapping_new(&m, &mo);
	if (err) {
		bench_engine_close(&be);
		return err;
	}
	uint64_t t0 = bench_now_ns();
	for (uint64_t pos = 0; pos < o->size && !err; pos += o->bs) {
		size_t n = (size_t)(o->size - pos < o->bs ? o->size - pos
							  : o->bs);
		ssize_t r = folio_mapping_write(m, src, n, pos);
		if (r != (ssize_t)n)
			err = r < 0 ? (int)r : -EIO;
	}
	uint64_t t1 = bench_now_ns();
	int s = folio_mapping_sync(m, NULL);
	uint64_t t2 = bench_now_ns();
	if (!err)
		err = s;
	st->sz = sizeof(*st);
	folio_mapping_stats(m, st);
	int f = folio_mapping_free(m);
	if (!err)
		err = f;
	bench_engine_close(&be);
	*w_s = (double)(t1 - t0) / 1e9;
	*t_s = (double)(t2 - t0) / 1e9;
	return err;
}

static int run_size(struct bench_ctx *c, int fd, uint64_t max_folio,
		    const char *src, struct result *res)
{
	const struct bench_opts *o = &c->o;
	double w[MAX_REPS], t[MAX_REPS], sy[MAX_REPS];
	unsigned reps = 0;
	struct folio_mapping_stats st;
	char name[64], s1[32];
	snprintf(name, sizeof(name), "max folio %s",
		 bench_fmt_size(s1, sizeof(s1), max_folio));
	double cold_w, cold_t;
	int err = one_rep(c, fd, max_folio, src, &cold_w, &cold_t, &st);
	if (err) {
		fprintf(stderr, "folio-bench seqwrite: %s: %s\n", name,
			strerror(-err));
		return err;
	}
	uint64_t start = bench_now_ns();
	uint64_t budget = (uint64_t)(o->runtime * 1e9);
	/* At least three repetitions for a median, then as many as fit. */
	while (reps < MAX_REPS &&
	       (reps < 3 || bench_now_ns() - start < budget)) {
		err = one_rep(c, fd, max_folio, src, &w[reps], &t[reps], &st);
		if (err) {
			fprintf(stderr, "folio-bench seqwrite: %s: %s\n",
				name, strerror(-err));
			return err;
		}
		sy[reps] = t[reps] - w[reps];
		reps++;
		bench_progress("seqwrite [%s]: %u repetitions", name, reps);
	}
	bench_progress_done();
	double mw = bench_median(w, reps), mt = bench_median(t, reps);
	res->write_mbs = (double)o->size / mw / 1e6;
	res->total_mbs = (double)o->size / mt / 1e6;
	res->sync_ms = bench_median(sy, reps) * 1e3;
	/* The folio size most of the data ended up in. */
	uint64_t best = 0, typical = 0;
	for (unsigned i = 0; i < FOLIO_STATS_SHIFTS; i++) {
		uint64_t bytes = st.folios_by_shift[i] << (9 + i);
		if (bytes > best) {
			best = bytes;
			typical = UINT64_C(512) << i;
		}
	}
	res->typical_folio = typical;
	struct bench_variant *v = bench_variant(c, name);
	bench_num(v, "max_folio_size", (double)max_folio);
	bench_num(v, "repetitions", reps);
	/* Cold only for the first size of a run: later sizes reuse the
	 * memory the earlier ones faulted in. */
	bench_num(v, "first_rep_write_mb_per_s",
		  (double)o->size / cold_w / 1e6);
	bench_num(v, "first_rep_write_sync_mb_per_s",
		  (double)o->size / cold_t / 1e6);
	bench_num(v, "write_mb_per_s", res->write_mbs);
	bench_num(v, "write_sync_mb_per_s", res->total_mbs);
	bench_num(v, "sync_ms", res->sync_ms);
	bench_num(v, "folios", (double)st.folios);
	bench_num(v, "typical_folio_size", (double)typical);
	bench_num(v, "wb_requests", (double)st.wb_requests);
	return 0;
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	struct bench_list list = sizes;
	if (o->given & BOPT_FOLIO_SIZE) {
		list.n = 1;
		list.v[0] = o->folio_size;
	}
	for (unsigned i = 0; i < list.n; i++) {
		if (list.v[i] & (list.v[i] - 1) || list.v[i] < 512 ||
		    list.v[i] > FOLIO_MAX_SIZE) {
			fprintf(stderr, "folio-bench seqwrite: folio sizes "
					"are powers of two from 512 to 2M\n");
			return 2;
		}
	}
	char s1[32], s2[32];
	bench_title(c, "%s sequential writes of %s into an empty mapping, "
		       "%s engine, sync timed separately (median of "
		       "repetitions)",
		    bench_fmt_size(s1, sizeof(s1), o->bs),
		    bench_fmt_size(s2, sizeof(s2), o->size),
		    bench_engine_name(o->engine));
#ifdef __GLIBC__
	/* Up to the largest folio from the heap, and no trimming: see the
	 * comment at the top. The settings stay for the process's life,
	 * which only makes later workloads fault less. */
	mallopt(M_MMAP_THRESHOLD, (int)(2 * FOLIO_MAX_SIZE));
	mallopt(M_TRIM_THRESHOLD, INT32_MAX);
	bench_param_num(c, "malloc_keeps_memory", 1);
#endif
	int fd = -1;
	if (o->engine != BENCH_ENGINE_MEM && (fd = bench_tmpfile(o->dir)) < 0)
		return 1;
	char *src = malloc(o->bs);
	if (!src) {
		if (fd >= 0)
			close(fd);
		return 1;
	}
	memset(src, 's', o->bs);
	struct result res[BENCH_LIST_MAX];
	int err = 0;
	for (unsigned i = 0; i < list.n && !err; i++)
		err = run_size(c, fd, list.v[i], src, &res[i]);
	free(src);
	if (fd >= 0)
		close(fd);
	if (err)
		return 1;

	const char *sync_what = o->engine == BENCH_ENGINE_MEM
					? "write+sync (into the mem store)"
					: "write+sync (fdatasync)";
	char base[64], fig[128];
	snprintf(base, sizeof(base), "max folio %s",
		 bench_fmt_size(s1, sizeof(s1), list.v[0]));
	for (unsigned i = 0; i < list.n; i++) {
		char name[64], typ[32];
		snprintf(name, sizeof(name), "max folio %s",
			 bench_fmt_size(s1, sizeof(s1), list.v[i]));
		bool cmp = i > 0;
		snprintf(fig, sizeof(fig), "%s (%s folios): write", name,
			 bench_fmt_size(typ, sizeof(typ),
					res[i].typical_folio));
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = res[i].write_mbs,
				     .unit = "MB/s", .cmp = cmp ? base : NULL,
				     .ratio = cmp ? res[i].write_mbs /
							    res[0].write_mbs
						  : 0,
				     .flags = cmp || list.n == 1
						      ? BENCH_ROW_HEADLINE : 0});
		snprintf(fig, sizeof(fig), "%s: %s", name, sync_what);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = res[i].total_mbs,
				     .unit = "MB/s", .cmp = cmp ? base : NULL,
				     .ratio = cmp ? res[i].total_mbs /
							    res[0].total_mbs
						  : 0});
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "seqwrite",
	.summary = "128 KiB sequential writes: small vs large max folio size "
		   "(the large-folio order hint)",
	.exec = run,
	.in_default = true,
	.order = 30,
	.help =
	"Writes --size bytes in --bs pieces into an empty mapping (mem engine\n"
	"by default: no I/O in the loop), once per max folio size in\n"
	"--folio-sizes (or just --folio-size). New folios are sized from the\n"
	"write length, capped by the max, so 128K writes make 128K folios when\n"
	"the max allows. The sync after the loop is timed separately (with\n"
	"--engine posix it is pwritev + fdatasync to a file in --dir). Each\n"
	"size repeats from an empty mapping for --runtime seconds (at least 3\n"
	"times, after one untimed cold run) and the median is reported, with\n"
	"the ratio to the first size. glibc is asked to keep freed memory so\n"
	"the timed runs do not pay page faults (which would differ by folio\n"
	"size: allocations of 128K and more are fresh mmaps otherwise).",
	.defaults = {.size = 256 * MIB, .bs = 128 * KIB, .runtime = 2,
		     .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_MEM},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_RUNTIME | BOPT_FOLIO_SIZE |
		BOPT_BLOCK_SIZE | BOPT_ENGINE | BOPT_TRACKING | BOPT_DIR |
		BOPT_DEVMODEL,
	.xopts = xopts,
	.quick_size = 64 * MIB,
	.quick_runtime = 1,
};
BENCH_REGISTER(cmd)
