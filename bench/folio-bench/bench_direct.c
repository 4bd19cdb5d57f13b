/* SPDX-License-Identifier: MIT */
/*
 * direct: 4 KiB random O_DIRECT overwrites (and a 50/50 read/write mix)
 * from 1..N threads over many preallocated files, one mapping each: the
 * job shape of ext4's 2019 DIO overwrite change (16 threads, 32 files)
 * scaled to this machine. Variants, in interleaved rounds:
 *
 *   kernel    pwrite()/pread() on the O_DIRECT descriptors
 *   fast      folio_mapping_write_direct()/read_direct(): overwrites of
 *             known extents take io_lock shared, no map()
 *   exclusive the same with FOLIO_MAPPING_DIRECT_EXCLUSIVE: every write
 *             takes io_lock exclusively and calls map()
 *   buffered  folio_mapping_write()/read(), every mapping synced at the
 *             end of the run (inside the timing), for contrast
 *
 * The library variants run over an engine of this file on the same
 * O_DIRECT descriptors: pwritev()/preadv() like the posix engine, plus a
 * map() returning identity extents that first spins for --map-cost-us,
 * what an allocating filesystem pays per mapped write (ext4: an extent
 * tree lookup and a jbd2 journal handle start/stop, a few microseconds).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"

static struct bench_list counts; /* empty: 1, 2, 4, 8 */
static uint64_t rounds = 3;
static uint64_t nfiles = 32;
static uint64_t map_cost_us = 3;
static bool calibrate;

static struct bench_xopt xopts[] = {
	{.name = "threads", .type = BENCH_X_COUNTS, .var = &counts,
	 .metavar = "LIST", .help = "thread counts (default 1,2,4,8)"},
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds, .metavar = "N",
	 .help = "interleaved rounds per thread count (medians)"},
	{.name = "files", .type = BENCH_X_UINT, .var = &nfiles, .metavar = "N",
	 .help = "files, --size bytes each"},
	{.name = "map-cost-us", .type = BENCH_X_UINT, .var = &map_cost_us,
	 .metavar = "US",
	 .help = "CPU time one map() call spins"},
	{.name = "calibrate-map", .type = BENCH_X_FLAG, .var = &calibrate,
	 .help = "measure what a map() that allocates costs the kernel "
		 "(O_DIRECT 4 KiB writes into unwritten extents vs into "
		 "written ones, on --dir's file system) and use it as "
		 "--map-cost-us"},
	{0},
};

/* ---- the engine: posix-like I/O plus a costed map() ------------------ */

struct dio_engine {
	int fd;
	uint64_t size;
};

static void spin_us(uint64_t us)
{
	uint64_t end = bench_now_ns() + us * 1000;
	while (bench_now_ns() < end)
		;
}

static int dio_submit(void *ctx, struct folio_io *io)
{
	struct dio_engine *d = ctx;
	uint64_t done = 0;
	/* Writeback merges up to 256 segments; preadv/pwritev advance a
	 * copy of them on short transfers. */
	struct iovec small[8];
	struct iovec *iov = io->iovcnt <= 8
				    ? small
				    : malloc((size_t)io->iovcnt * sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	memcpy(iov, io->iov, (size_t)io->iovcnt * sizeof(*iov));
	int cnt = io->iovcnt;
	struct iovec *v = iov;
	while (done < io->len) {
		ssize_t r = io->op == FOLIO_IO_WRITE
				    ? pwritev(d->fd, v, cnt,
					      (off_t)(io->dev_pos + done))
				    : preadv(d->fd, v, cnt,
					     (off_t)(io->dev_pos + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ssize_t res = done ? (ssize_t)done
					   : (r < 0 ? -errno : -EIO);
			if (iov != small)
				free(iov);
			folio_io_complete(io, res);
			return 0;
		}
		done += (uint64_t)r;
		while (cnt && (size_t)r >= v->iov_len) {
			r -= (ssize_t)v->iov_len;
			v++;
			cnt--;
		}
		if (cnt) {
			v->iov_base = (char *)v->iov_base + r;
			v->iov_len -= (size_t)r;
		}
	}
	if (iov != small)
		free(iov);
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int dio_flush(void *ctx)
{
	struct dio_engine *d = ctx;
	return fdatasync(d->fd) ? -errno : 0;
}

static int dio_truncate(void *ctx, uint64_t size)
{
	struct dio_engine *d = ctx;
	return ftruncate(d->fd, (off_t)size) ? -errno : 0;
}

static int dio_map(void *ctx, uint64_t pos, uint64_t len,
		   struct folio_extent *ext)
{
	struct dio_engine *d = ctx;
	(void)len;
	spin_us(map_cost_us);
	/* The preallocated file is one written extent; past it, a hole. */
	if (pos < d->size)
		*ext = (struct folio_extent){0, d->size, 0, 0};
	else
		*ext = (struct folio_extent){d->size, FOLIO_MAX_POS - d->size,
					     d->size, FOLIO_EXTENT_HOLE};
	return 0;
}

/* ---- the files and workers -------------------------------------------- */

enum variant { V_KERNEL, V_FAST, V_EXCL, V_BUFFERED, V_N };
static const char *const vname[V_N] = {"kernel", "fast", "exclusive",
				       "buffered"};

struct file {
	int fd, dfd;
	struct dio_engine de;
	struct folio_engine *e;
	struct folio_mapping *m[V_N]; /* NULL for the kernel */
};

struct worker {
	struct file *files;
	unsigned nfiles;
	enum variant v;
	bool mixed;
	uint64_t size, seed;
	atomic_bool *stop;
	uint64_t ops;
	int error;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned char *buf = aligned_alloc(4096, 4096);
	if (!buf) {
		w->error = -ENOMEM;
		return NULL;
	}
	memset(buf, (int)(w->seed & 0xff), 4096);
	uint64_t blocks = w->size / 4096;
	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		uint64_t r = bench_rand(&w->seed);
		struct file *f = &w->files[r % w->nfiles];
		uint64_t pos = (r >> 8) % blocks * 4096;
		bool rd = w->mixed && (r >> 62) & 1;
		ssize_t n;
		struct folio_mapping *m = f->m[w->v];
		switch (w->v) {
		case V_KERNEL:
			n = rd ? pread(f->dfd, buf, 4096, (off_t)pos)
			       : pwrite(f->dfd, buf, 4096, (off_t)pos);
			if (n < 0)
				n = -errno;
			break;
		case V_BUFFERED:
			n = rd ? folio_mapping_read(m, buf, 4096, pos)
			       : folio_mapping_write(m, buf, 4096, pos);
			break;
		default:
			n = rd ? folio_mapping_read_direct(m, buf, 4096, pos)
			       : folio_mapping_write_direct(m, buf, 4096, pos,
							    0);
			break;
		}
		if (n != 4096) {
			w->error = n < 0 ? (int)n : -EIO;
			break;
		}
		w->ops++;
	}
	free(buf);
	return NULL;
}

static void stats_sum(struct file *files, unsigned n, enum variant v,
		      struct folio_mapping_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < n; i++) {
		struct folio_mapping_stats s = {.sz = sizeof(s)};
		if (folio_mapping_stats(files[i].m[v], &s))
			continue;
		out->direct_writes += s.direct_writes;
		out->direct_fast_writes += s.direct_fast_writes;
		out->direct_map_calls += s.direct_map_calls;
		out->direct_exclusive += s.direct_exclusive;
		out->direct_reads += s.direct_reads;
	}
}

/* One timed run: ops per second, or < 0 on error. */
static double run_once(struct bench_ctx *c, struct file *files, enum variant v,
		       unsigned nthreads, bool mixed, uint64_t seed)
{
	atomic_bool stop = false;
	struct worker *w = calloc(nthreads, sizeof(*w));
	if (!w)
		return -ENOMEM;
	for (unsigned i = 0; i < nthreads; i++)
		w[i] = (struct worker){.files = files, .nfiles = (unsigned)nfiles,
				       .v = v, .mixed = mixed,
				       .size = c->o.size,
				       .seed = seed * 7919 + i + 1,
				       .stop = &stop};
	char what[64];
	snprintf(what, sizeof(what), "direct [%s, %u threads%s]", vname[v],
		 nthreads, mixed ? ", mixed" : "");
	uint64_t t0 = bench_now_ns();
	double secs = bench_run_threads(what, nthreads, worker_main, w,
					sizeof(*w), c->o.runtime / rounds,
					&stop);
	int err = secs < 0 ? -EAGAIN : 0;
	if (!err && v == V_BUFFERED) {
		for (unsigned i = 0; i < nfiles && !err; i++)
			err = folio_mapping_sync(files[i].m[v], NULL);
		secs = (double)(bench_now_ns() - t0) / 1e9;
	}
	uint64_t ops = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		ops += w[i].ops;
		if (!err)
			err = w[i].error;
	}
	free(w);
	if (err) {
		fprintf(stderr, "folio-bench direct: %s: %s\n", what,
			strerror(-err));
		return err;
	}
	return (double)ops / secs;
}

static int open_files(struct bench_ctx *c, struct file *files)
{
	for (unsigned i = 0; i < nfiles; i++) {
		struct file *f = &files[i];
		f->fd = bench_tmpfile(c->o.dir);
		if (f->fd < 0)
			return -EIO;
		int err = bench_prefill(f->fd, c->o.size);
		if (err)
			return err;
		f->dfd = bench_reopen(f->fd, O_RDWR | O_DIRECT);
		if (f->dfd < 0) {
			fprintf(stderr, "folio-bench direct: O_DIRECT refused "
					"in %s: %s\n",
				c->o.dir, strerror(-f->dfd));
			return f->dfd;
		}
		f->de = (struct dio_engine){.fd = f->dfd, .size = c->o.size};
		struct folio_engine_ops ops = {.sz = sizeof(ops),
					       .submit = dio_submit,
					       .flush = dio_flush,
					       .truncate = dio_truncate,
					       .map = dio_map};
		err = folio_engine_new(&f->e, &ops, &f->de);
		if (err)
			return err;
		for (int v = V_FAST; v < V_N; v++) {
			struct folio_mapping_opts mo = {
				.sz = sizeof(mo),
				.block_size = 4096,
				.max_folio_size = c->o.folio_size,
				.size = c->o.size,
				.flags = v == V_EXCL
						 ? FOLIO_MAPPING_DIRECT_EXCLUSIVE
						 : 0,
				.engine = f->e,
			};
			err = folio_mapping_new(&f->m[v], &mo);
			if (err)
				return err;
		}
		/* Warm the fast variant's extent cache: its one map(). */
		unsigned char *b = aligned_alloc(4096, 4096);
		if (!b)
			return -ENOMEM;
		memset(b, 1, 4096);
		ssize_t n = folio_mapping_write_direct(f->m[V_FAST], b, 4096, 0,
						       0);
		free(b);
		if (n != 4096)
			return n < 0 ? (int)n : -EIO;
	}
	return 0;
}

static void close_files(struct file *files)
{
	for (unsigned i = 0; i < nfiles; i++) {
		struct file *f = &files[i];
		for (int v = V_FAST; v < V_N; v++) {
			if (f->m[v]) {
				(void)folio_mapping_sync(f->m[v], NULL);
				(void)folio_mapping_free(f->m[v]);
			}
		}
		if (f->e)
			(void)folio_engine_free(f->e);
		if (f->dfd >= 0)
			close(f->dfd);
		if (f->fd >= 0)
			close(f->fd);
	}
}

/*
 * What a map() that allocates costs the kernel: 4 KiB O_DIRECT writes,
 * one thread, into a fallocate()d file (unwritten extents: each write
 * looks up its extent, starts a journal handle and converts the block)
 * against the same writes into a written file (an overwrite: none of
 * that), interleaved over `rounds`, each block of the unwritten file
 * written once. Microseconds per write, medians; the difference is the
 * allocation path --map-cost-us stands for.
 */
#define CAL_BLOCKS 4096u /* 16 MiB per file */

static double cal_pass(int fd, uint64_t seed, unsigned char *buf)
{
	uint64_t t0 = bench_now_ns();
	/* A stride coprime to CAL_BLOCKS visits every block once. */
	uint64_t at = seed % CAL_BLOCKS, stride = 2 * (seed % 977) + 1;
	for (unsigned i = 0; i < CAL_BLOCKS; i++) {
		at = (at + stride) % CAL_BLOCKS;
		if (pwrite(fd, buf, 4096, (off_t)(at * 4096)) != 4096)
			return -1;
	}
	return (double)(bench_now_ns() - t0) / 1e3 / CAL_BLOCKS;
}

static int calibrate_map(struct bench_ctx *c, double *unwritten,
			 double *written)
{
	double u[100], w[100];
	unsigned char *buf = aligned_alloc(4096, 4096);
	if (!buf)
		return -ENOMEM;
	memset(buf, 0x5c, 4096);
	int err = 0;
	for (unsigned r = 0; r < rounds && !err; r++) {
		for (int k = 0; k < 2 && !err; k++) {
			bool alloc = (k + (int)r) % 2 == 0;
			int fd = bench_tmpfile(c->o.dir);
			if (fd < 0)
				err = -EIO;
			int dfd = -1;
			if (!err)
				err = alloc ? (fallocate(fd, 0, 0, CAL_BLOCKS *
								  4096ull)
						       ? -errno : 0)
					    : bench_prefill(fd, CAL_BLOCKS *
								    4096ull);
			if (!err && alloc)
				err = fsync(fd) ? -errno : 0;
			if (!err) {
				dfd = bench_reopen(fd, O_RDWR | O_DIRECT);
				err = dfd < 0 ? dfd : 0;
			}
			double us = err ? -1 : cal_pass(dfd, r + 1, buf);
			if (!err && us < 0)
				err = -EIO;
			(alloc ? u : w)[r] = us;
			if (dfd >= 0)
				close(dfd);
			if (fd >= 0)
				close(fd);
		}
	}
	free(buf);
	if (err) {
		fprintf(stderr, "folio-bench direct: --calibrate-map in %s: "
				"%s\n", c->o.dir, strerror(-err));
		return err;
	}
	*unwritten = bench_median(u, rounds);
	*written = bench_median(w, rounds);
	return 0;
}

static int run(struct bench_ctx *c)
{
	struct bench_list list = counts;
	if (!list.n) {
		static const unsigned def[] = {1, 2, 4, 8};
		for (unsigned i = 0; i < 4; i++)
			list.v[list.n++] = def[i];
	}
	if (!rounds || rounds > 100 || !nfiles || nfiles > 1024 ||
	    map_cost_us > 100000 || c->o.size < 64 * KIB ||
	    c->o.size % 4096) {
		fprintf(stderr, "folio-bench direct: --rounds 1..100, --files "
				"1..1024, --map-cost-us up to 100000, --size "
				"a multiple of 4K of at least 64K\n");
		return 2;
	}
	for (unsigned i = 0; i < list.n; i++)
		if (!list.v[i] || list.v[i] > 256) {
			fprintf(stderr, "folio-bench direct: 1..256 threads\n");
			return 2;
		}
	double cal_u = 0, cal_w = 0;
	if (calibrate && calibrate_map(c, &cal_u, &cal_w))
		return 1;
	if (calibrate)
		map_cost_us = cal_u > cal_w ? (uint64_t)(cal_u - cal_w + 0.5)
					    : 0;
	char s1[32];
	bench_title(c, "4 KiB random O_DIRECT overwrites, %llu files of %s, "
		       "a mapping each; map() costs %llu us",
		    (unsigned long long)nfiles,
		    bench_fmt_size(s1, sizeof(s1), c->o.size),
		    (unsigned long long)map_cost_us);
	struct file *files = calloc(nfiles, sizeof(*files));
	if (!files)
		return 1;
	for (unsigned i = 0; i < nfiles; i++)
		files[i].fd = files[i].dfd = -1;
	int err = open_files(c, files);
	/* [mix][threads][variant][round] */
	static double ops[2][BENCH_LIST_MAX][V_N][100];
	struct folio_mapping_stats before, after;
	if (!err)
		stats_sum(files, (unsigned)nfiles, V_FAST, &before);
	for (int mix = 0; mix < 2 && !err; mix++)
		for (unsigned t = 0; t < list.n && !err; t++)
			for (unsigned r = 0; r < rounds && !err; r++)
				for (int v = 0; v < V_N && !err; v++) {
					/* Rotate the order every round. */
					int vv = (v + (int)r) % V_N;
					double x = run_once(
						c, files, (enum variant)vv,
						(unsigned)list.v[t], mix, r + 1);
					if (x < 0)
						err = (int)x;
					ops[mix][t][vv][r] = x;
				}
	if (!err)
		stats_sum(files, (unsigned)nfiles, V_FAST, &after);
	close_files(files);
	free(files);
	if (err)
		return 1;

	bench_param_num(c, "rounds", (double)rounds);
	bench_param_num(c, "files", (double)nfiles);
	bench_param_num(c, "map_cost_us", (double)map_cost_us);
	if (calibrate) {
		bench_param_num(c, "cal_unwritten_write_us", cal_u);
		bench_param_num(c, "cal_written_write_us", cal_w);
		bench_param_num(c, "cal_alloc_path_us", cal_u - cal_w);
		bench_note(c, "map() cost basis: a kernel O_DIRECT 4 KiB write "
			      "into unwritten extents %.1f us, into written "
			      "ones %.1f us: the allocation path costs %.1f us, "
			      "so map() spins %llu us",
			   cal_u, cal_w, cal_u - cal_w,
			   (unsigned long long)map_cost_us);
	}
	/* One JSON variant per (variant, mix), keys per thread count: the
	 * table holds at most BENCH_MAX_VARIANTS. */
	double med[2][BENCH_LIST_MAX][V_N];
	for (int mix = 0; mix < 2; mix++) {
		for (int v = 0; v < V_N; v++) {
			char name[64];
			snprintf(name, sizeof(name), "%s %s", vname[v],
				 mix ? "mixed" : "write");
			struct bench_variant *bv = bench_variant(c, name);
			for (unsigned t = 0; t < list.n; t++) {
				double tmp[100], lo = 1e300, hi = 0;
				for (unsigned r = 0; r < rounds; r++) {
					tmp[r] = ops[mix][t][v][r];
					lo = tmp[r] < lo ? tmp[r] : lo;
					hi = tmp[r] > hi ? tmp[r] : hi;
				}
				med[mix][t][v] = bench_median(tmp, rounds);
				char key[40];
				unsigned long long n = list.v[t];
				if (!bv)
					continue;
				snprintf(key, sizeof(key), "t%llu_iops_median", n);
				bench_num(bv, key, med[mix][t][v]);
				snprintf(key, sizeof(key), "t%llu_iops_min", n);
				bench_num(bv, key, lo);
				snprintf(key, sizeof(key), "t%llu_iops_max", n);
				bench_num(bv, key, hi);
			}
		}
	}
	for (int mix = 0; mix < 2; mix++) {
		const char *mn = mix ? "50/50" : "writes";
		for (unsigned t = 0; t < list.n; t++) {
			char fig[80], cmp[64];
			double *m = med[mix][t];
			snprintf(fig, sizeof(fig), "%s %llut: fast path",
				 mn, (unsigned long long)list.v[t]);
			bench_row(c, &(struct bench_row){
				.figure = fig, .value = m[V_FAST] * 4096 / 1e6,
				.unit = "MB/s", .cmp = "exclusive",
				.ratio = m[V_EXCL] > 0 ? m[V_FAST] / m[V_EXCL]
						       : 0,
				.flags = BENCH_ROW_HEADLINE});
			snprintf(fig, sizeof(fig), "%s %llut: fast / kernel",
				 mn, (unsigned long long)list.v[t]);
			bench_row(c, &(struct bench_row){
				.figure = fig,
				.value = m[V_KERNEL] * 4096 / 1e6,
				.unit = "MB/s", .cmp = "kernel MB/s",
				.ratio = m[V_KERNEL] > 0
						 ? m[V_FAST] / m[V_KERNEL]
						 : 0});
			snprintf(fig, sizeof(fig), "%s %llut: buffered+sync",
				 mn, (unsigned long long)list.v[t]);
			snprintf(cmp, sizeof(cmp), "fast");
			bench_row(c, &(struct bench_row){
				.figure = fig,
				.value = m[V_BUFFERED] * 4096 / 1e6,
				.unit = "MB/s", .cmp = cmp,
				.ratio = m[V_FAST] > 0
						 ? m[V_BUFFERED] / m[V_FAST]
						 : 0});
		}
		if (list.n > 1 && list.v[0] == 1) {
			double *a = med[mix][0], *b = med[mix][1];
			double fs = b[V_FAST] / a[V_FAST];
			double ks = b[V_KERNEL] / a[V_KERNEL];
			char fig[80];
			snprintf(fig, sizeof(fig),
				 "%s 1->%llut scaling: fast / kernel", mn,
				 (unsigned long long)list.v[1]);
			bench_row(c, &(struct bench_row){
				.figure = fig, .value = fs, .unit = "x",
				.cmp = "kernel scaling",
				.ratio = ks > 0 ? fs / ks : 0,
				.flags = BENCH_ROW_HEADLINE});
		}
	}
	struct bench_variant *sv = bench_variant(c, "fast path stats");
	if (sv) {
		bench_num(sv, "direct_writes",
			  (double)(after.direct_writes - before.direct_writes));
		bench_num(sv, "direct_fast_writes",
			  (double)(after.direct_fast_writes -
				   before.direct_fast_writes));
		bench_num(sv, "direct_map_calls",
			  (double)(after.direct_map_calls -
				   before.direct_map_calls));
		bench_num(sv, "direct_exclusive",
			  (double)(after.direct_exclusive -
				   before.direct_exclusive));
		bench_num(sv, "direct_reads",
			  (double)(after.direct_reads - before.direct_reads));
	}
	bench_note(c, "fast path during the runs: %llu writes, %llu fast, "
		      "%llu map() calls, %llu exclusive",
		   (unsigned long long)(after.direct_writes -
					before.direct_writes),
		   (unsigned long long)(after.direct_fast_writes -
					before.direct_fast_writes),
		   (unsigned long long)(after.direct_map_calls -
					before.direct_map_calls),
		   (unsigned long long)(after.direct_exclusive -
					before.direct_exclusive));
	bench_note(c, "medians of %llu interleaved rounds (variant order "
		      "rotated each round); ranges in the JSON; %ld CPUs",
		   (unsigned long long)rounds, sysconf(_SC_NPROCESSORS_ONLN));
	return 0;
}

static struct bench_cmd cmd = {
	.name = "direct",
	.summary = "4 KiB random O_DIRECT overwrites over many files: the "
		   "direct-write fast path vs exclusive+map() vs the kernel",
	.exec = run,
	.in_default = false,
	.order = 90,
	.help =
	"Creates --files files of --size bytes in --dir, preallocated and\n"
	"synced, and opens each with O_DIRECT. For each thread count and\n"
	"for writes only and a 50/50 read/write mix, runs --rounds rounds of\n"
	"four variants (order rotated per round, --runtime / --rounds\n"
	"seconds each): kernel pwrite/pread on the O_DIRECT descriptors; the\n"
	"library's direct calls (fast path); the same with\n"
	"FOLIO_MAPPING_DIRECT_EXCLUSIVE (io_lock exclusive and a map() per\n"
	"write, map() spinning --map-cost-us); buffered library writes with\n"
	"a sync of every mapping at the end of each run. Threads pick a file\n"
	"and a 4 KiB block at random.",
	.defaults = {.size = 8 * MIB, .bs = 4 * KIB, .jobs = 8, .runtime = 3,
		     .folio_size = 64 * KIB, .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_POSIX, .dir = "/var/tmp"},
	.uses = BOPT_SIZE | BOPT_RUNTIME | BOPT_FOLIO_SIZE | BOPT_DIR,
	.xopts = xopts,
};
BENCH_REGISTER(cmd)
