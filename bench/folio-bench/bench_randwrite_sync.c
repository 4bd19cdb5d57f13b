/* SPDX-License-Identifier: MIT */
/*
 * randwrite-sync: small random overwrites of a cached file, each followed
 * by a sync, the case where per-block dirty state matters most: with
 * whole-folio tracking every 4 KiB write sends its whole 64 KiB folio to
 * the device.
 *
 * --files N splits --size over N files, each with its own mapping and
 * engine; job j works on file j % N. --layout names its two ends: own (a
 * file per job, as fio lays out numjobs, the default because that is what
 * a comparison with fio or with a plain pwrite + fdatasync loop measures)
 * and shared (--files 1). The default run measures both, since they fail
 * differently: with the shared layout all threads share ONE mapping, as
 * the threads of a database share one file's cache: a sync writes back
 * every dirty block of the mapping, so a thread's sync may also carry
 * another thread's write; the write amplification figure (bytes submitted
 * to the engine per byte written) stays exact because both counters are
 * the mappings' own.
 *
 * Three variants run over the same files, with the same threads and the
 * same offsets (thread i draws from the same seed in every variant):
 * per-block tracking, whole-folio tracking (FOLIO_MAPPING_FOLIO_DIRTY),
 * and the kernel page cache (pwrite + fdatasync on the files themselves).
 * With --engine uring a fourth runs beside them: a plain io_uring loop on
 * the same files, one ring per thread, each write sent with a linked
 * fdatasync in one submit-and-wait, the best an io_uring program does
 * with this workload, so that the engine is judged against io_uring's
 * own cost as well as psync's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef BENCH_HAVE_LIBURING
#include <liburing.h>
#endif
/* Valgrind runs a blocking io_uring_enter() holding its own lock, so no
 * other thread runs while a plain io_uring loop waits: it is skipped
 * there (the engine's own rings wait differently). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define BENCH_UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef BENCH_UNDER_VALGRIND
#define BENCH_UNDER_VALGRIND() 0
#endif

#include "bench.h"

static bool no_kernel;
static bool direct;
static uint64_t rounds = 1;
/* Bounds --rounds: each round reopens every variant's files. */
#define MAX_ROUNDS 32
static uint64_t nfiles;
static const char *layout;
static const char *const layout_choices[] = {"shared", "own", "both", NULL};

static struct bench_xopt xopts[] = {
	{.name = "no-kernel", .type = BENCH_X_FLAG, .var = &no_kernel,
	 .help = "skip the kernel page cache variant"},
	{.name = "direct", .type = BENCH_X_FLAG, .var = &direct,
	 .help = "the library's engine writes with O_DIRECT (posix, uring):\n"
		 "  how a database would embed it, with no second copy in\n"
		 "  the kernel page cache"},
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds,
	 .metavar = "N",
	 .help = "run the variants N times, interleaved (each round\n"
		 "  starting one variant later), each for\n"
		 "  --runtime: figures are medians, ratios the median of\n"
		 "  each round's ratio (a shared, noisy disk)"},
	{.name = "files", .type = BENCH_X_UINT, .var = &nfiles, .metavar = "N",
	 .help = "split --size over N files, job j on file j % N (default:\n"
		 "  one file per job, as fio does; 1: all jobs share one\n"
		 "  mapping); --layout is the short form of both ends"},
	{.name = "layout", .type = BENCH_X_STR, .var = &layout,
	 .metavar = "L", .choices = layout_choices,
	 .help = "shared (all jobs on one file, one mapping: --files 1),\n"
		 "  own (a file per job: --files --jobs) or both, one after\n"
		 "  the other (default: own; both in the default run)"},
	{0},
};

/* The variants that bypass the library (run_variant()'s `tracking`). */
#define VARIANT_KERNEL (-1)
#define VARIANT_URING (-2)

struct worker {
	struct bench_ctx *c;
	struct folio_mapping *m; /* NULL: the kernel variants */
	bool uring;              /* the plain io_uring loop */
	int fd;
	uint64_t file_size;
	struct devmodel *dm; /* charges the kernel variant's writes */
	unsigned index;
	atomic_bool *stop;
	uint64_t ops;
	int error;
	struct bench_lat lat;
};

#ifdef BENCH_HAVE_LIBURING
/* One write and its linked fdatasync, in one io_uring_enter(): 0 or
 * -errno (-EIO for a short write). */
static int uring_write_sync(struct io_uring *ring, int fd, const void *buf,
			    size_t len, uint64_t off)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
	io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK);
	io_uring_sqe_set_data64(sqe, 1);
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data64(sqe, 2);
	int r = io_uring_submit_and_wait(ring, 2);
	if (r < 0)
		return r;
	int err = 0;
	for (int i = 0; i < 2; i++) {
		struct io_uring_cqe *cqe;
		r = io_uring_wait_cqe(ring, &cqe);
		if (r < 0)
			return r;
		int res = cqe->res;
		bool write = io_uring_cqe_get_data64(cqe) == 1;
		io_uring_cqe_seen(ring, cqe);
		if (!err && res < 0)
			err = res;
		else if (!err && write && (size_t)res != len)
			err = -EIO;
	}
	return err;
}
#endif

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct bench_opts *o = &w->c->o;
#ifdef BENCH_HAVE_LIBURING
	struct io_uring ring;
	if (w->uring && (w->error = io_uring_queue_init(8, &ring, 0)))
		return NULL;
#endif
	uint64_t seed = 0x5eed0000u + w->index * 7919u + 1;
	uint64_t slots = w->file_size / o->bs;
	unsigned char *buf = malloc(o->bs);
	if (!buf) {
		w->error = -ENOMEM;
		return NULL;
	}
	memset(buf, (int)(0x40 + w->index), o->bs);
	folio_errseq_t cursor = w->m ? folio_mapping_err_cursor(w->m) : 0;

	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		uint64_t off = (bench_rand(&seed) % slots) * o->bs;
		/* Change the bytes so no layer could skip an identical write. */
		buf[0]++;
		uint64_t t0 = bench_now_ns();
		if (w->m) {
			ssize_t r = folio_mapping_write(w->m, buf, o->bs, off);
			if (r != (ssize_t)o->bs) {
				w->error = r < 0 ? (int)r : -EIO;
				break;
			}
			int s = folio_mapping_sync(w->m, &cursor);
			if (s) {
				w->error = s;
				break;
			}
		} else if (w->uring) {
#ifdef BENCH_HAVE_LIBURING
			int r = uring_write_sync(&ring, w->fd, buf, o->bs, off);
			if (r) {
				w->error = r;
				break;
			}
#endif
		} else {
			ssize_t r = pwrite(w->fd, buf, o->bs, (off_t)off);
			if (r != (ssize_t)o->bs || fdatasync(w->fd)) {
				w->error = r < 0 || r == (ssize_t)o->bs ? -errno
									: -EIO;
				break;
			}
			/* The page cache tracks dirtiness per page, so the
			 * sync sends what was written as one request, then
			 * a cache flush, like the library's sync. */
			if (w->dm) {
				devmodel_charge(w->dm, o->bs);
				devmodel_charge(w->dm, 0);
			}
		}
		bench_lat_push(&w->lat, bench_now_ns() - t0);
		w->ops++;
	}
#ifdef BENCH_HAVE_LIBURING
	if (w->uring)
		io_uring_queue_exit(&ring);
#endif
	free(buf);
	return NULL;
}

struct result {
	double mbs, iops, p50_us, p99_us, wa;
	struct bench_variant *v; /* the recorded round's, or NULL */
};

static void stats_add(struct folio_mapping_stats *sum,
		      const struct folio_mapping_stats *st)
{
	sum->bytes_written += st->bytes_written;
	sum->read_bytes += st->read_bytes;
	sum->wb_requests += st->wb_requests;
	sum->wb_bytes += st->wb_bytes;
	sum->wb_merges += st->wb_merges;
	sum->errors += st->errors;
	sum->flushes += st->flushes;
	sum->folios += st->folios;
}

/* One file of a variant: its descriptors, engine and mapping. */
struct vfile {
	int dfd; /* the O_DIRECT description, or -1 */
	struct bench_engine be;
	struct folio_mapping *m;
};

static int open_file(struct bench_ctx *c, struct vfile *f, int fd,
		     uint64_t size, int tracking)
{
	const struct bench_opts *o = &c->o;
	/* A second open file description of the same file, so O_DIRECT
	 * applies to the library's engine only. */
	if (direct && o->engine != BENCH_ENGINE_MEM &&
	    !bench_engine_remote(o->engine)) {
		f->dfd = bench_reopen(fd, O_RDWR | O_DIRECT);
		if (f->dfd < 0)
			return f->dfd;
	}
	int err = bench_engine_open(c, &f->be, o->engine,
				    f->dfd >= 0 ? f->dfd : fd, size);
	if (err)
		return err;
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = o->block_size,
		.max_folio_size = o->folio_size,
		.size = size,
		.flags = tracking == BENCH_TRACK_FOLIO
				 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
		.engine = f->be.engine,
	};
	err = folio_mapping_new(&f->m, &mo);
	/* Whole file in max-size folios, clean. */
	return err ? err
		   : bench_populate(f->m, size,
				    o->folio_size > MIB ? o->folio_size : MIB);
}

static int close_file(struct vfile *f)
{
	int err = 0;
	if (f->m) {
		int s = folio_mapping_sync(f->m, NULL);
		int r = folio_mapping_free(f->m);
		err = s ? s : r;
	}
	bench_engine_close(&f->be);
	if (f->dfd >= 0)
		close(f->dfd);
	return err;
}

/* One round of one variant. Only the last round (`record`) becomes a
 * variant of the output: the others' details go to a scratch one, and
 * run_layout() puts the medians into the recorded one. */
static int run_variant(struct bench_ctx *c, const int *fds, unsigned n,
		       uint64_t file_size, const char *name,
		       const char *layout_label, int tracking, bool record,
		       struct result *res)
{
	const struct bench_opts *o = &c->o;
	struct devmodel *kdm = NULL;
	struct worker *w = calloc(o->jobs, sizeof(*w));
	struct vfile *f = calloc(n, sizeof(*f));
	int err = w && f ? 0 : -ENOMEM;
	struct folio_mapping_stats before = {.sz = sizeof(before)};
	struct folio_mapping_stats after = {.sz = sizeof(after)};

	for (unsigned i = 0; f && i < n; i++)
		f[i].dfd = -1;
	/* Every variant starts without the files in the kernel's page
	 * cache. The kernel variant leaves the very blocks the next one
	 * writes cached (each variant writes the same offsets), and an
	 * O_DIRECT write over cached pages must invalidate them first: a
	 * cost the library paid only here, not in a database whose file
	 * nothing else caches (as in sync-scatter). A remote store has no
	 * file here. */
	for (unsigned i = 0; !err && i < n && fds[i] >= 0; i++) {
		double left = bench_drop_kernel_cache(c, fds[i], file_size);
		if (left < 0)
			err = (int)left;
	}
	for (unsigned i = 0; !err && tracking >= 0 && i < n; i++) {
		err = open_file(c, &f[i], fds[i], file_size, tracking);
		struct folio_mapping_stats st = {.sz = sizeof(st)};
		if (!err)
			err = folio_mapping_stats(f[i].m, &st);
		stats_add(&before, &st);
	}
	if (!err && tracking == VARIANT_KERNEL && o->dm.on) {
		err = devmodel_new(&kdm, &o->dm);
		c->modelled = true;
	}
	if (err)
		goto out;

	atomic_bool stop;
	for (unsigned i = 0; i < o->jobs; i++)
		w[i] = (struct worker){.c = c, .m = f[i % n].m,
				       .uring = tracking == VARIANT_URING,
				       .fd = fds[i % n],
				       .file_size = file_size, .dm = kdm,
				       .index = i, .stop = &stop};
	char what[128];
	snprintf(what, sizeof(what), "randwrite-sync [%s]", name);
	double secs = bench_run_threads(what, o->jobs, worker_main, w,
					sizeof(*w), o->runtime, &stop);
	if (secs < 0) {
		err = -EAGAIN;
		goto out;
	}
	struct bench_lat all = {0};
	uint64_t ops = 0;
	for (unsigned i = 0; i < o->jobs; i++) {
		if (w[i].error && !err)
			err = w[i].error;
		ops += w[i].ops;
		bench_lat_merge(&all, &w[i].lat);
	}
	if (err) {
		bench_lat_free(&all);
		goto out;
	}
	static struct bench_variant scratch;
	struct bench_variant *v = record ? bench_variant(c, name) : NULL;
	if (!v) {
		memset(&scratch, 0, sizeof(scratch));
		v = &scratch;
	}
	res->v = v == &scratch ? NULL : v;
	res->iops = (double)ops / secs;
	res->mbs = res->iops * (double)o->bs / 1e6;
	res->p50_us = bench_lat_pct(&all, 50) / 1e3;
	res->p99_us = bench_lat_pct(&all, 99) / 1e3;
	res->wa = 1; /* the kernel writes what it was given (per page) */
	bench_str(v, "layout", layout_label);
	bench_num(v, "files", n);
	bench_num(v, "seconds", secs);
	bench_num(v, "ops", (double)ops);
	bench_lat_free(&all);
	if (tracking >= 0) {
		for (unsigned i = 0; i < n; i++) {
			struct folio_mapping_stats st = {.sz = sizeof(st)};
			folio_mapping_stats(f[i].m, &st);
			stats_add(&after, &st);
		}
		res->wa = bench_mapping_stats(v, &before, &after);
		bench_num(v, "folios", (double)after.folios);
	} else {
		bench_num(v, "write_amplification", res->wa);
	}
	/* --device-model keeps one file, so one device (see run()). */
	bench_devmodel_stats(v, f[0].be.dm ? f[0].be.dm : kdm);

out:
	for (unsigned i = 0; f && i < n; i++) {
		int r = close_file(&f[i]);
		if (!err)
			err = r;
	}
	devmodel_free(kdm);
	for (unsigned i = 0; w && i < o->jobs; i++)
		bench_lat_free(&w[i].lat);
	free(w);
	free(f);
	if (err)
		fprintf(stderr, "folio-bench randwrite-sync: %s: %s\n", name,
			strerror(-err));
	return err;
}

/* The median over the rounds of variant `k`'s figures, written into its
 * recorded variant. */
static void median_result(struct result rs[][4], unsigned nr, unsigned k,
			  struct result *out)
{
	double mbs[MAX_ROUNDS], iops[MAX_ROUNDS], p50[MAX_ROUNDS],
		p99[MAX_ROUNDS], wa[MAX_ROUNDS];
	for (unsigned r = 0; r < nr; r++) {
		mbs[r] = rs[r][k].mbs;
		iops[r] = rs[r][k].iops;
		p50[r] = rs[r][k].p50_us;
		p99[r] = rs[r][k].p99_us;
		wa[r] = rs[r][k].wa;
	}
	*out = (struct result){.mbs = bench_median(mbs, nr),
			       .iops = bench_median(iops, nr),
			       .p50_us = bench_median(p50, nr),
			       .p99_us = bench_median(p99, nr),
			       .wa = bench_median(wa, nr),
			       .v = rs[nr - 1][k].v};
	struct bench_variant *v = out->v;
	if (!v)
		return;
	bench_num(v, "rounds", nr);
	bench_num(v, "mb_per_s", out->mbs);
	bench_num(v, "iops", out->iops);
	bench_num(v, "p50_us", out->p50_us);
	bench_num(v, "p99_us", out->p99_us);
}

/* The median of each round's MB/s ratio of variant a to variant b: the
 * two ran a few seconds apart, so their ratio drifts less than either. */
static double median_ratio(struct result rs[][4], unsigned nr, unsigned a,
			   unsigned b)
{
	double q[MAX_ROUNDS];
	for (unsigned r = 0; r < nr; r++)
		q[r] = rs[r][b].mbs > 0 ? rs[r][a].mbs / rs[r][b].mbs : 0;
	return bench_median(q, nr);
}

static void add_rows(struct bench_ctx *c, const char *name,
		     const struct result *r, const char *cmp_name,
		     const struct result *cmp, double mbs_ratio, bool headline)
{
	char fig[128];
	snprintf(fig, sizeof(fig), "%s MB/s", name);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = r->mbs, .unit = "MB/s",
			     .cmp = cmp ? cmp_name : NULL,
			     .ratio = cmp ? mbs_ratio : 0,
			     .wa = r->wa,
			     .flags = headline ? BENCH_ROW_HEADLINE : 0});
	snprintf(fig, sizeof(fig), "%s IOPS", name);
	bench_row(c, &(struct bench_row){.figure = fig, .value = r->iops,
					 .unit = "IOPS"});
	snprintf(fig, sizeof(fig), "%s p50 write+sync", name);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = r->p50_us, .unit = "us",
			     .cmp = cmp ? cmp_name : NULL,
			     .ratio = cmp && cmp->p50_us > 0
					      ? r->p50_us / cmp->p50_us : 0});
	snprintf(fig, sizeof(fig), "%s p99 write+sync", name);
	bench_row(c, &(struct bench_row){.figure = fig, .value = r->p99_us,
					 .unit = "us"});
}

/* One layout of the files: how many, and its label ("shared", "own" or
 * "N files"), which goes into the variant names when a run has two. */
struct layout {
	unsigned n;
	char label[24];
	char suffix[32]; /* " (label)" */
	bool labelled;   /* the suffix goes into the names */
};

static void layout_set(struct layout *l, unsigned n, unsigned jobs)
{
	l->n = n;
	if (n == 1)
		snprintf(l->label, sizeof(l->label), "shared");
	else if (n == jobs)
		snprintf(l->label, sizeof(l->label), "own");
	else
		snprintf(l->label, sizeof(l->label), "%u files", n);
	snprintf(l->suffix, sizeof(l->suffix), " (%s)", l->label);
	l->labelled = false;
}

/* Every variant of one layout, and its rows. 0, or 1 after printing why. */
static int run_layout(struct bench_ctx *c, const struct layout *l,
		      bool kernel)
{
	const struct bench_opts *o = &c->o;
	unsigned n = l->n;
	uint64_t file_size = o->size / n / o->bs * o->bs;
	int *fds = calloc(n, sizeof(*fds));
	if (!fds)
		return 1;
	int err = 0;
	unsigned opened = 0;
	for (unsigned i = 0; i < n; i++)
		fds[i] = -1;
	/* A remote engine keeps its data elsewhere: no file. */
	while (!err && opened < n && !bench_engine_remote(o->engine)) {
		int fd = bench_tmpfile(o->dir);
		if (fd < 0) {
			err = -EIO;
			break;
		}
		fds[opened++] = fd;
		err = bench_prefill(fd, file_size);
		if (err)
			fprintf(stderr, "folio-bench randwrite-sync: preparing "
					"a file: %s\n",
				strerror(-err));
	}
	bool only = o->given & BOPT_TRACKING;
	bool do_block = !only || o->tracking == BENCH_TRACK_BLOCK;
	bool do_folio = !only || o->tracking == BENCH_TRACK_FOLIO;
	const char *sfx = l->labelled ? l->suffix : "";
	char nb[96], nf[96], nk[96], nu[96];
	snprintf(nb, sizeof(nb), "block tracking%s", sfx);
	snprintf(nf, sizeof(nf), "whole-folio%s", sfx);
	snprintf(nk, sizeof(nk), "kernel page cache%s", sfx);
	snprintf(nu, sizeof(nu), "kernel io_uring%s", sfx);
	bool plain_uring = false;
#ifdef BENCH_HAVE_LIBURING
	plain_uring = kernel && o->engine == BENCH_ENGINE_URING && !o->dm.on;
	if (plain_uring && BENCH_UNDER_VALGRIND()) {
		bench_note(c, "under valgrind: plain io_uring variant skipped");
		plain_uring = false;
	}
#endif
	char nul[96];
	snprintf(nul, sizeof(nul), "kernel io_uring (linked fsync)%s",
		 sfx);
	/* Rounds interleave the variants, so that a disk whose speed
	 * drifts (a shared host) drifts under all of them alike, and each
	 * round starts one variant later: a variant runs right after what
	 * another left behind (the kernel's dirty inode, a populate's
	 * reads), and in a fixed order the same one always did. */
	const struct {
		bool on;
		const char *name;
		int tracking;
	} vs[4] = {{do_block, nb, BENCH_TRACK_BLOCK},
		   {do_folio, nf, BENCH_TRACK_FOLIO},
		   {kernel, nk, VARIANT_KERNEL},
		   {plain_uring, nul, VARIANT_URING}};
	unsigned on[4], non = 0;
	for (unsigned i = 0; i < 4; i++)
		if (vs[i].on)
			on[non++] = i;
	struct result rs[MAX_ROUNDS][4] = {{{0}}};
	unsigned nr = (unsigned)rounds;
	for (unsigned r = 0; !err && r < nr; r++) {
		bool last = r + 1 == nr;
		for (unsigned k = 0; !err && k < non; k++) {
			unsigned i = on[(k + r) % non];
			err = run_variant(c, fds, n, file_size, vs[i].name,
					  l->label, vs[i].tracking, last,
					  &rs[r][i]);
		}
	}
	for (unsigned i = 0; i < opened; i++)
		close(fds[i]);
	free(fds);
	if (err)
		return 1;

	struct result rb, rf, rk, ru;
	median_result(rs, nr, 0, &rb);
	median_result(rs, nr, 1, &rf);
	median_result(rs, nr, 2, &rk);
	median_result(rs, nr, 3, &ru);
	const struct result *kcmp = kernel ? &rk : NULL;
	char fig[112];
	snprintf(fig, sizeof(fig), "%s MB/s", nb);
	if (do_block) {
		add_rows(c, nb, &rb, nf, do_folio ? &rf : NULL,
			 median_ratio(rs, nr, 0, 1), true);
		if (kcmp) {
			bench_row(c, &(struct bench_row){
					     .figure = fig, .value = rb.mbs,
					     .unit = "MB/s", .cmp = nk,
					     .ratio = median_ratio(rs, nr, 0, 2),
					     .flags = BENCH_ROW_HEADLINE});
		}
		if (plain_uring)
			bench_row(c, &(struct bench_row){
					     .figure = fig, .value = rb.mbs,
					     .unit = "MB/s", .cmp = nu,
					     .ratio = median_ratio(rs, nr, 0, 3),
					     .flags = BENCH_ROW_HEADLINE});
	}
	if (do_folio)
		add_rows(c, nf, &rf, nk, kcmp, median_ratio(rs, nr, 1, 2),
			 true);
	if (kcmp)
		add_rows(c, nk, &rk, NULL, NULL, 0, false);
	if (plain_uring)
		add_rows(c, nu, &ru, nk, kcmp, median_ratio(rs, nr, 3, 2),
			 false);
	return 0;
}

static bool xopt_given(const void *var)
{
	for (const struct bench_xopt *x = xopts; x->name; x++)
		if (x->var == var)
			return x->given;
	return false;
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	bool kernel = !no_kernel;
	if (o->engine == BENCH_ENGINE_MEM) {
		/* pwrite + fdatasync does real I/O; the mem engine none. */
		if (kernel)
			bench_note(c, "mem engine: kernel page cache variant "
				      "skipped (it would do real I/O)");
		if (!o->dm.on)
			bench_note(c, "mem engine: the sync does no device "
				      "I/O");
		kernel = false;
	}
	bool remote = bench_engine_remote(o->engine);
	if (remote) {
		if (kernel)
			bench_note(c, "%s engine: a remote store, no file to "
				      "pwrite: kernel page cache variant "
				      "skipped",
				   bench_engine_name(o->engine));
		if (direct)
			bench_note(c, "%s engine: --direct has no file to "
				      "apply to",
				   bench_engine_name(o->engine));
		kernel = false;
	}
	if (!rounds || rounds > MAX_ROUNDS) {
		fprintf(stderr, "folio-bench randwrite-sync: --rounds: 1 to "
				"%d\n", MAX_ROUNDS);
		return 2;
	}
	bench_param_num(c, "rounds", (double)rounds);
	bool files_given = xopt_given(&nfiles);
	bool layout_given = xopt_given(&layout);
	if (files_given && layout_given) {
		fprintf(stderr, "folio-bench randwrite-sync: --files and "
				"--layout say the same thing: give one\n");
		return 2;
	}
	/* --layout, or the default: own files alone, both layouts in the
	 * default run. One modelled device means one file. */
	bool want_shared = true, want_own = true;
	if (layout_given) {
		want_shared = strcmp(layout, "own") != 0;
		want_own = strcmp(layout, "shared") != 0;
	} else if (!c->quick) {
		want_shared = false;
	}
	if (o->dm.on && !files_given && want_own) {
		if (layout_given && !want_shared) {
			fprintf(stderr, "folio-bench randwrite-sync: "
					"--device-model models one device: "
					"--layout shared only\n");
			return 2;
		}
		if (o->jobs > 1 && want_shared)
			bench_note(c, "device model: the shared layout only "
				      "(one modelled device)");
		want_own = false;
		want_shared = true;
	}
	/* One export is one store: every job on it is the shared layout. */
	if (o->engine == BENCH_ENGINE_NBD && want_own) {
		if ((layout_given && !want_shared) ||
		    (files_given && nfiles != 1)) {
			fprintf(stderr, "folio-bench randwrite-sync: --engine "
					"nbd serves one export: --layout "
					"shared only\n");
			return 2;
		}
		if (o->jobs > 1 && !files_given)
			bench_note(c, "nbd engine: one export, so the shared "
				      "layout only");
		want_own = false;
		want_shared = true;
	}
	struct layout lays[2];
	unsigned nlay = 0;
	if (files_given) {
		unsigned n = (unsigned)nfiles;
		if (!n || n > o->jobs || (o->dm.on && n != 1)) {
			fprintf(stderr, "folio-bench randwrite-sync: --files "
					"must be 1..--jobs, and 1 with "
					"--device-model (one modelled "
					"device)\n");
			return 2;
		}
		layout_set(&lays[nlay++], n, o->jobs);
	} else {
		if (want_shared)
			layout_set(&lays[nlay++], 1, o->jobs);
		/* With one job, "own" is the shared layout again. */
		if (want_own && (o->jobs > 1 || !want_shared))
			layout_set(&lays[nlay++], o->jobs, o->jobs);
	}
	for (unsigned i = 0; i < nlay; i++) {
		if (!(o->size / lays[i].n / o->bs)) {
			fprintf(stderr, "folio-bench randwrite-sync: --bs "
					"exceeds --size / files\n");
			return 2;
		}
		lays[i].labelled = nlay > 1;
	}
	char s1[32], s2[32], s3[32], s4[32], on[128];
	size_t at = 0;
	for (unsigned i = 0; i < nlay; i++)
		at += (size_t)snprintf(
			on + at, sizeof(on) - at, "%s%u %s%s of %s", i ? " / " : "",
			lays[i].n, lays[i].n == 1 && o->jobs > 1 ? "shared " : "",
			lays[i].n == 1 ? "mapping" : "mappings",
			bench_fmt_size(s2, sizeof(s2),
				       o->size / lays[i].n / o->bs * o->bs));
	bench_title(c, "%s random overwrites + sync, %u jobs on %s, "
		       "%s folios, %s blocks, %s engine%s",
		    bench_fmt_size(s1, sizeof(s1), o->bs), o->jobs, on,
		    bench_fmt_size(s3, sizeof(s3), o->folio_size),
		    bench_fmt_size(s4, sizeof(s4), o->block_size),
		    bench_engine_name(o->engine),
		    direct && o->engine != BENCH_ENGINE_MEM && !remote
			    ? " (O_DIRECT)"
			    : "");
	bench_param_num(c, "kernel", kernel);
	bench_param_num(c, "direct",
			direct && o->engine != BENCH_ENGINE_MEM && !remote);
	if (nlay == 1) {
		bench_param_num(c, "files", lays[0].n);
		bench_param_str(c, "layout", lays[0].label);
	} else {
		bench_param_str(c, "layout", "shared,own");
	}
	for (unsigned i = 0; i < nlay; i++)
		if (run_layout(c, &lays[i], kernel))
			return 1;
	return 0;
}

static struct bench_cmd cmd = {
	.name = "randwrite-sync",
	.summary = "random small overwrites, each followed by a sync: "
		   "per-block vs whole-folio dirty tracking vs the kernel",
	.exec = run,
	.in_default = true,
	.order = 10,
	.help =
	"Preallocates a file (written and fdatasync'd), caches all of it, then\n"
	"--jobs threads write --bs bytes at random --bs-aligned offsets, each\n"
	"write followed by folio_mapping_sync() (writeback + wait + engine\n"
	"flush, i.e. fdatasync for posix/uring). --layout own (the default:\n"
	"one file per job as fio does) or shared (one file, one mapping for\n"
	"all jobs, as a database's threads share a file: one thread's sync\n"
	"may carry another's dirty blocks); both runs the two one after the\n"
	"other, as the default run does, with the layout in each variant's\n"
	"name. --files N is the general form: --size split over N files, each\n"
	"its own mapping and engine, job j on file j % N. Variants, same files,\n"
	"threads and offsets: per-block tracking, whole-folio tracking\n"
	"(FOLIO_MAPPING_FOLIO_DIRTY: a write dirties and writes back its whole\n"
	"folio), and the kernel page cache (pwrite + fdatasync on the same\n"
	"files). Each variant starts with the files out of the kernel page\n"
	"cache (fsync + FADV_DONTNEED). --tracking runs only that library\n"
	"variant. Reports MB/s, IOPS,\n"
	"p50/p99 latency of write+sync, and write amplification = bytes the\n"
	"mapping submitted to the engine / bytes written (1.00 for per-block,\n"
	"folio/block for whole-folio tracking). With --device-model the kernel\n"
	"variant is charged one --bs request and one flush per write+fdatasync.\n"
	"With --engine mem the kernel variant is skipped (no real I/O to compare).\n"
	"With --engine nbd --uri URI (one export: the shared layout) or --engine\n"
	"rados (an object per file) the library writes to that remote store\n"
	"and the kernel variant is skipped: there is no file to pwrite.\n"
	"With --engine uring (and no --device-model) a plain io_uring loop runs\n"
	"too: one ring per thread, each write with a linked fdatasync in one\n"
	"submit-and-wait, what an io_uring program does without a cache.",
	.defaults = {.size = 256 * MIB, .bs = 4 * KIB, .jobs = 8,
		     .runtime = 5, .folio_size = 64 * KIB,
		     .block_size = 4 * KIB, .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_JOBS | BOPT_RUNTIME |
		BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE | BOPT_ENGINE |
		BOPT_TRACKING | BOPT_DIR | BOPT_DEVMODEL | BOPT_URI,
	.xopts = xopts,
	.quick_size = 64 * MIB,
	.quick_runtime = 3,
};
BENCH_REGISTER(cmd)
