/* SPDX-License-Identifier: MIT */
/*
 * fstime: the UnixBench "file write" loop (1 KiB writes sequentially over
 * a 2000 KiB file, wrapping around) against three sinks: a mapping on the
 * mem engine (no I/O: nothing is synced in the loop), pwrite() to a file
 * on tmpfs (the kernel page cache), and memcpy() into a flat buffer (the
 * limit). It measures the cost of the library's buffered-write fast path:
 * folio lookup, lock, copy, the one-lock dirty update.
 *
 * The timed loops live in separate non-inlined functions so that
 * `valgrind --tool=callgrind --toggle-collect=fstime_loop_lib` counts the
 * instructions of exactly the loop (see folio-bench callgrind fstime).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static const char *only;
static uint64_t iters;

static const char *const only_choices[] = {"lib", "pwrite", "memcpy", NULL};

static struct bench_xopt xopts[] = {
	{.name = "only", .type = BENCH_X_STR, .var = &only,
	 .metavar = "WHICH", .choices = only_choices,
	 .help = "run one variant: lib, pwrite or memcpy"},
	{.name = "iters", .type = BENCH_X_UINT, .var = &iters, .metavar = "N",
	 .help = "exactly N timed writes per variant instead of --runtime "
		 "(for callgrind)"},
	{0},
};

/* Where each loop continues from, so repeated calls sweep the region. */
struct cursor {
	uint64_t pos, bs, region;
};

static inline void advance(struct cursor *c)
{
	c->pos += c->bs;
	if (c->pos + c->bs > c->region)
		c->pos = 0;
}

BENCH_NOINLINE static int fstime_loop_lib(struct folio_mapping *m,
					  const char *buf, struct cursor *c,
					  uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		if (folio_mapping_write(m, buf, c->bs, c->pos) !=
		    (ssize_t)c->bs)
			return -EIO;
		advance(c);
	}
	return 0;
}

BENCH_NOINLINE static int fstime_loop_pwrite(int fd, const char *buf,
					     struct cursor *c, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		if (pwrite(fd, buf, c->bs, (off_t)c->pos) != (ssize_t)c->bs)
			return -errno;
		advance(c);
	}
	return 0;
}

BENCH_NOINLINE static int fstime_loop_memcpy(char *flat, const char *buf,
					     struct cursor *c, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		memcpy(flat + c->pos, buf, c->bs);
		/* Keep the compiler from merging or dropping the copies. */
		__asm__ __volatile__("" : : "r"(flat) : "memory");
		advance(c);
	}
	return 0;
}

enum sink { SINK_LIB, SINK_PWRITE, SINK_MEMCPY };

struct target {
	enum sink sink;
	struct folio_mapping *m;
	int fd;
	char *flat;
};

/* What one batch of the timed loop needs (bench_timed_batches). */
struct run_state {
	struct target *t;
	const char *buf;
	struct cursor cur;
};

static int loop(void *arg, uint64_t n)
{
	struct run_state *r = arg;
	switch (r->t->sink) {
	case SINK_LIB: return fstime_loop_lib(r->t->m, r->buf, &r->cur, n);
	case SINK_PWRITE:
		return fstime_loop_pwrite(r->t->fd, r->buf, &r->cur, n);
	default: return fstime_loop_memcpy(r->t->flat, r->buf, &r->cur, n);
	}
}

/* The untimed first pass, outside the loop functions so callgrind's
 * --toggle-collect counts only timed writes. */
static int warm_pass(struct target *t, const char *buf, uint64_t bs,
		     uint64_t region)
{
	for (uint64_t pos = 0; pos + bs <= region; pos += bs) {
		ssize_t r = (ssize_t)bs;
		if (t->sink == SINK_LIB) {
			r = folio_mapping_write(t->m, buf, bs, pos);
			if (r < 0)
				return (int)r;
		} else if (t->sink == SINK_PWRITE) {
			r = pwrite(t->fd, buf, bs, (off_t)pos);
			if (r < 0)
				return -errno;
		} else {
			memcpy(t->flat + pos, buf, bs);
		}
		if (r != (ssize_t)bs)
			return -EIO;
	}
	return 0;
}

struct result {
	double wps, mbs, ns;
	uint64_t writes;
};

/* One untimed pass makes the region cache hot, then the timed loop runs
 * in batches between clock reads, for --runtime or exactly --iters. */
static int measure(struct bench_ctx *c, struct target *t, const char *name,
		   struct result *res)
{
	const struct bench_opts *o = &c->o;
	char *buf = malloc(o->bs);
	if (!buf)
		return -ENOMEM;
	memset(buf, 'f', o->bs);
	struct run_state rs = {t, buf, {0, o->bs, o->size}};
	int err = warm_pass(t, buf, o->bs, o->size);
	uint64_t done = 0;
	double secs = 0;
	char what[64];
	snprintf(what, sizeof(what), "fstime [%s]", name);
	if (!err)
		err = bench_timed_batches(what, iters ? 0 : o->runtime, iters,
					  4096, loop,
					  &rs, &done, &secs);
	free(buf);
	if (err)
		return err;
	res->writes = done;
	res->wps = secs > 0 ? (double)done / secs : 0;
	res->mbs = res->wps * (double)o->bs / 1e6;
	res->ns = done ? secs * 1e9 / (double)done : 0;
	struct bench_variant *v = bench_variant(c, name);
	bench_num(v, "writes", (double)done);
	bench_num(v, "seconds", secs);
	bench_num(v, "writes_per_s", res->wps);
	bench_num(v, "mb_per_s", res->mbs);
	bench_num(v, "ns_per_write", res->ns);
	return 0;
}

static int run_lib(struct bench_ctx *c, struct result *res)
{
	const struct bench_opts *o = &c->o;
	struct bench_engine be;
	int fd = -1;
	if (o->engine != BENCH_ENGINE_MEM) {
		fd = bench_tmpfile(o->dir);
		if (fd < 0)
			return -EIO;
	}
	int err = bench_engine_open(c, &be, o->engine, fd, o->size);
	if (err) {
		if (fd >= 0)
			close(fd);
		return err;
	}
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = o->block_size,
		.max_folio_size = o->folio_size,
		.flags = o->tracking == BENCH_TRACK_FOLIO
				 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
		.engine = be.engine,
	};
	struct folio_mapping *m;
	err = folio_mapping_new(&m, &mo);
	if (!err) {
		struct target t = {.sink = SINK_LIB, .m = m};
		err = measure(c, &t, "lib", res);
		struct folio_mapping_stats st = {.sz = sizeof(st)};
		folio_mapping_stats(m, &st);
		if (!err) {
			struct bench_variant *v = &c->variants[c->nvariants - 1];
			bench_num(v, "folios", (double)st.folios);
			bench_num(v, "dirty_bytes", (double)st.dirty_bytes);
		}
		/* Outside the timed loop: free needs a clean mapping. */
		int s = folio_mapping_sync(m, NULL);
		int f = folio_mapping_free(m);
		if (!err)
			err = s ? s : f;
	}
	bench_engine_close(&be);
	if (fd >= 0)
		close(fd);
	return err;
}

static int run_pwrite(struct bench_ctx *c, const char *dir,
		      struct result *res)
{
	int fd = bench_tmpfile(dir);
	if (fd < 0)
		return -EIO;
	struct target t = {.sink = SINK_PWRITE, .fd = fd};
	int err = measure(c, &t, "kernel page cache", res);
	if (!err)
		bench_str(&c->variants[c->nvariants - 1], "dir", dir);
	close(fd);
	return err;
}

static int run_memcpy(struct bench_ctx *c, struct result *res)
{
	struct target t = {.sink = SINK_MEMCPY, .flat = malloc(c->o.size)};
	if (!t.flat)
		return -ENOMEM;
	int err = measure(c, &t, "memcpy", res);
	free(t.flat);
	return err;
}

static void rows_for(struct bench_ctx *c, const char *name,
		     const struct result *r, const char *cmp_name,
		     const struct result *cmp, unsigned flags)
{
	char fig[80];
	snprintf(fig, sizeof(fig), "%s writes/s", name);
	bench_row(c, &(struct bench_row){.figure = fig, .value = r->wps,
					 .unit = "writes/s",
					 .cmp = cmp ? cmp_name : NULL,
					 .ratio = cmp ? r->wps / cmp->wps : 0,
					 .flags = flags});
}

static void rows_plain(struct bench_ctx *c, const char *name,
		       const struct result *r)
{
	char fig[80];
	snprintf(fig, sizeof(fig), "%s MB/s", name);
	bench_row(c, &(struct bench_row){.figure = fig, .value = r->mbs,
					 .unit = "MB/s"});
	snprintf(fig, sizeof(fig), "%s time per write", name);
	bench_row(c, &(struct bench_row){.figure = fig, .value = r->ns,
					 .unit = "ns"});
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	/* tmpfs is the kernel page cache without a device behind it, which
	 * is what the library's mem-engine mapping is compared with. */
	const char *kdir = (o->given & BOPT_DIR) ? o->dir : "/dev/shm";
	if (o->bs > o->size) {
		fprintf(stderr, "folio-bench fstime: --bs exceeds --size\n");
		return 2;
	}
	char s1[32], s2[32], s3[32];
	bench_title(c, "%s writes sequentially over a %s region, wrapping, "
		       "cache hot; lib = %s engine, max folio %s, no sync in "
		       "the loop; kernel = pwrite on %s",
		    bench_fmt_size(s1, sizeof(s1), o->bs),
		    bench_fmt_size(s2, sizeof(s2), o->size),
		    bench_engine_name(o->engine),
		    bench_fmt_size(s3, sizeof(s3), o->folio_size), kdir);
	bench_param_str(c, "kernel_dir", kdir);
	if (iters)
		bench_param_num(c, "iters", (double)iters);

	bool all = !only;
	struct result rl = {0}, rk = {0}, rm = {0};
	int err = 0;
	if (all || !strcmp(only, "lib"))
		err = run_lib(c, &rl);
	if (!err && (all || !strcmp(only, "pwrite")))
		err = run_pwrite(c, kdir, &rk);
	if (!err && (all || !strcmp(only, "memcpy")))
		err = run_memcpy(c, &rm);
	if (err) {
		fprintf(stderr, "folio-bench fstime: %s\n", strerror(-err));
		return 1;
	}
	if (all) {
		rows_for(c, "lib", &rl, "kernel page cache", &rk,
			 BENCH_ROW_HEADLINE);
		rows_for(c, "lib", &rl, "memcpy", &rm, BENCH_ROW_HEADLINE);
		rows_plain(c, "lib", &rl);
		rows_for(c, "kernel page cache", &rk, NULL, NULL, 0);
		rows_plain(c, "kernel page cache", &rk);
		rows_for(c, "memcpy", &rm, NULL, NULL, 0);
		rows_plain(c, "memcpy", &rm);
		double x = rl.wps / rk.wps;
		bench_note(c, "target lib >= 3x kernel page cache: %.2fx, %s",
			   x, x >= 3 ? "met" : "NOT met");
	} else {
		const struct result *r = !strcmp(only, "lib") ? &rl
					 : !strcmp(only, "pwrite") ? &rk : &rm;
		rows_for(c, only, r, NULL, NULL, BENCH_ROW_HEADLINE);
		rows_plain(c, only, r);
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "fstime",
	.summary = "UnixBench-style 1 KiB file writes: library vs kernel "
		   "page cache vs memcpy",
	.exec = run,
	.in_default = true,
	.order = 20,
	.help =
	"--bs writes sequentially over a --size region, wrapping around, for\n"
	"--runtime seconds per variant, after one untimed pass (cache hot):\n"
	"  lib     folio_mapping_write() on a mapping (mem engine by default;\n"
	"          nothing is synced in the loop, so no I/O happens)\n"
	"  pwrite  pwrite() to a file in /dev/shm (tmpfs: the kernel page\n"
	"          cache; --dir overrides the directory)\n"
	"  memcpy  memcpy() into a flat buffer (the limit)\n"
	"Reports writes/s, MB/s, ns/write and lib/kernel, lib/memcpy ratios.\n"
	"For instruction counts run one variant for a fixed count under\n"
	"callgrind, e.g.\n"
	"  valgrind --tool=callgrind --toggle-collect=fstime_loop_lib \\\n"
	"      folio-bench fstime --only lib --iters 100000\n"
	"and divide Ir by the count (folio-bench callgrind fstime does that for\n"
	"all three; the loops are fstime_loop_lib/_pwrite/_memcpy).",
	.defaults = {.size = 2000 * KIB, .bs = 1 * KIB, .runtime = 2,
		     .folio_size = FOLIO_MAX_SIZE, .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_MEM},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_RUNTIME | BOPT_FOLIO_SIZE |
		BOPT_BLOCK_SIZE | BOPT_ENGINE | BOPT_TRACKING | BOPT_DIR |
		BOPT_DEVMODEL,
	.xopts = xopts,
	.quick_runtime = 1,
};
BENCH_REGISTER(cmd)
