/* SPDX-License-Identifier: MIT */
/*
 * nbd-compare: the library over an NBD export against raw libnbd and
 * against nbdkit's own cache filter, side by side in one run, in
 * interleaved rounds (medians). bench/nbd-compare.sh starts the servers:
 *
 *   --lib URI     the delayed export (file plugin behind the delay filter)
 *   --cache URI   the same kind of export with nbdkit's cache filter
 *                 (cache=writeback) in front of the delay filter
 *
 * Workloads, each a line of the result table:
 *   randwrite-sync J   4 KiB random overwrites, each followed by a sync
 *                      (library: an engine and a mapping of 64 KiB
 *                      folios per job; raw and cache: nbd_pwrite +
 *                      nbd_flush per write, a handle per job), ops/s and
 *                      bytes sent per byte written
 *   seqread B          cold sequential reads of B-byte calls over a region
 *                      never read before (library: a new mapping; cache:
 *                      a region the filter has not cached), MB/s and NBD
 *                      commands per MiB; the reference is raw 2 MiB reads
 *   randread-hot       4 KiB random reads of an 8 MiB region read before
 *   sync-10k           one sync of 10^4 scattered dirty 4 KiB blocks
 *                      against raw nbd_aio_pwrite with 64 in flight +
 *                      flush, seconds
 */
#include <errno.h>
#include <libnbd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "folio_state.h"
#include "folio_state_nbd.h"

#include "compare.h"

#define BS 4096u
#define MAXJ 8

static const char *lib_uri, *cache_uri;
static double secs = 2.0;
static int rounds = 3;

static __attribute__((noreturn)) void die(const char *what, int err)
{
	compare_die("nbd-compare", what, err);
}

static struct nbd_handle *raw_open(const char *uri)
{
	struct nbd_handle *h = nbd_create();
	if (!h || nbd_connect_uri(h, uri) == -1) {
		fprintf(stderr, "nbd-compare: %s: %s\n", uri, nbd_get_error());
		exit(1);
	}
	return h;
}

static uint64_t export_size(const char *uri)
{
	struct nbd_handle *h = raw_open(uri);
	int64_t s = nbd_get_size(h);
	nbd_close(h);
	return (uint64_t)s;
}

/* NBD_COMPARE_CONNS / NBD_COMPARE_DEPTH override the engine's defaults. */
static struct folio_engine *lib_engine(void)
{
	struct folio_engine *e;
	const char *cn = getenv("NBD_COMPARE_CONNS"),
		   *dp = getenv("NBD_COMPARE_DEPTH");
	struct folio_nbd_opts o = {.sz = sizeof(o),
				   .connections = cn ? (unsigned)atoi(cn) : 0,
				   .depth = dp ? (unsigned)atoi(dp) : 0};
	int r = folio_engine_nbd(&e, lib_uri, &o);
	if (r)
		die("folio_engine_nbd", r);
	return e;
}

static struct folio_mapping *lib_mapping(struct folio_engine *e, uint64_t size)
{
	struct folio_mapping_opts o = {.sz = sizeof(o), .block_size = BS,
				       .max_folio_size = 64 << 10,
				       .size = size, .engine = e};
	struct folio_mapping *m;
	int r = folio_mapping_new(&m, &o);
	if (r)
		die("folio_mapping_new", r);
	return m;
}

static uint64_t sent_bytes(struct folio_engine *e)
{
	struct folio_nbd_info i = {.sz = sizeof(i)};
	folio_engine_nbd_info(e, &i);
	return i.bytes_written;
}

static uint64_t sent_commands(struct folio_engine *e)
{
	struct folio_nbd_info i = {.sz = sizeof(i)};
	folio_engine_nbd_info(e, &i);
	return i.commands;
}

/* ---- randwrite-sync ------------------------------------------------------ */

struct wjob {
	struct folio_mapping *m; /* or: */
	struct nbd_handle *h;
	uint64_t base, span, ops;
	unsigned idx;
	atomic_bool *stop;
	int err;
};

static void *wjob_main(void *arg)
{
	struct wjob *j = arg;
	unsigned char buf[BS];
	memset(buf, (int)j->idx, sizeof(buf));
	uint64_t seed = 0x9e3779b97f4a7c15ull * (j->idx + 1);
	folio_errseq_t cur = j->m ? folio_mapping_err_cursor(j->m) : 0;
	while (!atomic_load(j->stop)) {
		uint64_t off = j->base + (compare_rand(&seed) % (j->span / BS)) * BS;
		buf[0]++;
		if (j->m) {
			if (folio_mapping_write(j->m, buf, BS, off) != BS ||
			    (j->err = folio_mapping_sync(j->m, &cur)))
				break;
		} else if (nbd_pwrite(j->h, buf, BS, off, 0) == -1 ||
			   nbd_flush(j->h, 0) == -1) {
			j->err = -EIO;
			break;
		}
		j->ops++;
	}
	return NULL;
}

/* ops/s of J jobs for `secs`; *wa gets bytes sent per byte written for
 * the library. Each job has its own slice of the export and its own
 * connection(s): raw and cache a libnbd handle, the library an engine and
 * a mapping (as fio gives each job its own file). */
static double randwrite(int variant, unsigned J, double *wa)
{
	const char *uri = variant == 2 ? cache_uri : lib_uri;
	uint64_t size = export_size(uri), span = size / J;
	atomic_bool stop = false;
	struct wjob j[MAXJ];
	struct folio_engine *e[MAXJ] = {0};
	pthread_t th[MAXJ];
	for (unsigned i = 0; i < J; i++) {
		j[i] = (struct wjob){.base = i * span, .span = span, .idx = i,
				     .stop = &stop};
		if (variant == 0) {
			e[i] = lib_engine();
			j[i].m = lib_mapping(e[i], size);
		} else {
			j[i].h = raw_open(uri);
		}
	}
	double t0 = compare_now();
	for (unsigned i = 0; i < J; i++)
		pthread_create(&th[i], NULL, wjob_main, &j[i]);
	struct timespec ts = {(time_t)secs, (long)((secs - (long)secs) * 1e9)};
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	uint64_t ops = 0, sent = 0;
	for (unsigned i = 0; i < J; i++)
		pthread_join(th[i], NULL);
	double dt = compare_now() - t0;
	for (unsigned i = 0; i < J; i++) {
		if (j[i].err)
			die("randwrite", j[i].err);
		ops += j[i].ops;
		if (j[i].h)
			nbd_close(j[i].h);
		if (e[i]) {
			sent += sent_bytes(e[i]);
			folio_mapping_free(j[i].m);
			folio_engine_free(e[i]);
		}
	}
	if (variant == 0)
		*wa = (double)sent / ((double)ops * BS);
	return (double)ops / dt;
}

/* ---- cold sequential reads ------------------------------------------------ */

/* MB/s reading [base, base+len) in calls of `call` bytes; *per_mib gets
 * the NBD commands per MiB for the library. */
static double seqread(int variant, uint64_t base, uint64_t len, size_t call,
		      double *per_mib)
{
	char *buf = malloc(call);
	struct folio_engine *e = NULL;
	struct folio_mapping *m = NULL;
	struct nbd_handle *h = NULL;
	const char *uri = variant == 2 ? cache_uri : lib_uri;
	if (variant == 0) {
		e = lib_engine();
		m = lib_mapping(e, export_size(lib_uri));
	} else {
		h = raw_open(uri);
	}
	uint64_t c0 = e ? sent_commands(e) : 0;
	double t0 = compare_now();
	uint64_t done = 0;
	for (uint64_t off = base; off + call <= base + len; off += call) {
		if (m) {
			if (folio_mapping_read(m, buf, call, off) != (ssize_t)call)
				die("seqread", EIO);
		} else if (nbd_pread(h, buf, call, off, 0) == -1) {
			die("seqread", EIO);
		}
		done += call;
		if (compare_now() - t0 > secs * 2)
			break;
	}
	double dt = compare_now() - t0;
	if (e) {
		*per_mib = (double)(sent_commands(e) - c0) /
			   ((double)done / (1 << 20));
		folio_mapping_free(m);
		folio_engine_free(e);
	}
	if (h)
		nbd_close(h);
	free(buf);
	return (double)done / dt / 1e6;
}

/* ---- hot random reads ----------------------------------------------------- */

static double randread_hot(int variant, uint64_t base)
{
	const uint64_t region = 8u << 20;
	char buf[BS];
	struct folio_engine *e = NULL;
	struct folio_mapping *m = NULL;
	struct nbd_handle *h = NULL;
	if (variant == 0) {
		e = lib_engine();
		m = lib_mapping(e, export_size(lib_uri));
	} else {
		h = raw_open(variant == 2 ? cache_uri : lib_uri);
	}
	char *big = malloc(1 << 20);
	for (uint64_t off = 0; off < region; off += 1 << 20) /* warm up */
		if (m ? folio_mapping_read(m, big, 1 << 20, base + off) < 0 :
			nbd_pread(h, big, 1 << 20, base + off, 0) == -1)
			die("randread warm-up", EIO);
	free(big);
	uint64_t seed = 12345, ops = 0;
	double t0 = compare_now(), dt;
	while ((dt = compare_now() - t0) < secs) {
		for (int k = 0; k < 64; k++, ops++) {
			uint64_t off = base + (compare_rand(&seed) % (region / BS)) * BS;
			if (m ? folio_mapping_read(m, buf, BS, off) != BS :
				nbd_pread(h, buf, BS, off, 0) == -1)
				die("randread", EIO);
		}
	}
	if (m) {
		folio_mapping_free(m);
		folio_engine_free(e);
	}
	if (h)
		nbd_close(h);
	return (double)ops / dt;
}

/* ---- one sync of 10^4 scattered dirty blocks ------------------------------ */

static int aio_done(void *arg, int *error)
{
	atomic_int *n = arg;
	if (*error)
		atomic_store(n, -1000000);
	atomic_fetch_add(n, 1);
	return 1;
}

static double sync_10k(int variant, uint64_t *offs, unsigned n)
{
	static char buf[BS];
	memset(buf, variant + 1, sizeof(buf));
	if (variant == 0) {
		struct folio_engine *e = lib_engine();
		struct folio_mapping *m = lib_mapping(e, export_size(lib_uri));
		for (unsigned i = 0; i < n; i++)
			if (folio_mapping_write(m, buf, BS, offs[i]) != BS)
				die("sync-10k write", EIO);
		double t0 = compare_now();
		int r = folio_mapping_sync(m, NULL);
		double dt = compare_now() - t0;
		if (r)
			die("sync-10k", r);
		folio_mapping_free(m);
		folio_engine_free(e);
		return dt;
	}
	struct nbd_handle *h = raw_open(lib_uri);
	double t0 = compare_now();
	atomic_int done = 0;
	unsigned sent = 0;
	while (atomic_load(&done) < (int)n) {
		while (sent < n && sent - (unsigned)atomic_load(&done) < 64) {
			nbd_completion_callback cb = {.callback = aio_done,
						      .user_data = &done};
			if (nbd_aio_pwrite(h, buf, BS, offs[sent], cb, 0) == -1)
				die("aio_pwrite", EIO);
			sent++;
		}
		if (nbd_poll(h, -1) == -1)
			die("nbd_poll", EIO);
		if (atomic_load(&done) < 0)
			die("raw write", EIO);
	}
	if (nbd_flush(h, 0) == -1)
		die("flush", EIO);
	double dt = compare_now() - t0;
	nbd_close(h);
	return dt;
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--lib"))
			lib_uri = argv[i + 1];
		else if (!strcmp(argv[i], "--cache"))
			cache_uri = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	if (!lib_uri || !cache_uri || rounds < 1 || rounds > 5 || secs <= 0) {
		fprintf(stderr, "usage: nbd-compare --lib URI --cache URI "
				"[--seconds S] [--rounds N]\n");
		return 2;
	}
	uint64_t size = export_size(lib_uri);
	if (export_size(cache_uri) != size || size < (2048ull << 20)) {
		fprintf(stderr, "nbd-compare: both exports must have the same "
				"size, at least 2 GiB\n");
		return 2;
	}
	static const char *const vname[] = {"library", "raw libnbd",
					    "cache filter"};
	double w[2][3][15], wa[2][15], sr[2][4][15], spm[2][15], hot[3][15];
	double s10[2][15];
	enum { NSYNC = 10000 };
	uint64_t *offs = malloc(NSYNC * sizeof(*offs));
	/* Scattered: one block in each of 10^4 distinct 64 KiB folios. */
	uint64_t folios = size / (64 << 10), seed = 777;
	for (unsigned i = 0; i < NSYNC; i++)
		offs[i] = ((i * (folios / NSYNC)) + compare_rand(&seed) % (folios / NSYNC)) *
			  (64 << 10) + (compare_rand(&seed) % 16) * BS;
	uint64_t region = 48u << 20;
	for (int r = 0; r < rounds; r++) {
		fprintf(stderr, "round %d/%d\n", r + 1, rounds);
		static const unsigned jobs[2] = {1, 8};
		/* Each round starts with a different variant, so that no
		 * variant always follows the same one. */
		for (int jj = 0; jj < 2; jj++)
			for (int k = 0; k < 3; k++) {
				int v = compare_turn(k, r, 3);
				double x = 0;
				w[jj][v][r] = randwrite(v, jobs[jj], &x);
				if (v == 0)
					wa[jj][r] = x;
			}
		/* Cold regions: a fresh one per round and variant. */
		uint64_t base = (size / 2) + (uint64_t)r * 4 * region;
		static const size_t calls[2] = {BS, 128 << 10};
		double pm;
		if (r % 2)
			sr[0][2][r] = seqread(1, base + 0 * region, region,
					      2 << 20, &pm);
		for (int cc = 0; cc < 2; cc++) {
			sr[cc][0][r] = seqread(0, base + cc * region, region,
					       calls[cc], &spm[cc][r]);
			sr[cc][1][r] = seqread(2, base + (2 + cc) * region,
					       region, calls[cc], &pm);
		}
		if (!(r % 2))
			sr[0][2][r] = seqread(1, base + 0 * region, region,
					      2 << 20, &pm);
		for (int k = 0; k < 3; k++)
			{
				int v = compare_turn(k, r, 3);
				hot[v][r] = randread_hot(v, 0);
			}
		for (int k = 0; k < 2; k++)
			{
				int v = compare_turn(k, r, 2);
				s10[v][r] = sync_10k(v, offs, NSYNC);
			}
	}
	printf("# NBD comparison: delay filter 1 ms per read/write, %d "
	       "interleaved rounds of %.1f s, medians (shared machine)\n",
	       rounds, secs);
	printf("%-28s %12s %12s %12s %10s %10s\n", "workload", vname[0],
	       vname[1], vname[2], "lib/raw", "lib/cache");
	for (int jj = 0; jj < 2; jj++) {
		double a = compare_median(w[jj][0], rounds), b = compare_median(w[jj][1], rounds),
		       c = compare_median(w[jj][2], rounds);
		printf("randwrite-sync %d job%s ops/s %9.0f %12.0f %12.0f %10.2f "
		       "%10.2f\n", jj ? 8 : 1, jj ? "s" : " ", a, b, c, a / b,
		       a / c);
	}
	printf("write amplification (lib)    %.3f (1 job), %.3f (8 jobs)\n",
	       compare_median(wa[0], rounds), compare_median(wa[1], rounds));
	double stream = compare_median(sr[0][2], rounds);
	for (int cc = 0; cc < 2; cc++) {
		double a = compare_median(sr[cc][0], rounds), c = compare_median(sr[cc][1], rounds);
		printf("seqread cold %-6s MB/s %9.1f %12s %12.1f %10s %10.2f\n",
		       cc ? "128KiB" : "4KiB", a, "-", c, "-", a / c);
	}
	printf("raw 2 MiB reads (streaming)  %.1f MB/s; library 4 KiB cold "
	       "= %.2f of it, %.2f NBD commands/MiB (128 KiB calls: %.2f)\n",
	       stream, compare_median(sr[0][0], rounds) / stream,
	       compare_median(spm[0], rounds), compare_median(spm[1], rounds));
	double h0 = compare_median(hot[0], rounds), h1 = compare_median(hot[1], rounds),
	       h2 = compare_median(hot[2], rounds);
	printf("randread hot 4KiB ops/s %12.0f %12.0f %12.0f %10.1f %10.1f\n",
	       h0, h1, h2, h0 / h1, h0 / h2);
	double t0 = compare_median(s10[0], rounds), t1 = compare_median(s10[1], rounds);
	printf("sync 10^4 scattered blocks s %9.3f %12.3f %12s %10.2f "
	       "(raw time / lib time)\n", t0, t1, "-", t1 / t0);
	free(offs);
	return 0;
}
