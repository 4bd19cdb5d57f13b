/* SPDX-License-Identifier: MIT */
/*
 * pool: several mappings share one pool while a Zipf(0.99) trace of reads
 * and writes runs over a working set several times the budget. The same
 * trace drives an LRU and a FIFO cache of the same capacity (in items),
 * simulated beside it, so the pool's S3-FIFO hit ratio is compared on
 * identical accesses. Then the pool is emptied and a hot set of half the
 * budget is used a few times, a one-pass scan of ten times the budget
 * goes through another mapping, and the hot set is read again: how much
 * of it still hits is the scan resistance.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static uint64_t budget = 32 * MIB;
static uint64_t nmappings = 4;
static uint64_t nops = 400000;
static uint64_t write_pct = 20;
static uint64_t flushers = 1;
static uint64_t theta_milli = 990;
static const char *mode = "trace";
static const char *const mode_choices[] = {"trace", "writers", "scale",
					   "sweep", NULL};
static uint64_t nwriters = 4;
static uint64_t rounds = 7;
static uint64_t round_ms = 200;
static struct bench_list budgets;
static bool unpooled;

static struct bench_xopt xopts[] = {
	{.name = "budget", .type = BENCH_X_SIZE, .var = &budget,
	 .metavar = "BYTES", .help = "the pool's budget"},
	{.name = "mappings", .type = BENCH_X_UINT, .var = &nmappings,
	 .metavar = "N", .help = "mappings in the pool, each over its own file"},
	{.name = "ops", .type = BENCH_X_UINT, .var = &nops, .metavar = "N",
	 .help = "reads and writes in the trace"},
	{.name = "write-pct", .type = BENCH_X_UINT, .var = &write_pct,
	 .metavar = "P", .help = "percentage of the trace that writes"},
	{.name = "flushers", .type = BENCH_X_UINT, .var = &flushers,
	 .metavar = "N", .help = "the pool's flusher threads"},
	{.name = "theta", .type = BENCH_X_UINT, .var = &theta_milli,
	 .metavar = "MILLI", .help = "Zipf exponent in thousandths"},
	{.name = "mode", .type = BENCH_X_STR, .var = &mode, .metavar = "MODE",
	 .choices = mode_choices,
	 .help = "trace (hit ratios, scan), writers (budget and dirty limit "
		 "under 4 writers), scale (cached hits from 1 and 2 threads vs "
		 "memcpy), sweep (hit ratios against --budgets)"},
	{.name = "writers", .type = BENCH_X_UINT, .var = &nwriters,
	 .metavar = "N", .help = "writers mode: writer threads (1..16)"},
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds, .metavar = "N",
	 .help = "scale mode: interleaved rounds (the median is reported)"},
	{.name = "round-ms", .type = BENCH_X_UINT, .var = &round_ms,
	 .metavar = "MS", .help = "scale mode: each variant's run per round"},
	{.name = "unpooled", .type = BENCH_X_FLAG, .var = &unpooled,
	 .help = "scale mode: the mapping outside any pool (the control)"},
	{.name = "budgets", .type = BENCH_X_SIZES, .var = &budgets,
	 .metavar = "LIST", .help = "sweep mode: the budgets (working set: "
				    "--size, default 8x the largest)"},
	{0},
};

/* ---- the trace ---------------------------------------------------------- */

struct zipf {
	double *cdf;
	uint64_t n;
};

static int zipf_init(struct zipf *z, uint64_t n, double theta)
{
	z->n = n;
	z->cdf = malloc(n * sizeof(*z->cdf));
	if (!z->cdf)
		return -ENOMEM;
	double sum = 0;
	for (uint64_t i = 0; i < n; i++) {
		sum += 1.0 / pow((double)(i + 1), theta);
		z->cdf[i] = sum;
	}
	for (uint64_t i = 0; i < n; i++)
		z->cdf[i] /= sum;
	return 0;
}

/* A rank, 0 the most popular. */
static uint64_t zipf_next(const struct zipf *z, uint64_t *rng)
{
	double u = (double)(bench_rand(rng) >> 11) / (double)(UINT64_C(1) << 53);
	uint64_t lo = 0, hi = z->n - 1;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the simulated caches (keys 0..n-1, capacity in keys) -------------- */

#define NONE UINT32_MAX

struct sim {
	uint32_t *prev, *next; /* LRU list, most recent at head */
	uint32_t *ring;        /* FIFO order */
	unsigned char *in;
	uint64_t cap, count, head, tail, ring_at;
	bool lru;
	uint64_t hits, misses;
};

static int sim_init(struct sim *s, uint64_t n, uint64_t cap, bool lru)
{
	memset(s, 0, sizeof(*s));
	s->cap = cap;
	s->lru = lru;
	s->head = s->tail = NONE;
	s->in = calloc(n, 1);
	if (lru) {
		s->prev = malloc(n * sizeof(uint32_t));
		s->next = malloc(n * sizeof(uint32_t));
	} else {
		s->ring = malloc(cap * sizeof(uint32_t));
	}
	return s->in && (lru ? s->prev && s->next : s->ring != NULL)
		       ? 0
		       : -ENOMEM;
}

static void sim_free(struct sim *s)
{
	free(s->in);
	free(s->prev);
	free(s->next);
	free(s->ring);
}

static void lru_unlink(struct sim *s, uint32_t k)
{
	if (s->prev[k] != NONE)
		s->next[s->prev[k]] = s->next[k];
	else
		s->head = s->next[k];
	if (s->next[k] != NONE)
		s->prev[s->next[k]] = s->prev[k];
	else
		s->tail = s->prev[k];
}

static void lru_push(struct sim *s, uint32_t k)
{
	s->prev[k] = NONE;
	s->next[k] = (uint32_t)s->head;
	if (s->head != NONE)
		s->prev[s->head] = k;
	s->head = k;
	if (s->tail == NONE)
		s->tail = k;
}

static void sim_access(struct sim *s, uint32_t k)
{
	if (s->in[k]) {
		s->hits++;
		if (s->lru) {
			lru_unlink(s, k);
			lru_push(s, k);
		}
		return;
	}
	s->misses++;
	if (s->count == s->cap) {
		uint32_t victim;
		if (s->lru) {
			victim = (uint32_t)s->tail;
			lru_unlink(s, victim);
		} else {
			victim = s->ring[s->ring_at];
		}
		s->in[victim] = 0;
		s->count--;
	}
	if (s->lru) {
		lru_push(s, k);
	} else {
		s->ring[s->ring_at] = k;
		s->ring_at = (s->ring_at + 1) % s->cap;
	}
	s->in[k] = 1;
	s->count++;
}

static double ratio(uint64_t hits, uint64_t misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : 0;
}

/* ---- the pool side ---------------------------------------------------- */

static double rss_mib(void)
{
	return bench_rss_bytes() / (double)MIB;
}

struct world {
	struct folio_pool *p;
	struct bench_engine be[16];
	int fd[16];
	struct folio_mapping *m[16];
	unsigned n;
};

static int world_open(struct bench_ctx *c, struct world *w, uint64_t share)
{
	const struct bench_opts *o = &c->o;
	memset(w, 0, sizeof(*w));
	for (unsigned i = 0; i < 16; i++)
		w->fd[i] = -1;
	struct folio_pool_opts po = {.sz = sizeof(po), .budget = budget,
				     .flusher_threads = (unsigned)flushers};
	int err = folio_pool_new(&w->p, &po);
	if (err) {
		fprintf(stderr, "folio-bench pool: folio_pool_new: %s\n",
			strerror(-err));
		return err;
	}
	for (unsigned i = 0; i < nmappings && !err; i++) {
		if (o->engine != BENCH_ENGINE_MEM) {
			w->fd[i] = bench_tmpfile(o->dir);
			if (w->fd[i] < 0)
				return -EIO;
			err = bench_prefill(w->fd[i], share);
			if (err)
				return err;
		}
		/* Room for the scan phase's growth (mem engine). */
		err = bench_engine_open(c, &w->be[i], o->engine, w->fd[i],
					share + 10 * budget);
		if (err)
			return err;
		struct folio_mapping_opts mo = {
			.sz = sizeof(mo), .block_size = o->block_size,
			.max_folio_size = o->folio_size,
			.size = share, .engine = w->be[i].engine,
			.pool = unpooled ? NULL : w->p};
		err = folio_mapping_new(&w->m[i], &mo);
		if (err) {
			fprintf(stderr, "folio-bench pool: folio_mapping_new: "
					"%s\n", strerror(-err));
			bench_engine_close(&w->be[i]);
			return err;
		}
		w->n++;
	}
	return err;
}

static int world_close(struct world *w)
{
	int err = 0;
	for (unsigned i = 0; i < w->n; i++) {
		int r = folio_mapping_sync(w->m[i], NULL);
		if (!r)
			r = folio_mapping_free(w->m[i]);
		if (r && !err)
			err = r;
		bench_engine_close(&w->be[i]);
	}
	for (unsigned i = 0; i < 16; i++)
		if (w->fd[i] >= 0)
			close(w->fd[i]);
	if (w->p) {
		int r = folio_pool_free(w->p);
		if (r && !err)
			err = r;
	}
	return err;
}

static struct folio_pool_stats stats(struct folio_pool *p)
{
	struct folio_pool_stats st = {.sz = sizeof(st)};
	folio_pool_stats(p, &st);
	return st;
}

struct trace_result {
	double pool_hit, lru_hit, fifo_hit, ops_per_s;
	double rss_max, rss_end, cached_max_mib;
	struct folio_pool_stats st;
};

static int run_trace(struct bench_ctx *c, struct world *w, uint64_t keys,
		     struct trace_result *res)
{
	const struct bench_opts *o = &c->o;
	uint64_t item = o->bs, cap = budget / item;
	struct zipf z;
	struct sim lru, fifo;
	uint32_t *perm = malloc(keys * sizeof(*perm));
	char *buf = malloc(item);
	int err = perm && buf ? zipf_init(&z, keys, (double)theta_milli / 1e3)
			      : -ENOMEM;
	if (!err)
		err = sim_init(&lru, keys, cap, true);
	if (!err)
		err = sim_init(&fifo, keys, cap, false);
	if (err) {
		free(perm);
		free(buf);
		return err;
	}
	/* Popularity spread over the mappings and positions at random. */
	uint64_t rng = 0x5eed;
	for (uint64_t i = 0; i < keys; i++)
		perm[i] = (uint32_t)i;
	for (uint64_t i = keys - 1; i > 0; i--) {
		uint64_t j = bench_rand(&rng) % (i + 1);
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	memset(buf, 0x5a, item);
	struct folio_pool_stats before = stats(w->p);
	res->rss_max = 0;
	uint64_t cached_max = 0, t0 = bench_now_ns();
	for (uint64_t i = 0; i < nops && !err; i++) {
		uint32_t key = perm[zipf_next(&z, &rng)];
		struct folio_mapping *m = w->m[key % w->n];
		uint64_t pos = (uint64_t)(key / w->n) * item;
		ssize_t r = bench_rand(&rng) % 100 < write_pct
				    ? folio_mapping_write(m, buf, item, pos)
				    : folio_mapping_read(m, buf, item, pos);
		if (r != (ssize_t)item)
			err = r < 0 ? (int)r : -EIO;
		sim_access(&lru, key);
		sim_access(&fifo, key);
		if (!(i & 4095)) {
			struct folio_pool_stats st = stats(w->p);
			cached_max = MAX(cached_max, st.cached_bytes);
			res->rss_max = MAX(res->rss_max, rss_mib());
			bench_progress("pool: trace %llu/%llu",
				       (unsigned long long)i,
				       (unsigned long long)nops);
		}
	}
	bench_progress_done();
	double secs = (double)(bench_now_ns() - t0) / 1e9;
	struct folio_pool_stats st = stats(w->p);
	res->st = st;
	res->pool_hit = ratio(st.hits - before.hits, st.misses - before.misses);
	res->lru_hit = ratio(lru.hits, lru.misses);
	res->fifo_hit = ratio(fifo.hits, fifo.misses);
	res->ops_per_s = (double)nops / secs;
	res->rss_end = rss_mib();
	res->cached_max_mib = (double)MAX(cached_max, st.cached_bytes) /
			      (double)MIB;
	sim_free(&lru);
	sim_free(&fifo);
	free(z.cdf);
	free(perm);
	free(buf);
	return err;
}

/* Hot set of half the budget in mapping 0, a scan of ten budgets through
 * mapping 1, the hot set again: the share of it that still hits. */
static int run_scan(struct bench_ctx *c, struct world *w, uint64_t share,
		    double *kept)
{
	const struct bench_opts *o = &c->o;
	uint64_t item = o->bs, hot = budget / 2 / item;
	char *buf = malloc(item);
	if (!buf)
		return -ENOMEM;
	int err = 0;
	for (unsigned i = 0; i < w->n && !err; i++)
		err = folio_mapping_sync(w->m[i], NULL);
	if (!err && folio_pool_shrink(w->p, UINT64_MAX) < 0)
		err = -EIO;
	/* Interleaved rounds: each access of a hot item is a lookup of a
	 * folio other than the thread's last one. */
	for (int round = 0; round < 4 && !err; round++)
		for (uint64_t k = 0; k < hot && !err; k++)
			if (folio_mapping_read(w->m[0], buf, item, k * item) !=
			    (ssize_t)item)
				err = -EIO;
	/* One pass over new ground: the scanned mapping grows (a hole in
	 * its file) by ten budgets and is read through once. */
	uint64_t scan = 10 * budget;
	struct folio_mapping *sm = w->m[1 % w->n];
	if (!err)
		err = folio_mapping_truncate(sm, share + scan);
	for (uint64_t at = share; at < share + scan && !err; at += item)
		if (folio_mapping_read(sm, buf, item, at) != (ssize_t)item)
			err = -EIO;
	struct folio_pool_stats st0 = stats(w->p);
	for (uint64_t k = 0; k < hot && !err; k++)
		if (folio_mapping_read(w->m[0], buf, item, k * item) !=
		    (ssize_t)item)
			err = -EIO;
	struct folio_pool_stats st1 = stats(w->p);
	*kept = ratio(st1.hits - st0.hits, st1.misses - st0.misses);
	free(buf);
	return err;
}

/* The trace's options, and its working set: --size, or 8x the (largest)
 * budget, split over the mappings in whole items. 0, or 2 after a usage
 * message. */
static int trace_geometry(const struct bench_opts *o, uint64_t smallest,
			  uint64_t largest, uint64_t min_items,
			  uint64_t *share, uint64_t *keys)
{
	if (!nmappings || nmappings > 16 || !nops || write_pct > 100 ||
	    o->bs != o->folio_size || smallest < 4 * o->bs) {
		fprintf(stderr, "folio-bench pool: --mappings 1..16, --ops > 0, "
				"--write-pct <= 100, --bs equal to "
				"--folio-size and budgets of at least four "
				"items, please\n");
		return 2;
	}
	uint64_t size = (o->given & BOPT_SIZE) ? o->size : 8 * largest;
	*share = size / nmappings;
	*share -= *share % o->bs;
	*keys = *share / o->bs * nmappings;
	if (*share < min_items * o->bs || *keys > UINT32_MAX) {
		fprintf(stderr, "folio-bench pool: --size too small or too "
				"large for --mappings and --bs\n");
		return 2;
	}
	return 0;
}

/* ---- writers: the budget and the dirty limit under load ---------------- */

struct writer {
	struct folio_mapping *m;
	uint64_t len, item;
	int err;
};

static void *writer_main(void *arg)
{
	struct writer *wr = arg;
	char *buf = malloc(wr->item);
	if (!buf) {
		wr->err = -ENOMEM;
		return NULL;
	}
	memset(buf, 0xa5, wr->item);
	for (uint64_t at = 0; at < wr->len && !wr->err; at += wr->item) {
		ssize_t r = folio_mapping_write(wr->m, buf, wr->item, at);
		if (r != (ssize_t)wr->item)
			wr->err = r < 0 ? (int)r : -EIO;
	}
	free(buf);
	return NULL;
}

struct sampler {
	struct folio_pool *p;
	atomic_bool stop;
	uint64_t samples, cached_max, dirty_max, dirty_wb_max, tcache_max;
	uint64_t allocator_max, metadata_max;
	double rss_max;
};

static void *sampler_main(void *arg)
{
	struct sampler *sm = arg;
	const struct timespec ms = {.tv_nsec = 1000000};
	while (!atomic_load(&sm->stop)) {
		struct folio_pool_stats st = stats(sm->p);
		sm->cached_max = MAX(sm->cached_max, st.cached_bytes);
		sm->dirty_max = MAX(sm->dirty_max, st.dirty_bytes);
		sm->dirty_wb_max = MAX(sm->dirty_wb_max,
				       st.dirty_bytes + st.writeback_bytes);
		sm->rss_max = MAX(sm->rss_max, rss_mib());
		sm->tcache_max = MAX(sm->tcache_max, st.thread_cache_bytes);
		sm->allocator_max = MAX(sm->allocator_max, st.allocator_bytes);
		sm->metadata_max = MAX(sm->metadata_max, st.metadata_bytes);
		sm->samples++;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

/*
 * What each writer thread costs the process whatever it writes to: its
 * stack, and the malloc arena glibc gives a new thread on its first
 * allocation. Threads that touch as much run and end before RSS is first
 * read; glibc keeps their stacks and arenas for the writers, so the RSS
 * growth measured afterwards is the cache's.
 */
static void *warm_main(void *arg)
{
	size_t item = *(const size_t *)arg;
	volatile char stack[16 * 1024];
	for (size_t i = 0; i < sizeof(stack); i += 512)
		stack[i] = (char)i;
	char *buf = malloc(item);
	if (buf)
		memset(buf, 0xa5, item);
	free(buf);
	return NULL;
}

static void warm_threads(unsigned n, size_t item)
{
	pthread_t tid[17];
	unsigned started = 0;
	for (; started < n && started < 17; started++)
		if (pthread_create(&tid[started], NULL, warm_main, &item))
			break;
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
}

static int run_writers(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	if (!nwriters || nwriters > 16) {
		fprintf(stderr, "folio-bench pool: --writers 1..16, please\n");
		return 2;
	}
	/* One mapping per writer, each over its own file, so every writer
	 * competes for the one budget and the one dirty limit. */
	nmappings = nwriters;
	uint64_t total = (o->given & BOPT_SIZE) ? o->size : 8 * budget;
	uint64_t share = total / nwriters;
	share -= share % o->bs;
	if (!share) {
		fprintf(stderr, "folio-bench pool: --size too small\n");
		return 2;
	}
	struct world w;
	int err = world_open(c, &w, share);
	struct folio_pool_stats st0 = {0}, st1 = {0};
	struct sampler sm = {.p = w.p};
	struct writer wr[16];
	pthread_t tid[16], stid;
	unsigned started = 0;
	bool sampling = false;
	warm_threads(nwriters + 1, o->bs); /* the writers and the sampler */
	double rss0 = rss_mib(), secs = 0;
	if (!err) {
		st0 = stats(w.p);
		atomic_init(&sm.stop, false);
		sampling = !pthread_create(&stid, NULL, sampler_main, &sm);
		if (!sampling)
			err = -EAGAIN;
	}
	uint64_t t0 = bench_now_ns();
	for (; !err && started < nwriters; started++) {
		wr[started] = (struct writer){.m = w.m[started], .len = share,
					      .item = o->bs};
		if (pthread_create(&tid[started], NULL, writer_main,
				   &wr[started])) {
			err = -EAGAIN;
			break;
		}
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(tid[i], NULL);
		if (wr[i].err && !err)
			err = wr[i].err;
	}
	/* The syncs write the rest back: still under the sampler. */
	for (unsigned i = 0; i < w.n && !err; i++)
		err = folio_mapping_sync(w.m[i], NULL);
	secs = (double)(bench_now_ns() - t0) / 1e9;
	if (sampling) {
		atomic_store(&sm.stop, true);
		pthread_join(stid, NULL);
	}
	if (!err)
		st1 = stats(w.p);
	struct devmodel_stats ds = {0};
	if (w.n && w.be[0].dm)
		for (unsigned i = 0; i < w.n; i++) {
			struct devmodel_stats d;
			devmodel_stats(w.be[i].dm, &d);
			ds.requests += d.requests;
			ds.bytes += d.bytes;
		}
	int e2 = world_close(&w);
	if (!err)
		err = e2;
	if (err) {
		fprintf(stderr, "folio-bench pool: %s\n", strerror(-err));
		return 1;
	}

	char s1[32], s2[32], s3[32];
	bench_title(c, "%llu writers push %s (%.0fx the %s budget) through "
		       "%llu mappings, %s writes, %llu flusher(s), %s engine",
		    (unsigned long long)nwriters,
		    bench_fmt_size(s1, sizeof(s1), share * nwriters),
		    (double)(share * nwriters) / (double)budget,
		    bench_fmt_size(s2, sizeof(s2), budget),
		    (unsigned long long)nwriters,
		    bench_fmt_size(s3, sizeof(s3), o->bs),
		    (unsigned long long)flushers, bench_engine_name(o->engine));
	bench_param_str(c, "mode", "writers");
	bench_param_num(c, "budget", (double)budget);
	bench_param_num(c, "writers", (double)nwriters);
	bench_param_num(c, "flushers", (double)flushers);
	bench_param_num(c, "pushed", (double)(share * nwriters));
	double cached_bound = (double)(budget + o->folio_size);
	/* The bound: a writer looks at the limit only every so many
	 * bytes it dirtied, never more than one default request (1 MiB). */
	double dirty_bound = (double)(st1.dirty_limit + nwriters * MIB);
	/* RSS also holds the folio headers, bitmaps and index (metadata),
	 * the free folio memory in the threads' caches and the allocator's
	 * own pages (chunk headers, slab slack), all outside the budget by
	 * design; the threads' own stacks and arenas are in rss0
	 * (warm_threads()). */
	double rss_bound = cached_bound +
			   (double)MAX(sm.metadata_max, st1.metadata_bytes) +
			   (double)sm.tcache_max + (double)sm.allocator_max;
	double rss_growth = sm.rss_max - rss0;
	struct bench_variant *v = bench_variant(c, "writers");
	bench_num(v, "dirty_limit", (double)st1.dirty_limit);
	bench_num(v, "samples", (double)sm.samples);
	bench_num(v, "cached_max", (double)sm.cached_max);
	bench_num(v, "dirty_max", (double)sm.dirty_max);
	bench_num(v, "dirty_writeback_max", (double)sm.dirty_wb_max);
	bench_num(v, "rss_before_mib", rss0);
	bench_num(v, "rss_max_mib", sm.rss_max);
	bench_num(v, "metadata_bytes", (double)st1.metadata_bytes);
	bench_num(v, "thread_cache_max", (double)sm.tcache_max);
	bench_num(v, "allocator_max", (double)sm.allocator_max);
	bench_num(v, "throttle_waits",
		  (double)(st1.throttle_waits - st0.throttle_waits));
	bench_num(v, "throttle_ms",
		  (double)(st1.throttle_ns - st0.throttle_ns) / 1e6);
	bench_num(v, "memory_waits",
		  (double)(st1.memory_waits - st0.memory_waits));
	bench_num(v, "memory_wait_ms",
		  (double)(st1.memory_wait_ns - st0.memory_wait_ns) / 1e6);
	bench_num(v, "reclaimed_bytes",
		  (double)(st1.reclaimed_bytes - st0.reclaimed_bytes));
	bench_num(v, "flusher_bytes",
		  (double)(st1.flusher_bytes - st0.flusher_bytes));
	bench_num(v, "mb_per_s", (double)(share * nwriters) / secs / 1e6);
	bench_row(c, &(struct bench_row){
			     .figure = "pool cached, max sampled",
			     .value = (double)sm.cached_max / (double)MIB,
			     .unit = "MiB", .cmp = "budget + 1 max folio",
			     .ratio = (double)sm.cached_max / cached_bound,
			     .flags = BENCH_ROW_HEADLINE});
	bench_row(c, &(struct bench_row){
			     .figure = "RSS growth, max sampled",
			     .value = rss_growth, .unit = "MiB",
			     .cmp = "that + metadata + caches + allocator",
			     .ratio = rss_growth * (double)MIB / rss_bound});
	bench_row(c, &(struct bench_row){
			     .figure = "dirty, max sampled",
			     .value = (double)sm.dirty_max / (double)MIB,
			     .unit = "MiB", .cmp = "limit + 1 MiB/writer",
			     .ratio = (double)sm.dirty_max / dirty_bound});
	bench_row(c, &(struct bench_row){
			     .figure = "dirty + writeback, max sampled",
			     .value = (double)sm.dirty_wb_max / (double)MIB,
			     .unit = "MiB", .cmp = "limit + 1 MiB/writer",
			     .ratio = (double)sm.dirty_wb_max / dirty_bound});
	bench_row(c, &(struct bench_row){
			     .figure = "throttled writes",
			     .value = (double)(st1.throttle_waits -
					       st0.throttle_waits),
			     .unit = ""});
	bench_row(c, &(struct bench_row){
			     .figure = "time throttled (all writers)",
			     .value = (double)(st1.throttle_ns -
					       st0.throttle_ns) / 1e6,
			     .unit = "ms"});
	bench_row(c, &(struct bench_row){
			     .figure = "write throughput (incl. final sync)",
			     .value = (double)(share * nwriters) / secs / 1e6,
			     .unit = "MB/s"});
	bench_note(c, "targets: cached <= budget + 1 folio: %s; RSS growth <= "
		      "that + metadata + thread caches + allocator pages: %s; "
		      "dirty <= limit + 1 MiB per writer: %s (with writeback: "
		      "%s)",
		   (double)sm.cached_max <= cached_bound ? "met" : "NOT met",
		   rss_growth * (double)MIB <= rss_bound ? "met" : "NOT met",
		   (double)sm.dirty_max <= dirty_bound ? "met" : "NOT met",
		   (double)sm.dirty_wb_max <= dirty_bound ? "met" : "NOT met");
	bench_note(c, "dirty peak %.0f KiB over the limit (writers look at it "
		      "every limit/64 = %.0f KiB they dirtied)",
		   ((double)sm.dirty_max - (double)st1.dirty_limit) / KIB,
		   (double)MAX(MIN(st1.dirty_limit / 64, MIB), 4096) / KIB);
	bench_note(c, "%llu samples, about 1 ms apart; RSS %.1f MiB before "
		      "the writers started; device: %llu requests, %.1f MiB",
		   (unsigned long long)sm.samples, rss0,
		   (unsigned long long)ds.requests,
		   (double)ds.bytes / (double)MIB);
	if (o->engine == BENCH_ENGINE_MEM)
		bench_note(c, "RSS includes the mem engine's store");
	return 0;
}

/* ---- scale: cached hits from 1 and 2 threads vs memcpy ---------------- */

struct reader {
	struct folio_mapping *m; /* NULL: memcpy from plain */
	const char *plain;
	uint64_t items, item, rng, ops;
	atomic_bool *stop;
	int err;
	unsigned char sink;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	char *buf = malloc(rd->item);
	if (!buf) {
		rd->err = -ENOMEM;
		return NULL;
	}
	while (!atomic_load_explicit(rd->stop, memory_order_relaxed)) {
		uint64_t pos = bench_rand(&rd->rng) % rd->items * rd->item;
		if (rd->m) {
			ssize_t r = folio_mapping_read(rd->m, buf, rd->item,
						       pos);
			if (r != (ssize_t)rd->item) {
				rd->err = r < 0 ? (int)r : -EIO;
				break;
			}
		} else {
			memcpy(buf, rd->plain + pos, rd->item);
		}
		/* Keeps the copy from being optimised away. */
		rd->sink ^= (unsigned char)buf[rd->ops % rd->item];
		rd->ops++;
	}
	free(buf);
	return NULL;
}

/* Bytes per second of n readers for one round; < 0 on error. */
static double scale_once(struct folio_mapping *m, const char *plain,
			 uint64_t items, uint64_t item, unsigned n,
			 uint64_t seed)
{
	struct reader rd[2];
	atomic_bool stop;
	atomic_init(&stop, false);
	for (unsigned i = 0; i < n; i++)
		rd[i] = (struct reader){.m = m, .plain = plain, .items = items,
					.item = item, .stop = &stop,
					.rng = seed * 2 + i + 1};
	double secs = bench_run_threads(m ? "pool: pooled reads" : "pool: memcpy",
					n, reader_main, rd, sizeof(rd[0]),
					(double)round_ms / 1e3, &stop);
	if (secs <= 0)
		return -1;
	uint64_t ops = 0;
	for (unsigned i = 0; i < n; i++) {
		if (rd[i].err)
			return -1;
		ops += rd[i].ops;
	}
	return (double)(ops * item) / secs;
}

static int run_scale(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	if (!rounds || rounds > 64 || !round_ms) {
		fprintf(stderr, "folio-bench pool: --rounds 1..64 and "
				"--round-ms > 0, please\n");
		return 2;
	}
	nmappings = 1;
	uint64_t hot = budget / 2;
	hot -= hot % o->bs;
	uint64_t items = hot / o->bs;
	struct world w;
	int err = world_open(c, &w, hot);
	char *plain = malloc(hot), *buf = malloc(o->bs);
	if (!err && (!plain || !buf))
		err = -ENOMEM;
	if (!err)
		memset(plain, 0x5a, hot);
	/* Everything in cache before the clock starts: the rounds must
	 * measure hits only. */
	for (uint64_t k = 0; k < items && !err; k++)
		if (folio_mapping_read(w.m[0], buf, o->bs, k * o->bs) !=
		    (ssize_t)o->bs)
			err = -EIO;
	struct folio_pool_stats st0 = {0}, st1 = {0};
	double v[4][64];
	if (!err)
		st0 = stats(w.p);
	/* Variants in a rotating order, so drift and neighbours' noise on a
	 * shared machine fall on all four alike. */
	for (uint64_t r = 0; r < rounds && !err; r++)
		for (unsigned k = 0; k < 4 && !err; k++) {
			unsigned which = (unsigned)((k + r) % 4);
			double bps = scale_once(which < 2 ? w.m[0] : NULL,
						plain, items, o->bs,
						which % 2 + 1, r);
			if (bps < 0)
				err = -EIO;
			v[which][r] = bps;
		}
	if (!err)
		st1 = stats(w.p);
	free(plain);
	free(buf);
	int e2 = world_close(&w);
	if (!err)
		err = e2;
	if (err) {
		fprintf(stderr, "folio-bench pool: %s\n", strerror(-err));
		return 1;
	}
	double med[4];
	for (unsigned k = 0; k < 4; k++)
		med[k] = bench_median(v[k], rounds) / 1e9;
	double lib_x = med[1] / med[0], mem_x = med[3] / med[2];
	char s1[32], s2[32];
	const char *who = unpooled ? "unpooled reads" : "pooled reads";
	char f1[48], f2[48], f3[48];
	snprintf(f1, sizeof(f1), "%s, 1 thread", who);
	snprintf(f2, sizeof(f2), "%s, 2 threads", who);
	snprintf(f3, sizeof(f3), "%s, 2T / 1T", who);
	bench_title(c, "cached %s reads of a %s hot set %s, 1 and 2 "
		       "threads, vs memcpy from a plain buffer; median of %llu "
		       "interleaved rounds of %llu ms",
		    bench_fmt_size(s1, sizeof(s1), o->bs),
		    bench_fmt_size(s2, sizeof(s2), hot),
		    unpooled ? "in a mapping outside any pool" : "in a pool",
		    (unsigned long long)rounds, (unsigned long long)round_ms);
	bench_param_str(c, "mode", "scale");
	bench_param_num(c, "unpooled", unpooled);
	bench_param_num(c, "budget", (double)budget);
	bench_param_num(c, "rounds", (double)rounds);
	bench_param_num(c, "round_ms", (double)round_ms);
	struct bench_variant *bv = bench_variant(c, "scale");
	bench_num(bv, "pool_1t_gbps", med[0]);
	bench_num(bv, "pool_2t_gbps", med[1]);
	bench_num(bv, "memcpy_1t_gbps", med[2]);
	bench_num(bv, "memcpy_2t_gbps", med[3]);
	bench_num(bv, "pool_2t_over_1t", lib_x);
	bench_num(bv, "memcpy_2t_over_1t", mem_x);
	bench_num(bv, "scaling_vs_memcpy", lib_x / mem_x);
	bench_num(bv, "misses_during_rounds", (double)(st1.misses - st0.misses));
	bench_row(c, &(struct bench_row){.figure = f1,
					 .value = med[0], .unit = "GB/s",
					 .cmp = "memcpy, 1 thread",
					 .ratio = med[0] / med[2]});
	bench_row(c, &(struct bench_row){.figure = f2,
					 .value = med[1], .unit = "GB/s",
					 .cmp = "memcpy, 2 threads",
					 .ratio = med[1] / med[3]});
	bench_row(c, &(struct bench_row){.figure = "memcpy, 1 thread",
					 .value = med[2], .unit = "GB/s"});
	bench_row(c, &(struct bench_row){.figure = "memcpy, 2 threads",
					 .value = med[3], .unit = "GB/s"});
	bench_row(c, &(struct bench_row){.figure = f3,
					 .value = lib_x, .unit = "x",
					 .cmp = "memcpy 2T / 1T",
					 .ratio = lib_x / mem_x,
					 .flags = BENCH_ROW_HEADLINE});
	bench_row(c, &(struct bench_row){.figure = "memcpy, 2T / 1T",
					 .value = mem_x, .unit = "x"});
	bench_note(c, "target: scaling >= 90%% of memcpy's: %s",
		   lib_x >= 0.9 * mem_x ? "met" : "NOT met");
	if (!unpooled)
		bench_note(c, "%llu misses during the rounds (0: hits only)",
			   (unsigned long long)(st1.misses - st0.misses));
	return 0;
}

/* ---- sweep: hit ratio against the budget ------------------------------- */

static int run_sweep(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	uint64_t largest = 0, smallest = UINT64_MAX;
	for (unsigned i = 0; i < budgets.n; i++) {
		largest = MAX(largest, budgets.v[i]);
		smallest = MIN(smallest, budgets.v[i]);
	}
	if (!budgets.n) {
		fprintf(stderr, "folio-bench pool: --mode sweep needs "
				"--budgets LIST\n");
		return 2;
	}
	/* One working set for every budget: the trace is the same keys in
	 * the same order, only the capacity changes. */
	uint64_t share, keys;
	if (trace_geometry(o, smallest, largest, 1, &share, &keys))
		return 2;
	char s1[32], s2[32];
	bench_title(c, "hit ratio against the budget: Zipf(%.2f) over %s in %s "
		       "items, %llu ops, %llu%% writes, pool (S3-FIFO) vs LRU "
		       "vs FIFO on the same trace",
		    (double)theta_milli / 1e3,
		    bench_fmt_size(s1, sizeof(s1), keys * o->bs),
		    bench_fmt_size(s2, sizeof(s2), o->bs),
		    (unsigned long long)nops, (unsigned long long)write_pct);
	bench_param_str(c, "mode", "sweep");
	bench_param_num(c, "working_set", (double)(keys * o->bs));
	bench_param_num(c, "ops", (double)nops);
	bench_param_num(c, "theta", (double)theta_milli / 1e3);
	for (unsigned i = 0; i < budgets.n; i++) {
		budget = budgets.v[i];
		struct world w;
		struct trace_result t;
		memset(&t, 0, sizeof(t));
		int err = world_open(c, &w, share);
		if (!err)
			err = run_trace(c, &w, keys, &t);
		int e2 = world_close(&w);
		if (!err)
			err = e2;
		if (err) {
			fprintf(stderr, "folio-bench pool: %s\n",
				strerror(-err));
			return 1;
		}
		char name[64], fig[80];
		bench_fmt_size(s1, sizeof(s1), budget);
		snprintf(name, sizeof(name), "budget-%s", s1);
		struct bench_variant *v = bench_variant(c, name);
		bench_num(v, "budget", (double)budget);
		bench_num(v, "budget_fraction",
			  (double)budget / (double)(keys * o->bs));
		bench_num(v, "hit_ratio_pool", t.pool_hit);
		bench_num(v, "hit_ratio_lru", t.lru_hit);
		bench_num(v, "hit_ratio_fifo", t.fifo_hit);
		snprintf(fig, sizeof(fig), "budget %s: S3-FIFO (LRU %.1f%%, "
			 "FIFO %.1f%%)", s1, 100 * t.lru_hit, 100 * t.fifo_hit);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = 100 * t.pool_hit,
				     .unit = "%", .cmp = "LRU",
				     .ratio = t.pool_hit / t.lru_hit});
	}
	return 0;
}

static int run_trace_mode(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	uint64_t share, keys;
	if (trace_geometry(o, budget, budget, 11, &share, &keys))
		return 2;
	char s1[32], s2[32], s3[32];
	bench_title(c, "%llu mappings in a %s pool, Zipf(%.2f) over %s (%.0fx "
		       "the budget) in %s items, %llu%% writes, %llu flusher(s), "
		       "%s engine",
		    (unsigned long long)nmappings,
		    bench_fmt_size(s1, sizeof(s1), budget),
		    (double)theta_milli / 1e3,
		    bench_fmt_size(s2, sizeof(s2), keys * o->bs),
		    (double)(keys * o->bs) / (double)budget,
		    bench_fmt_size(s3, sizeof(s3), o->bs),
		    (unsigned long long)write_pct,
		    (unsigned long long)flushers, bench_engine_name(o->engine));
	bench_param_num(c, "budget", (double)budget);
	bench_param_num(c, "mappings", (double)nmappings);
	bench_param_num(c, "ops", (double)nops);
	bench_param_num(c, "write_pct", (double)write_pct);
	bench_param_num(c, "flushers", (double)flushers);
	bench_param_num(c, "theta", (double)theta_milli / 1e3);

	double rss0 = rss_mib();
	struct world w;
	struct trace_result t;
	memset(&t, 0, sizeof(t));
	double kept = 0;
	int err = world_open(c, &w, share);
	if (!err)
		err = run_trace(c, &w, keys, &t);
	if (!err)
		err = run_scan(c, &w, share, &kept);
	int e2 = world_close(&w);
	if (!err)
		err = e2;
	if (err) {
		fprintf(stderr, "folio-bench pool: %s\n", strerror(-err));
		return 1;
	}

	struct bench_variant *v = bench_variant(c, "trace");
	bench_num(v, "hit_ratio_pool", t.pool_hit);
	bench_num(v, "hit_ratio_lru", t.lru_hit);
	bench_num(v, "hit_ratio_fifo", t.fifo_hit);
	bench_num(v, "ops_per_s", t.ops_per_s);
	bench_num(v, "rss_start_mib", rss0);
	bench_num(v, "rss_max_mib", t.rss_max);
	bench_num(v, "rss_end_mib", t.rss_end);
	bench_num(v, "cached_max_mib", t.cached_max_mib);
	bench_num(v, "metadata_bytes", (double)t.st.metadata_bytes);
	bench_num(v, "ghost_hits", (double)t.st.ghost_hits);
	bench_num(v, "reclaimed_bytes", (double)t.st.reclaimed_bytes);
	bench_num(v, "throttle_waits", (double)t.st.throttle_waits);
	bench_num(v, "throttle_ms", (double)t.st.throttle_ns / 1e6);
	bench_num(v, "memory_waits", (double)t.st.memory_waits);
	bench_num(v, "flusher_bytes", (double)t.st.flusher_bytes);
	bench_num(v, "hot_set_kept_after_scan", kept);

	bench_row(c, &(struct bench_row){.figure = "hit ratio, pool (S3-FIFO)",
					 .value = 100 * t.pool_hit, .unit = "%",
					 .cmp = "LRU, same trace",
					 .ratio = t.pool_hit / t.lru_hit,
					 .flags = BENCH_ROW_HEADLINE});
	bench_row(c, &(struct bench_row){.figure = "hit ratio, LRU (simulated)",
					 .value = 100 * t.lru_hit, .unit = "%"});
	bench_row(c, &(struct bench_row){.figure = "hit ratio, FIFO (simulated)",
					 .value = 100 * t.fifo_hit,
					 .unit = "%"});
	bench_row(c, &(struct bench_row){
			     .figure = "hot half-budget kept after a 10x scan",
			     .value = 100 * kept, .unit = "%"});
	bench_row(c, &(struct bench_row){.figure = "pool cached, max sampled",
					 .value = t.cached_max_mib,
					 .unit = "MiB", .cmp = "budget",
					 .ratio = t.cached_max_mib * (double)MIB /
						  (double)budget});
	bench_row(c, &(struct bench_row){.figure = "RSS, max sampled",
					 .value = t.rss_max, .unit = "MiB"});
	bench_row(c, &(struct bench_row){.figure = "trace throughput",
					 .value = t.ops_per_s / 1e3,
					 .unit = "kops/s"});
	bench_row(c, &(struct bench_row){.figure = "throttled writes",
					 .value = (double)t.st.throttle_waits,
					 .unit = ""});
	bench_note(c, "targets: hit ratio >= LRU's: %s; hot set kept >= 90%%: "
		      "%s; cached <= budget: %s",
		   t.pool_hit >= t.lru_hit ? "met" : "NOT met",
		   kept >= 0.9 ? "met" : "NOT met",
		   t.cached_max_mib * (double)MIB <= (double)budget
			   ? "met" : "NOT met");
	if (o->engine == BENCH_ENGINE_MEM)
		bench_note(c, "RSS includes the mem engine's store");
	bench_note(c, "RSS was %.1f MiB before the pool was made", rss0);
	return 0;
}

static int run(struct bench_ctx *c)
{
	/* The writers need a slow device for the limits to be tested:
	 * without one, writeback keeps up and nothing waits. */
	if (!strcmp(mode, "writers") && !(c->o.given & BOPT_DEVMODEL) &&
	    devmodel_parse("bw=256M,lat=100", &c->o.dm))
		return 1;
	if (!strcmp(mode, "writers"))
		return run_writers(c);
	if (!strcmp(mode, "scale"))
		return run_scale(c);
	if (!strcmp(mode, "sweep"))
		return run_sweep(c);
	return run_trace_mode(c);
}

static struct bench_cmd cmd = {
	.name = "pool",
	.summary = "several mappings in one pool: Zipf hit ratio against LRU "
		   "and FIFO on the same trace, scan resistance, RSS",
	.exec = run,
	.in_default = false,
	.order = 60,
	.help =
	"Runs --ops reads and writes of one --bs item each (Zipf, --theta)\n"
	"over a working set (--size, default 8x --budget) spread over\n"
	"--mappings files in one pool, and the same trace through an LRU and\n"
	"a FIFO cache of --budget / --bs items simulated beside it. Then it\n"
	"empties the pool, uses a hot set of half the budget four times,\n"
	"scans ten times the budget through another mapping and reports how\n"
	"much of the hot set still hits. RSS is read from /proc/self/statm.\n"
	"--mode writers: --writers threads, one mapping each, write --size\n"
	"(default 8x --budget) in --bs writes through a slow device (the\n"
	"--device-model, default bw=256M,lat=100) while a sampler reads the\n"
	"pool's stats and RSS every millisecond: peaks against the budget\n"
	"and the dirty limit, throttling. --mode scale: a hot set of half the\n"
	"budget read at random from 1 and 2 threads, against memcpy from a\n"
	"plain buffer, median of --rounds interleaved rounds. --mode sweep:\n"
	"the trace once per --budgets entry over one working set.",
	.defaults = {.size = 0, .bs = 4 * KIB, .folio_size = 4 * KIB,
		     .block_size = 4 * KIB, .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE |
		BOPT_ENGINE | BOPT_DIR | BOPT_DEVMODEL,
	.xopts = xopts,
};
BENCH_REGISTER(cmd)
