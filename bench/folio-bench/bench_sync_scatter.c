/* SPDX-License-Identifier: MIT */
/*
 * sync-scatter: --blocks scattered 4 KiB blocks of a --size file are made
 * dirty, then one sync makes them durable. The kernel: buffered pwrite()
 * of each block, then fdatasync(). The library: folio_mapping_write() of
 * the same blocks, then folio_mapping_sync(), over the posix engine on an
 * O_DIRECT descriptor (each --posix-threads setting) and over the io_uring
 * engine on one. What is compared is the sync: the writes only fill
 * caches on both sides. A sync of scattered blocks is one write request
 * per block; an engine that does them one at a time pays a device round
 * trip each, one that keeps many in flight overlaps them (as the kernel's
 * writeback does). A plain io_uring loop writing the same blocks with
 * O_DIRECT, then fdatasync(), shows what the device gives without the
 * library.
 *
 * Rounds interleave the variants, each round dirties other blocks (a new
 * seed) of the same file, and the median round counts. Before each
 * variant's round the file's kernel pages are dropped (as in the cold
 * read workloads), so no variant inherits another's page cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "posix_threads.h"

#ifdef BENCH_HAVE_LIBURING
#include <liburing.h>
#endif

static uint64_t rounds = 3;
static uint64_t nblocks = 10000;
static const char *posix_threads = "default";

static struct bench_xopt xopts[] = {
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds,
	 .metavar = "N", .help = "rounds per variant (median counts)"},
	{.name = "blocks", .type = BENCH_X_UINT, .var = &nblocks,
	 .metavar = "N", .help = "dirty 4 KiB blocks per sync"},
	{.name = "posix-threads", .type = BENCH_X_STR, .var = &posix_threads,
	 .metavar = "LIST", .help = BENCH_POSIX_THREADS_HELP},
	{0},
};

#define MAX_ROUNDS 32
#define BLK 4096u

/* Round order: the kernel, io_uring, the plain io_uring loop, then one
 * posix variant per --posix-threads entry. */
enum variant { V_KERNEL, V_URING, V_PLAIN, V_POSIX, V_N = V_POSIX + 1 };

/* Requests the plain loop keeps in flight: what the engine's ring (depth
 * 256) admits in SQ entries, and past the device's queue. */
#define PLAIN_DEPTH 256u

struct series {
	double sync_ms[MAX_ROUNDS], write_ms[MAX_ROUNDS];
	unsigned n;
	struct folio_mapping_stats st; /* of the last round */
};

/* nblocks distinct block numbers below size / BLK, from seed. */
static int pick_blocks(uint64_t size, uint64_t seed, uint64_t *out)
{
	uint64_t total = size / BLK;
	unsigned char *seen = calloc((size_t)(total + 7) / 8, 1);
	if (!seen)
		return -ENOMEM;
	uint64_t s = seed | 1;
	for (uint64_t i = 0; i < nblocks;) {
		uint64_t b = bench_rand(&s) % total;
		if (seen[b / 8] & (1u << (b % 8)))
			continue;
		seen[b / 8] |= (unsigned char)(1u << (b % 8));
		out[i++] = b;
	}
	free(seen);
	return 0;
}

static int kernel_round(int fd, const uint64_t *blk, const char *buf,
			double *write_ms, double *sync_ms)
{
	uint64_t t0 = bench_now_ns();
	for (uint64_t i = 0; i < nblocks; i++) {
		ssize_t r = pwrite(fd, buf, BLK, (off_t)(blk[i] * BLK));
		if (r < 0 && errno == EINTR) {
			i--;
			continue;
		}
		if (r != BLK)
			return r < 0 ? -errno : -EIO;
	}
	uint64_t t1 = bench_now_ns();
	if (fdatasync(fd))
		return -errno;
	uint64_t t2 = bench_now_ns();
	*write_ms = (double)(t1 - t0) / 1e6;
	*sync_ms = (double)(t2 - t1) / 1e6;
	return 0;
}

#ifdef BENCH_HAVE_LIBURING
/*
 * What the device gives without the library: the same blocks written
 * from one buffer with O_DIRECT through a plain io_uring loop keeping
 * PLAIN_DEPTH in flight, then fdatasync(). All of it is timed (there is
 * no cache to fill first). The reference for the engines: what they can
 * reach on this device at best.
 */
static int plain_round(int dfd, const uint64_t *blk, const char *buf,
		       double *sync_ms)
{
	struct io_uring ring;
	int err = io_uring_queue_init(PLAIN_DEPTH, &ring, 0);
	if (err)
		return err;
	uint64_t t0 = bench_now_ns(), sent = 0, done = 0;
	while (!err && done < nblocks) {
		struct io_uring_sqe *sqe;
		while (sent < nblocks && sent - done < PLAIN_DEPTH &&
		       (sqe = io_uring_get_sqe(&ring))) {
			io_uring_prep_write(sqe, dfd, buf, BLK,
					    blk[sent] * BLK);
			sent++;
		}
		int r = io_uring_submit_and_wait(&ring, 1);
		if (r < 0 && r != -EINTR) {
			err = r;
			break;
		}
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			if (!err && cqe->res != (int)BLK)
				err = cqe->res < 0 ? cqe->res : -EIO;
			n++;
		}
		io_uring_cq_advance(&ring, n);
		done += n;
	}
	/* Whatever failed, nothing may stay in flight on buf. */
	while (done < sent) {
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&ring, &cqe))
			break;
		io_uring_cqe_seen(&ring, cqe);
		done++;
	}
	io_uring_queue_exit(&ring);
	if (!err && fdatasync(dfd))
		err = -errno;
	*sync_ms = (double)(bench_now_ns() - t0) / 1e6;
	return err;
}
#endif

static int lib_round(struct bench_ctx *c, enum bench_engine_kind kind,
		     int dfd, const uint64_t *blk, const char *buf,
		     struct series *s, double *write_ms, double *sync_ms)
{
	struct bench_reader r;
	int err = bench_reader_open(c, &r, kind, dfd, c->o.size);
	if (err)
		return err;
	uint64_t t0 = bench_now_ns();
	for (uint64_t i = 0; i < nblocks && !err; i++) {
		ssize_t w = folio_mapping_write(r.m, buf, BLK, blk[i] * BLK);
		if (w != BLK)
			err = w < 0 ? (int)w : -EIO;
	}
	uint64_t t1 = bench_now_ns();
	if (!err)
		err = folio_mapping_sync(r.m, NULL);
	uint64_t t2 = bench_now_ns();
	*write_ms = (double)(t1 - t0) / 1e6;
	*sync_ms = (double)(t2 - t1) / 1e6;
	s->st.sz = sizeof(s->st);
	folio_mapping_stats(r.m, &s->st);
	int f = bench_reader_close(&r);
	return err ? err : f;
}

static void report(struct bench_ctx *c, const char *name, struct series *s,
		   double base_ms, int workers, bool lib)
{
	double sync_ms = bench_median(s->sync_ms, s->n);
	double wr_ms = bench_median(s->write_ms, s->n);
	struct bench_variant *v = bench_variant(c, name);
	bench_str(v, "variant", name);
	bench_num(v, "rounds", s->n);
	bench_num(v, "blocks", (double)nblocks);
	bench_num(v, "sync_ms", sync_ms);
	bench_num(v, "min_sync_ms", s->sync_ms[0]);
	bench_num(v, "max_sync_ms", s->sync_ms[s->n - 1]);
	bench_num(v, "write_ms", wr_ms);
	if (lib) {
		bench_num(v, "wb_requests", (double)s->st.wb_requests);
		bench_num(v, "flushes", (double)s->st.flushes);
		if (workers != -2)
			bench_num(v, "posix_workers", workers);
	}
	char fig[96];
	snprintf(fig, sizeof(fig), "%s: sync of %llu scattered 4K blocks",
		 name, (unsigned long long)nblocks);
	/* As a rate, so that the ratio reads as everywhere else (> 1:
	 * the library is faster); the times are in the JSON. */
	double mbs = (double)nblocks * BLK / (sync_ms / 1e3) / 1e6;
	bench_num(v, "sync_mb_per_s", mbs);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = mbs, .unit = "MB/s",
			     .cmp = base_ms > 0 ? "kernel pwrite+fdatasync" : NULL,
			     .ratio = base_ms > 0 ? base_ms / sync_ms : 0,
			     .flags = lib ? BENCH_ROW_HEADLINE : 0});
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	struct bench_posix_list pt;
	if (!rounds || rounds > MAX_ROUNDS) {
		fprintf(stderr, "folio-bench sync-scatter: --rounds: 1 to %d\n",
			MAX_ROUNDS);
		return 2;
	}
	if (bench_posix_parse("sync-scatter", posix_threads, &pt))
		return 2;
	if (!nblocks || nblocks > o->size / BLK / 2) {
		fprintf(stderr, "folio-bench sync-scatter: --blocks: 1 to half "
				"the blocks of --size\n");
		return 2;
	}
	char s1[32];
	bench_title(c, "one sync of %llu scattered 4K blocks of a %s file, "
		       "median of %llu interleaved rounds",
		    (unsigned long long)nblocks,
		    bench_fmt_size(s1, sizeof(s1), o->size),
		    (unsigned long long)rounds);
	bench_param_num(c, "rounds", (double)rounds);
	bench_param_num(c, "blocks", (double)nblocks);
	bench_param_str(c, "posix_threads", posix_threads);
	int fd = bench_tmpfile(o->dir);
	if (fd < 0)
		return 1;
	int err = bench_prefill(fd, o->size);
	int dfd = err ? -1 : bench_reopen(fd, O_RDWR | O_DIRECT);
	bool uring = false;
	if (!err && dfd < 0) {
		bench_note(c, "O_DIRECT refused in %s: library variants "
			      "skipped", o->dir);
	} else if (!err) {
		struct folio_engine *e;
		uring = !folio_engine_uring(&e, dfd, 8, 0);
		if (uring)
			folio_engine_free(e);
		else
			bench_note(c, "io_uring unavailable: uring variant "
				      "skipped");
	}
	uint64_t *blk = malloc(nblocks * sizeof(*blk));
	char *buf = aligned_alloc(4096, BLK);
	static struct series sk, su, sr, sp[BENCH_LIST_MAX];
	memset(&sk, 0, sizeof(sk));
	memset(&su, 0, sizeof(su));
	memset(&sr, 0, sizeof(sr));
	memset(sp, 0, sizeof(sp));
	if (!err && (!blk || !buf))
		err = -ENOMEM;
	for (unsigned i = 0; i < rounds && !err; i++) {
		err = pick_blocks(o->size, 0x5eed + i, blk);
		memset(buf, 'a' + (int)(i % 26), BLK);
		for (unsigned v = 0; v < V_POSIX + pt.n && !err; v++) {
			double w = 0, sy = 0;
			bench_progress("sync-scatter %u/%llu [%u]", i + 1,
				       (unsigned long long)rounds, v);
			/* Every variant starts without the file in the page
			 * cache: the kernel round leaves the very blocks the
			 * next variant writes cached, and an O_DIRECT write
			 * over cached pages must invalidate them; io_uring
			 * cannot do that without blocking, so each such
			 * write went to its worker threads. */
			double res = bench_drop_kernel_cache(c, fd, o->size);
			if (res < 0) {
				err = (int)res;
				break;
			}
			if (v == V_KERNEL) {
				err = kernel_round(fd, blk, buf, &w, &sy);
				if (!err) {
					sk.write_ms[sk.n] = w;
					sk.sync_ms[sk.n++] = sy;
				}
			} else if (v == V_URING) {
				if (!uring)
					continue;
				err = lib_round(c, BENCH_ENGINE_URING, dfd, blk,
						buf, &su, &w, &sy);
				if (!err) {
					su.write_ms[su.n] = w;
					su.sync_ms[su.n++] = sy;
				}
			} else if (v == V_PLAIN) {
#ifdef BENCH_HAVE_LIBURING
				if (!uring)
					continue;
				err = plain_round(dfd, blk, buf, &sy);
				if (!err)
					sr.sync_ms[sr.n++] = sy;
#endif
			} else if (dfd >= 0) {
				struct series *p = &sp[v - V_POSIX];
				bench_posix_workers = pt.v[v - V_POSIX];
				err = lib_round(c, BENCH_ENGINE_POSIX, dfd, blk,
						buf, p, &w, &sy);
				bench_posix_workers = 0;
				if (!err) {
					p->write_ms[p->n] = w;
					p->sync_ms[p->n++] = sy;
				}
			}
		}
	}
	bench_progress_done();
	bench_note_coldness(c);
	if (!err) {
		report(c, "kernel pwrite+fdatasync", &sk, 0, 0, false);
		double base = bench_median(sk.sync_ms, sk.n);
		for (unsigned t = 0; t < pt.n; t++) {
			char name[64], wb[24];
			snprintf(name, sizeof(name), "lib posix O_DIRECT %s",
				 bench_posix_label(pt.v[t], wb, sizeof(wb)));
			if (sp[t].n)
				report(c, name, &sp[t], base, pt.v[t], true);
		}
		if (su.n)
			report(c, "lib uring O_DIRECT", &su, base, -2, true);
		if (sr.n)
			report(c, "plain io_uring O_DIRECT", &sr, base, 0,
			       false);
	}
	free(blk);
	free(buf);
	if (dfd >= 0)
		close(dfd);
	close(fd);
	if (err) {
		fprintf(stderr, "folio-bench sync-scatter: %s\n",
			strerror(-err));
		return 1;
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "sync-scatter",
	.summary = "one sync of 10^4 scattered dirty 4 KiB blocks: library "
		   "engines vs kernel fdatasync",
	.exec = run,
	.in_default = false,
	.order = 37,
	.help =
	"Fills a --size file in --dir, then per round dirties --blocks\n"
	"scattered 4K blocks and syncs once, with each variant:\n"
	"  kernel pwrite+fdatasync  buffered pwrite() of each block, then\n"
	"                           fdatasync() (baseline: the sync is timed)\n"
	"  lib posix O_DIRECT S     folio_mapping_write() of each block, then\n"
	"                           folio_mapping_sync(), posix engine on an\n"
	"                           O_DIRECT fd, for each --posix-threads S\n"
	"  lib uring O_DIRECT       the same over the io_uring engine\n"
	"  plain io_uring O_DIRECT  the blocks written by a bare io_uring loop\n"
	"                           (256 in flight), then fdatasync(), all\n"
	"                           timed: what the device gives at best\n"
	"Rounds interleave the variants; the median sync is reported as the\n"
	"rate of blocks made durable (MB/s) and its ratio to the kernel's\n"
	"(> 1: the library's sync is faster); times are in the JSON.",
	.defaults = {.size = 1 * GIB, .folio_size = FOLIO_MAX_SIZE,
		     .block_size = 4 * KIB, .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE | BOPT_DIR,
	.xopts = xopts,
	.quick_size = 64 * MIB,
};
BENCH_REGISTER(cmd)
