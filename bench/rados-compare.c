/* SPDX-License-Identifier: MIT */
/*
 * rados-compare: the library's RADOS engine against librbd with its cache
 * (ObjectCacher, write-back) and without, and against raw librados, on
 * the same cluster and the same workloads, in interleaved rounds (every
 * contender once per round, medians over rounds), so that a shared,
 * noisy machine hurts them alike. bench/rados-compare.sh starts a
 * cluster and runs it.
 *
 *   rados-compare CONF POOL [ROUNDS [SECONDS]]
 *
 * Workloads, over a 64 MiB region written once before the rounds:
 *   randwrite-sync  4 KiB random overwrite, each followed by a flush
 *                   (folio_mapping_sync / rbd_flush / rados_write), 1 job
 *   randread-hot    4 KiB random reads of data read once before (cached
 *                   where there is a cache)
 *   seqread-cold    the region read with 128 KiB calls through a fresh
 *                   engine / image
 *   writers-8       8 threads, each a 4 KiB random overwrite + sync loop
 *                   on its own object (raw: rados_aio_write + wait, the
 *                   same depth of 1 per writer)
 * Output: one line per workload and contender (ops/s median, min, max),
 * then the ratios the issue asks for.
 */
#include <errno.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "folio_state.h"
#include "folio_state_rados.h"

#include "compare.h"

#define REGION (UINT64_C(64) << 20)
#define BS 4096u
#define SEQ_CALL (128u << 10)
#define WRITERS 8
#define MAXR 32

static rados_t cl_plain, cl_cache, cl_nocache;
static rados_ioctx_t io_plain, io_cache, io_nocache;
static const char *pool;
static double seconds = 2;

static __attribute__((noreturn)) void die(const char *what, int r)
{
	compare_die("rados-compare", what, r);
}

static void cl_connect(rados_t *cl, rados_ioctx_t *io, const char *conf,
		    const char *cache)
{
	int r = rados_create(cl, "admin");
	if (!r)
		r = rados_conf_read_file(*cl, conf);
	if (!r)
		r = rados_conf_set(*cl, "rados_osd_op_timeout", "60");
	if (!r && cache) {
		r = rados_conf_set(*cl, "rbd_cache", cache);
		if (!r && !strcmp(cache, "true"))
			r = rados_conf_set(*cl, "rbd_cache_policy", "writeback");
	}
	if (!r)
		r = rados_connect(*cl);
	if (!r)
		r = rados_ioctx_create(*cl, pool, io);
	if (r)
		die("connect", r);
}

/* ---- contenders ------------------------------------------------------- */

enum kind { LIB, RBD_CACHE, RBD_NOCACHE, RAW, NKIND };
static const char *const kind_name[NKIND] = {
	"library (RADOS engine)", "librbd + ObjectCacher (writeback)",
	"librbd, cache off", "raw librados"};

/* One open target: a mapping over a RADOS engine, an rbd image, or a
 * raw object name. */
struct target {
	enum kind k;
	struct folio_engine *e;
	struct folio_mapping *m;
	rbd_image_t img;
	char name[64];
};

static void target_open(struct target *t, enum kind k, const char *name)
{
	memset(t, 0, sizeof(*t));
	t->k = k;
	snprintf(t->name, sizeof(t->name), "%s", name);
	int r = 0;
	if (k == LIB) {
		struct folio_rados_opts o = {.sz = sizeof(o),
					     .cluster = cl_plain,
					     .pool = pool, .prefix = name};
		r = folio_engine_rados(&t->e, &o);
		uint64_t size = 0;
		if (!r)
			r = folio_engine_rados_size(t->e, &size);
		struct folio_mapping_opts mo = {.sz = sizeof(mo),
						.engine = t->e, .size = size};
		if (!r)
			r = folio_mapping_new(&t->m, &mo);
		if (!r && size < REGION)
			r = folio_mapping_truncate(t->m, REGION);
	} else if (k == RBD_CACHE || k == RBD_NOCACHE) {
		rados_ioctx_t io = k == RBD_CACHE ? io_cache : io_nocache;
		int order = 22;
		r = rbd_create(io, name, REGION, &order);
		if (r == -EEXIST)
			r = 0;
		if (!r)
			r = rbd_open(io, name, &t->img, NULL);
	}
	if (r)
		die(kind_name[k], r);
}

static void target_close(struct target *t)
{
	if (t->m) {
		folio_errseq_t cur = folio_mapping_err_cursor(t->m);
		int r = folio_mapping_sync(t->m, &cur);
		if (!r)
			r = folio_mapping_free(t->m);
		if (!r)
			r = folio_engine_free(t->e);
		if (r)
			die("library close", r);
	}
	if (t->img)
		rbd_close(t->img);
}

/* Remove what a target stored, so repeated runs do not fill the OSD. */
static void target_remove(enum kind k, const char *name)
{
	char obj[96];
	if (k == RBD_CACHE || k == RBD_NOCACHE) {
		rbd_remove(k == RBD_CACHE ? io_cache : io_nocache, name);
		return;
	}
	for (uint64_t i = 0; i < REGION >> 22; i++) {
		snprintf(obj, sizeof(obj), k == LIB ? "%s.%016llx" : "%s.%llx",
			 name, (unsigned long long)i);
		rados_remove(io_plain, obj);
	}
	rados_remove(io_plain, name); /* the library's header object */
}

static void twrite(struct target *t, const char *buf, uint64_t pos, bool sync)
{
	int r = 0;
	switch (t->k) {
	case LIB: {
		ssize_t n = folio_mapping_write(t->m, buf, BS, pos);
		r = n == BS ? 0 : (int)(n < 0 ? n : -EIO);
		if (!r && sync)
			r = folio_mapping_sync(t->m, NULL);
		break;
	}
	case RBD_CACHE:
	case RBD_NOCACHE: {
		ssize_t n = rbd_write(t->img, pos, BS, buf);
		r = n == BS ? 0 : (int)(n < 0 ? n : -EIO);
		if (!r && sync)
			r = rbd_flush(t->img);
		break;
	}
	default: {
		/* Striped like the others (4 MiB objects), written as RADOS
		 * acknowledges: durable on return. */
		char obj[96];
		snprintf(obj, sizeof(obj), "%s.%llx", t->name,
			 (unsigned long long)(pos >> 22));
		rados_completion_t c;
		r = rados_aio_create_completion2(NULL, NULL, &c);
		if (!r)
			r = rados_aio_write(io_plain, obj, c, buf, BS,
					    pos & ((1u << 22) - 1));
		if (!r) {
			rados_aio_wait_for_complete(c);
			r = rados_aio_get_return_value(c);
		}
		rados_aio_release(c);
	}
	}
	if (r)
		die("write", r);
}

static void tread(struct target *t, char *buf, uint64_t pos, size_t len)
{
	ssize_t n;
	if (t->k == LIB)
		n = folio_mapping_read(t->m, buf, len, pos);
	else
		n = rbd_read(t->img, pos, len, buf);
	if (n != (ssize_t)len)
		die("read", n < 0 ? (int)n : -EIO);
}

static void fill_region(struct target *t)
{
	static char buf[BS];
	memset(buf, 0x5a, sizeof(buf));
	if (t->k == RAW) {
		for (uint64_t at = 0; at < REGION; at += 1u << 22) {
			char obj[96];
			snprintf(obj, sizeof(obj), "%s.%llx", t->name,
				 (unsigned long long)(at >> 22));
			char *big = calloc(1, 1u << 22);
			int r = rados_write_full(io_plain, obj, big, 1u << 22);
			free(big);
			if (r)
				die("fill", r);
		}
		return;
	}
	char *big = malloc(SEQ_CALL);
	memset(big, 0x5a, SEQ_CALL);
	for (uint64_t at = 0; at < REGION; at += SEQ_CALL) {
		if (t->k == LIB) {
			if (folio_mapping_write(t->m, big, SEQ_CALL, at) !=
			    SEQ_CALL)
				die("fill", -EIO);
		} else if (rbd_write(t->img, at, SEQ_CALL, big) != SEQ_CALL) {
			die("fill", -EIO);
		}
	}
	free(big);
	if (t->k == LIB) {
		int r = folio_mapping_sync(t->m, NULL);
		if (r)
			die("fill sync", r);
		/* Drop the cache: later reads come from the cluster. */
		folio_mapping_invalidate(t->m, 0, 0, 0);
	} else {
		rbd_flush(t->img);
	}
}

/* ---- workloads -------------------------------------------------------- */

static double run_randwrite(struct target *t, uint64_t seed)
{
	char buf[BS];
	memset(buf, (int)seed, sizeof(buf));
	double t0 = compare_now(), t1;
	uint64_t n = 0;
	do {
		for (int i = 0; i < 16; i++, n++)
			twrite(t, buf, (compare_rand(&seed) % (REGION / BS)) * BS, true);
	} while ((t1 = compare_now()) - t0 < seconds);
	return (double)n / (t1 - t0);
}

static double run_randread(struct target *t, uint64_t seed)
{
	char buf[BS];
	double t0 = compare_now(), t1;
	uint64_t n = 0;
	do {
		for (int i = 0; i < 64; i++, n++)
			tread(t, buf, (compare_rand(&seed) % (REGION / BS)) * BS, BS);
	} while ((t1 = compare_now()) - t0 < seconds);
	return (double)n / (t1 - t0);
}

/* MiB/s of one pass over the region. */
static double run_seqread(struct target *t)
{
	char *buf = malloc(SEQ_CALL);
	double t0 = compare_now();
	for (uint64_t at = 0; at < REGION; at += SEQ_CALL)
		tread(t, buf, at, SEQ_CALL);
	double s = compare_now() - t0;
	free(buf);
	return (double)REGION / (1 << 20) / s;
}

struct writer {
	struct target *t;
	uint64_t seed;
	double stop;
	uint64_t n;
};

static void *writer_fn(void *arg)
{
	struct writer *w = arg;
	char buf[BS];
	memset(buf, (int)w->seed, sizeof(buf));
	while (compare_now() < w->stop)
		for (int i = 0; i < 8; i++, w->n++)
			twrite(w->t, buf,
			       (compare_rand(&w->seed) % (REGION / BS)) * BS, true);
	return NULL;
}

static double run_writers(struct target *ts, uint64_t seed)
{
	pthread_t th[WRITERS];
	struct writer w[WRITERS];
	double t0 = compare_now();
	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){&ts[i], seed * 31 + (uint64_t)i + 1,
				       t0 + seconds, 0};
		pthread_create(&th[i], NULL, writer_fn, &w[i]);
	}
	uint64_t n = 0;
	for (int i = 0; i < WRITERS; i++) {
		pthread_join(th[i], NULL);
		n += w[i].n;
	}
	return (double)n / (compare_now() - t0);
}

/* ---- rounds ----------------------------------------------------------- */

struct series {
	double v[MAXR];
	int n;
};

static double median(const struct series *s)
{
	return compare_median(s->v, s->n);
}

static void report(const char *wl, const char *unit, enum kind k,
		   struct series *s)
{
	double lo = s->v[0], hi = s->v[0];
	for (int i = 1; i < s->n; i++) {
		lo = s->v[i] < lo ? s->v[i] : lo;
		hi = s->v[i] > hi ? s->v[i] : hi;
	}
	printf("%-15s %-34s %10.0f %s  (min %.0f, max %.0f, %d rounds)\n", wl,
	       kind_name[k], median(s), unit, lo, hi, s->n);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s CONF POOL [ROUNDS [SECONDS]]\n",
			argv[0]);
		return 2;
	}
	pool = argv[2];
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	seconds = argc > 4 ? atof(argv[4]) : 2;
	if (rounds < 1 || rounds > MAXR || seconds <= 0)
		return 2;
	cl_connect(&cl_plain, &io_plain, argv[1], NULL);
	cl_connect(&cl_cache, &io_cache, argv[1], "true");
	cl_connect(&cl_nocache, &io_nocache, argv[1], "false");
	char tag[32];
	snprintf(tag, sizeof(tag), "rc%d", (int)getpid());

	/* Long-lived targets for the write and hot-read workloads. */
	struct target tg[NKIND];
	for (int k = 0; k < NKIND; k++) {
		char name[64];
		snprintf(name, sizeof(name), "%s.main.%d", tag, k);
		target_open(&tg[k], (enum kind)k, name);
		fill_region(&tg[k]);
	}
	struct target wt[NKIND][WRITERS];
	for (int k = 0; k < NKIND; k++) {
		if (k == RBD_NOCACHE)
			continue;
		for (int i = 0; i < WRITERS; i++) {
			char name[64];
			snprintf(name, sizeof(name), "%s.w%d.%d", tag, i, k);
			target_open(&wt[k][i], (enum kind)k, name);
		}
	}
	/* Warm the caches for the hot reads. */
	char *buf = malloc(SEQ_CALL);
	for (int k = 0; k < RAW; k++)
		for (uint64_t at = 0; at < REGION; at += SEQ_CALL)
			tread(&tg[k], buf, at, SEQ_CALL);
	free(buf);

	struct series s_rw[NKIND] = {0}, s_rr[NKIND] = {0}, s_sr[NKIND] = {0},
		      s_w8[NKIND] = {0};
	for (int r = 0; r < rounds; r++) {
		fprintf(stderr, "round %d/%d\n", r + 1, rounds);
		/* Each round starts with another contender, so none always
		 * follows the same one. */
		for (int j = 0; j < NKIND; j++) {
			int k = compare_turn(j, r, NKIND);
			s_rw[k].v[s_rw[k].n++] =
				run_randwrite(&tg[k], (uint64_t)r * 7 + 1);
		}
		for (int j = 0; j < RAW; j++) {
			int k = compare_turn(j, r, RAW);
			s_rr[k].v[s_rr[k].n++] =
				run_randread(&tg[k], (uint64_t)r * 7 + 3);
		}
		for (int j = 0; j < RAW; j++) {
			int k = compare_turn(j, r, RAW);
			struct target cold;
			char name[64];
			snprintf(name, sizeof(name), "%s.main.%d", tag, k);
			target_open(&cold, (enum kind)k, name);
			s_sr[k].v[s_sr[k].n++] = run_seqread(&cold);
			target_close(&cold);
		}
		for (int j = 0; j < NKIND; j++) {
			int k = compare_turn(j, r, NKIND);
			if (k != RBD_NOCACHE)
				s_w8[k].v[s_w8[k].n++] =
					run_writers(wt[k], (uint64_t)r + 5);
		}
	}
	printf("workload        contender                          median\n");
	for (int k = 0; k < NKIND; k++)
		report("randwrite-sync", "ops/s", (enum kind)k, &s_rw[k]);
	for (int k = 0; k < RAW; k++)
		report("randread-hot", "ops/s", (enum kind)k, &s_rr[k]);
	for (int k = 0; k < RAW; k++)
		report("seqread-cold", "MiB/s", (enum kind)k, &s_sr[k]);
	for (int k = 0; k < NKIND; k++)
		if (k != RBD_NOCACHE)
			report("writers-8", "ops/s", (enum kind)k, &s_w8[k]);
	printf("\nratios (medians):\n");
	printf("  randwrite-sync  library / librbd+ObjectCacher  %.2fx (target >= 1.5)\n",
	       median(&s_rw[LIB]) / median(&s_rw[RBD_CACHE]));
	printf("  randwrite-sync  library / librbd no cache      %.2fx\n",
	       median(&s_rw[LIB]) / median(&s_rw[RBD_NOCACHE]));
	printf("  randwrite-sync  library / raw rados_aio_write  %.2fx\n",
	       median(&s_rw[LIB]) / median(&s_rw[RAW]));
	printf("  randread-hot    library / librbd+ObjectCacher  %.1fx (target >= 10)\n",
	       median(&s_rr[LIB]) / median(&s_rr[RBD_CACHE]));
	printf("  seqread-cold    library / librbd+ObjectCacher  %.2fx\n",
	       median(&s_sr[LIB]) / median(&s_sr[RBD_CACHE]));
	printf("  writers-8       library / raw rados_aio_write  %.2fx (target >= 0.9)\n",
	       median(&s_w8[LIB]) / median(&s_w8[RAW]));
	printf("  writers-8       library / librbd+ObjectCacher  %.2fx\n",
	       median(&s_w8[LIB]) / median(&s_w8[RBD_CACHE]));

	for (int k = 0; k < NKIND; k++) {
		target_close(&tg[k]);
		target_remove((enum kind)k, tg[k].name);
		if (k != RBD_NOCACHE)
			for (int i = 0; i < WRITERS; i++) {
				target_close(&wt[k][i]);
				target_remove((enum kind)k, wt[k][i].name);
			}
	}
	rados_ioctx_destroy(io_plain);
	rados_ioctx_destroy(io_cache);
	rados_ioctx_destroy(io_nocache);
	rados_shutdown(cl_plain);
	rados_shutdown(cl_cache);
	rados_shutdown(cl_nocache);
	return 0;
}
