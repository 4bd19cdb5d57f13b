/* SPDX-License-Identifier: MIT */
/*
 * randwrite-sync: small random overwrites of a cached file, each followed
 * by a sync, the case where per-block dirty state matters most: with
 * whole-folio tracking every 4 KiB write sends its whole 64 KiB folio to
 * the device.
 *
 * All threads share ONE mapping, as the threads of a database share one
 * file's cache. A sync writes back every dirty block of the mapping, so a
 * thread's sync may also carry another thread's write; the write
 * amplification figure (bytes submitted to the engine per byte written)
 * stays exact because both counters are the mapping's own.
 *
 * Three variants run over the same file, with the same threads and the
 * same offsets (thread i draws from the same seed in every variant):
 * per-block tracking, whole-folio tracking (FOLIO_MAPPING_FOLIO_DIRTY),
 * and the kernel page cache (pwrite + fdatasync on the file itself).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "bench.h"

static bool no_kernel;
static bool direct;

static struct bench_xopt xopts[] = {
	{.name = "no-kernel", .type = BENCH_X_FLAG, .var = &no_kernel,
	 .help = "skip the kernel page cache variant"},
	{.name = "direct", .type = BENCH_X_FLAG, .var = &direct,
	 .help = "the library's engine writes with O_DIRECT (posix, uring):\n"
		 "  how a database would embed it, with no second copy in\n"
		 "  the kernel page cache"},
	{0},
};

struct worker {
	struct bench_ctx *c;
	struct folio_mapping *m; /* NULL: the kernel variant */
	int fd;
	struct devmodel *dm; /* charges the kernel variant's writes */
	unsigned index;
	atomic_bool *stop;
	uint64_t ops;
	int error;
	struct bench_lat lat;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct bench_opts *o = &w->c->o;
	uint64_t seed = 0x5eed0000u + w->index * 7919u + 1;
	uint64_t slots = o->size / o->bs;
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
	free(buf);
	return NULL;
}

struct result {
	double mbs, iops, p50_us, p99_us, wa;
};

/* Fill the cache with the whole file in max-size folios, clean. */
static int populate(struct folio_mapping *m, uint64_t size, size_t folio)
{
	size_t chunk = folio > MIB ? folio : MIB;
	unsigned char *buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	int err = 0;
	for (uint64_t at = 0; at < size && !err; at += chunk) {
		size_t n = (size_t)(size - at < chunk ? size - at : chunk);
		ssize_t r = folio_mapping_read(m, buf, n, at);
		if (r != (ssize_t)n)
			err = r < 0 ? (int)r : -EIO;
	}
	free(buf);
	return err;
}

static int run_variant(struct bench_ctx *c, int fd, const char *name,
		       int tracking, struct result *res)
{
	const struct bench_opts *o = &c->o;
	struct bench_engine be = {0};
	struct folio_mapping *m = NULL;
	struct devmodel *kdm = NULL;
	struct worker *w = calloc(o->jobs, sizeof(*w));
	int err = w ? 0 : -ENOMEM;
	struct folio_mapping_stats before = {.sz = sizeof(before)};
	struct folio_mapping_stats after = {.sz = sizeof(after)};

	/* A second open file description of the same file, so O_DIRECT
	 * applies to the library's engine only. */
	int dfd = -1;
	if (!err && tracking >= 0 && direct && o->engine != BENCH_ENGINE_MEM) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (dfd < 0)
			err = -errno;
	}
	if (!err && tracking >= 0) {
		err = bench_engine_open(c, &be, o->engine, dfd >= 0 ? dfd : fd,
					o->size);
		if (err)
			goto out;
		struct folio_mapping_opts mo = {
			.sz = sizeof(mo),
			.block_size = o->block_size,
			.max_folio_size = o->folio_size,
			.size = o->size,
			.flags = tracking == BENCH_TRACK_FOLIO
					 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
			.engine = be.engine,
		};
		err = folio_mapping_new(&m, &mo);
		if (!err)
			err = populate(m, o->size, o->folio_size);
		if (!err)
			err = folio_mapping_stats(m, &before);
	} else if (!err && o->dm.on) {
		err = devmodel_new(&kdm, &o->dm);
		c->modelled = true;
	}
	if (err)
		goto out;

	atomic_bool stop;
	for (unsigned i = 0; i < o->jobs; i++)
		w[i] = (struct worker){.c = c, .m = m, .fd = fd, .dm = kdm,
				       .index = i, .stop = &stop};
	char what[96];
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
	struct bench_variant *v = bench_variant(c, name);
	res->iops = (double)ops / secs;
	res->mbs = res->iops * (double)o->bs / 1e6;
	res->p50_us = bench_lat_pct(&all, 50) / 1e3;
	res->p99_us = bench_lat_pct(&all, 99) / 1e3;
	res->wa = 1; /* the kernel writes what it was given (per page) */
	bench_num(v, "seconds", secs);
	bench_num(v, "ops", (double)ops);
	bench_num(v, "mb_per_s", res->mbs);
	bench_num(v, "iops", res->iops);
	bench_num(v, "p50_us", res->p50_us);
	bench_num(v, "p99_us", res->p99_us);
	bench_lat_free(&all);
	if (m) {
		folio_mapping_stats(m, &after);
		res->wa = bench_mapping_stats(v, &before, &after);
		bench_num(v, "folios", (double)after.folios);
	} else {
		bench_num(v, "write_amplification", res->wa);
	}
	bench_devmodel_stats(v, be.dm ? be.dm : kdm);

out:
	if (m) {
		int s = folio_mapping_sync(m, NULL);
		int f = folio_mapping_free(m);
		if (!err && (s || f))
			err = s ? s : f;
	}
	bench_engine_close(&be);
	if (dfd >= 0)
		close(dfd);
	devmodel_free(kdm);
	for (unsigned i = 0; w && i < o->jobs; i++)
		bench_lat_free(&w[i].lat);
	free(w);
	if (err)
		fprintf(stderr, "folio-bench randwrite-sync: %s: %s\n", name,
			strerror(-err));
	return err;
}

static void add_rows(struct bench_ctx *c, const char *name,
		     const struct result *r, const char *cmp_name,
		     const struct result *cmp, bool headline)
{
	char fig[80];
	snprintf(fig, sizeof(fig), "%s MB/s", name);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = r->mbs, .unit = "MB/s",
			     .cmp = cmp ? cmp_name : NULL,
			     .ratio = cmp ? r->mbs / cmp->mbs : 0,
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
	if (o->bs > o->size) {
		fprintf(stderr, "folio-bench randwrite-sync: --bs exceeds "
				"--size\n");
		return 2;
	}
	char s1[32], s2[32], s3[32], s4[32];
	bench_title(c, "%s random overwrites + sync, %u jobs on one mapping, "
		       "%s file, %s folios, %s blocks, %s engine%s",
		    bench_fmt_size(s1, sizeof(s1), o->bs), o->jobs,
		    bench_fmt_size(s2, sizeof(s2), o->size),
		    bench_fmt_size(s3, sizeof(s3), o->folio_size),
		    bench_fmt_size(s4, sizeof(s4), o->block_size),
		    bench_engine_name(o->engine),
		    direct && o->engine != BENCH_ENGINE_MEM ? " (O_DIRECT)"
							    : "");
	bench_param_num(c, "kernel", kernel);
	bench_param_num(c, "direct", direct && o->engine != BENCH_ENGINE_MEM);

	int fd = bench_tmpfile(o->dir);
	if (fd < 0)
		return 1;
	int err = bench_prefill(fd, o->size);
	if (err) {
		fprintf(stderr, "folio-bench randwrite-sync: preparing the "
				"file: %s\n",
			strerror(-err));
		close(fd);
		return 1;
	}
	bool only = o->given & BOPT_TRACKING;
	bool do_block = !only || o->tracking == BENCH_TRACK_BLOCK;
	bool do_folio = !only || o->tracking == BENCH_TRACK_FOLIO;
	struct result rb = {0}, rf = {0}, rk = {0};
	if (do_block)
		err = run_variant(c, fd, "block tracking", BENCH_TRACK_BLOCK,
				  &rb);
	if (!err && do_folio)
		err = run_variant(c, fd, "whole-folio", BENCH_TRACK_FOLIO,
				  &rf);
	if (!err && kernel)
		err = run_variant(c, fd, "kernel page cache", -1, &rk);
	close(fd);
	if (err)
		return 1;

	const struct result *kcmp = kernel ? &rk : NULL;
	if (do_block) {
		add_rows(c, "block tracking", &rb, "whole-folio",
			 do_folio ? &rf : NULL, true);
		if (kcmp) {
			bench_row(c, &(struct bench_row){
					     .figure = "block tracking MB/s",
					     .value = rb.mbs, .unit = "MB/s",
					     .cmp = "kernel page cache",
					     .ratio = rb.mbs / rk.mbs,
					     .flags = BENCH_ROW_HEADLINE});
		}
	}
	if (do_folio)
		add_rows(c, "whole-folio", &rf, "kernel page cache", kcmp,
			 true);
	if (kcmp)
		add_rows(c, "kernel page cache", &rk, NULL, NULL, false);
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
	"flush, i.e. fdatasync for posix/uring). All threads share one mapping,\n"
	"so one thread's sync may carry another's dirty blocks. Variants, same\n"
	"threads and offsets: per-block tracking, whole-folio tracking\n"
	"(FOLIO_MAPPING_FOLIO_DIRTY: a write dirties and writes back its whole\n"
	"folio), and the kernel page cache (pwrite + fdatasync on the same\n"
	"file). --tracking runs only that library variant. Reports MB/s, IOPS,\n"
	"p50/p99 latency of write+sync, and write amplification = bytes the\n"
	"mapping submitted to the engine / bytes written (1.00 for per-block,\n"
	"folio/block for whole-folio tracking). With --device-model the kernel\n"
	"variant is charged one --bs request and one flush per write+fdatasync.\n"
	"With --engine mem the kernel variant is skipped (no real I/O to compare).",
	.defaults = {.size = 256 * MIB, .bs = 4 * KIB, .jobs = 8,
		     .runtime = 5, .folio_size = 64 * KIB,
		     .block_size = 4 * KIB, .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_JOBS | BOPT_RUNTIME |
		BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE | BOPT_ENGINE |
		BOPT_TRACKING | BOPT_DIR | BOPT_DEVMODEL,
	.xopts = xopts,
	.quick_size = 64 * MIB,
	.quick_runtime = 3,
};
BENCH_REGISTER(cmd)
