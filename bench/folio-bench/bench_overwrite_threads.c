/* SPDX-License-Identifier: MIT */
/*
 * overwrite-threads: how the buffered-write path scales with threads that
 * never touch the same folio. Threads overwrite disjoint, folio-aligned
 * ranges of one cache-hot mapping (mem engine, no sync in the loop), so
 * whatever stops the scaling is shared state in the mapping itself (its
 * locks, the index, the statistics counters), not data contention.
 *
 * The same copies at the same random offsets into a plain array of the
 * same size (memcpy) run beside it, in interleaved rounds: 4 KiB random
 * copies scale with the memory system, not only with the CPUs, so the
 * honest figure is the library's scaling divided by memcpy's. Each thread
 * works on a slice of the same size at every count, so adding threads
 * adds working set the way adding writers does.
 *
 * Memory-bound copies on a shared host scale unevenly from run to run, so
 * a third variant, the same threads each on a mapping of its own (over
 * the same engine, with the same slices), isolates what sharing ONE
 * mapping costs: it does the library's work with the library's memory
 * footprint and shares no mapping state at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static struct bench_list counts; /* empty: 1, 2, 4 ... --jobs */
static uint64_t rounds = 3;
/* Every thread count gives each thread a slice of this size: --size over
 * the largest count. A slice that shrank as threads were added would fit
 * each core's cache better and flatter the copies more than the library's
 * own work, so the ratio would measure caches, not sharing. */
static uint64_t slice;

static struct bench_xopt xopts[] = {
	{.name = "threads", .type = BENCH_X_COUNTS, .var = &counts,
	 .metavar = "LIST",
	 .help = "thread counts to run (default: powers of two up to "
		 "--jobs, and --jobs)"},
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds, .metavar = "N",
	 .help = "interleaved rounds of library and memcpy runs per thread "
		 "count (the median is reported)"},
	{0},
};

struct worker {
	struct folio_mapping *m;
	unsigned char *plain; /* not NULL: memcpy into it instead of m */
	uint64_t base, slots, bs;
	unsigned index;
	atomic_bool *stop;
	uint64_t ops;
	uint64_t cpu_ns; /* the thread's own CPU time in the loop */
	int error;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0xabcd0000u + w->index * 7919u + 1;
	unsigned char *buf = malloc(w->bs);
	if (!buf) {
		w->error = -ENOMEM;
		return NULL;
	}
	memset(buf, (int)(0x30 + w->index), w->bs);
	uint64_t cpu0 = thread_cpu_ns();
	/* A batch between checks of the stop flag keeps its cache line out
	 * of the measured path. At least one, so that a thread scheduled
	 * only after a short run was stopped still counts something. */
	do {
		for (int i = 0; i < 64; i++) {
			uint64_t off = w->base +
				       (bench_rand(&seed) % w->slots) * w->bs;
			if (w->plain) {
				memcpy(w->plain + off, buf, w->bs);
				continue;
			}
			ssize_t r = folio_mapping_write(w->m, buf, w->bs, off);
			if (r != (ssize_t)w->bs) {
				w->error = r < 0 ? (int)r : -EIO;
				free(buf);
				return NULL;
			}
		}
		w->ops += 64;
	} while (!atomic_load_explicit(w->stop, memory_order_relaxed));
	w->cpu_ns = thread_cpu_ns() - cpu0;
	free(buf);
	return NULL;
}

/* A loop that touches no shared memory: how far this machine itself lets
 * n threads scale (vCPUs may share a core, or the host may be busy). */
static void *spin_main(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = w->index + 1, sink = 0;
	do {
		for (int i = 0; i < 4096; i++)
			sink += bench_rand(&seed);
		w->ops += 4096;
	} while (!atomic_load_explicit(w->stop, memory_order_relaxed));
	w->bs = sink; /* keep the loop */
	return NULL;
}

/* Write [from, to) of m once, so that every later overwrite finds its
 * folio cached and uptodate. */
static int warm(struct folio_mapping *m, uint64_t from, uint64_t to)
{
	size_t chunk = MIB;
	char *buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	memset(buf, 'w', chunk);
	int err = 0;
	for (uint64_t at = from; at < to && !err; at += chunk) {
		size_t n = (size_t)(to - at < chunk ? to - at : chunk);
		ssize_t r = folio_mapping_write(m, buf, n, at);
		if (r != (ssize_t)n)
			err = r < 0 ? (int)r : -EIO;
	}
	free(buf);
	return err;
}

static double spin_rate(struct bench_ctx *c, unsigned n)
{
	struct worker *w = calloc(n, sizeof(*w));
	if (!w)
		return 0;
	atomic_bool stop;
	for (unsigned i = 0; i < n; i++)
		w[i] = (struct worker){.index = i, .stop = &stop};
	double t = c->o.runtime / 4 < 0.5 ? c->o.runtime / 4 : 0.5;
	double secs = bench_run_threads("overwrite-threads [CPU loop]", n,
					spin_main, w, sizeof(*w), t, &stop);
	uint64_t ops = 0;
	for (unsigned i = 0; i < n; i++)
		ops += w[i].ops;
	free(w);
	return secs > 0 ? (double)ops / secs : 0;
}

/* One timed run of n threads, thread i over maps[i], or over `plain` when
 * it is not NULL: ops/s in *ops_s. */
static int run_once(struct bench_ctx *c, struct folio_mapping *const *maps,
		    unsigned char *plain, unsigned n, double secs_wanted,
		    double *ops_s, double *ops_cpu_s)
{
	const struct bench_opts *o = &c->o;
	/* Every library run starts from a clean cache so each pays the
	 * same clean-to-dirty transitions. */
	int err = 0;
	for (unsigned i = 0; !plain && i < n && !err; i++)
		if (!i || maps[i] != maps[i - 1])
			err = folio_mapping_sync(maps[i], NULL);
	if (err)
		return err;
	uint64_t span = slice;
	if (span < o->bs) {
		fprintf(stderr, "folio-bench overwrite-threads: --size too "
				"small for %u threads\n",
			n);
		return -EINVAL;
	}
	struct worker *w = calloc(n, sizeof(*w));
	if (!w)
		return -ENOMEM;
	atomic_bool stop;
	for (unsigned i = 0; i < n; i++)
		w[i] = (struct worker){.m = plain ? NULL : maps[i],
				       .plain = plain,
				       .base = i * span,
				       .slots = span / o->bs, .bs = o->bs,
				       .index = i, .stop = &stop};
	char what[64];
	snprintf(what, sizeof(what), "overwrite-threads [%u threads%s]", n,
		 plain ? ", memcpy"
		       : n > 1 && maps[1] != maps[0] ? ", a mapping each" : "");
	double secs = bench_run_threads(what, n, worker_main, w, sizeof(*w),
					secs_wanted, &stop);
	uint64_t ops = 0, cpu = 0;
	for (unsigned i = 0; i < n; i++) {
		if (w[i].error && !err)
			err = w[i].error;
		ops += w[i].ops;
		cpu += w[i].cpu_ns;
	}
	free(w);
	if (secs < 0)
		return -EAGAIN;
	*ops_s = (double)ops / secs;
	*ops_cpu_s = cpu ? (double)ops / ((double)cpu / 1e9) : 0;
	return err;
}

/* Medians over the rounds, per thread count: ops/s of wall time and ops
 * per second of the threads' own CPU time, for one mapping, a mapping per
 * thread and memcpy; and the CPU-only loop. */
struct result {
	double lib, each, plain, lib_cpu, each_cpu, plain_cpu, cpu;
};

enum { ONE, EACH, PLAIN, VARIANTS };

static int measure(struct bench_ctx *c, struct folio_mapping *const *shared,
		   struct folio_mapping *const *each, unsigned char *plain,
		   const struct bench_list *list, struct result *res)
{
	const struct bench_opts *o = &c->o;
	double secs = o->runtime / (double)rounds;
	size_t per = list->n * rounds;
	/* [variant][wall, cpu][count * rounds] */
	double *v = calloc(per * VARIANTS * 2, sizeof(double));
	if (!v)
		return -ENOMEM;
#define AT(var, cpu, i, r) (&v[((var) * 2 + (cpu)) * per + (i) * rounds + (r)])
	int err = 0;
	/* Interleaved: whatever else the machine runs meanwhile spreads
	 * over every kind and every count. */
	for (uint64_t r = 0; r < rounds && !err; r++)
		for (unsigned i = 0; i < list->n && !err; i++) {
			unsigned n = (unsigned)list->v[i];
			for (int var = ONE; var < VARIANTS && !err; var++)
				err = run_once(c, var == ONE ? shared : each,
					       var == PLAIN ? plain : NULL, n,
					       secs, AT(var, 0, i, r),
					       AT(var, 1, i, r));
		}
	for (unsigned i = 0; i < list->n && !err; i++) {
		unsigned n = (unsigned)list->v[i];
		res[i].lib = bench_median(AT(ONE, 0, i, 0), rounds);
		res[i].each = bench_median(AT(EACH, 0, i, 0), rounds);
		res[i].plain = bench_median(AT(PLAIN, 0, i, 0), rounds);
		res[i].lib_cpu = bench_median(AT(ONE, 1, i, 0), rounds);
		res[i].each_cpu = bench_median(AT(EACH, 1, i, 0), rounds);
		res[i].plain_cpu = bench_median(AT(PLAIN, 1, i, 0), rounds);
#undef AT
		res[i].cpu = spin_rate(c, n);
		char name[32];
		snprintf(name, sizeof(name), "%u threads", n);
		struct bench_variant *bv = bench_variant(c, name);
		bench_num(bv, "threads", n);
		bench_num(bv, "rounds", (double)rounds);
		bench_num(bv, "seconds_per_round", secs);
		bench_num(bv, "ops_per_s", res[i].lib);
		bench_num(bv, "ops_per_s_per_thread", res[i].lib / n);
		bench_num(bv, "mb_per_s", res[i].lib * (double)o->bs / 1e6);
		bench_num(bv, "mapping_each_ops_per_s", res[i].each);
		bench_num(bv, "memcpy_ops_per_s", res[i].plain);
		bench_num(bv, "ops_per_cpu_s", res[i].lib_cpu);
		bench_num(bv, "mapping_each_ops_per_cpu_s", res[i].each_cpu);
		bench_num(bv, "memcpy_ops_per_cpu_s", res[i].plain_cpu);
		bench_num(bv, "cpu_loop_per_s", res[i].cpu);
	}
	free(v);
	return err;
}

/* One row per thread count of ops/s `v`, each compared with the first;
 * the last one carries `last_flags`. */
static void series_rows(struct bench_ctx *c, const struct bench_list *list,
			const char *base, const char *suffix, const double *v,
			unsigned last_flags)
{
	for (unsigned i = 0; i < list->n; i++) {
		char fig[64];
		snprintf(fig, sizeof(fig), "%llu thread%s%s",
			 (unsigned long long)list->v[i],
			 list->v[i] == 1 ? "" : "s", suffix);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = v[i],
				     .unit = "ops/s", .cmp = i ? base : NULL,
				     .ratio = i ? v[i] / v[0] : 0,
				     .flags = i + 1 == list->n ? last_flags
							       : 0});
	}
}

/* Per thread count past the first: the speedup of `lib` over the first
 * count divided by that of `ref` (named `ref_name`); the last row carries
 * `last_flags`. */
static void scaling_rows(struct bench_ctx *c, const struct bench_list *list,
			 const char *what, const double *lib,
			 const double *ref, const char *ref_name,
			 unsigned last_flags)
{
	for (unsigned i = 1; i < list->n; i++) {
		char fig[64];
		snprintf(fig, sizeof(fig), "%llu threads: %s",
			 (unsigned long long)list->v[i], what);
		double lib_x = lib[i] / lib[0], ref_x = ref[i] / ref[0];
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = lib_x / ref_x,
				     .unit = "x", .cmp = ref_name,
				     .flags = i + 1 == list->n ? last_flags
							       : 0});
	}
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	struct bench_list list = counts;
	if (!list.n) {
		for (unsigned t = 1; t <= o->jobs && list.n < BENCH_LIST_MAX;
		     t *= 2)
			list.v[list.n++] = t;
		if (list.v[list.n - 1] != o->jobs && list.n < BENCH_LIST_MAX)
			list.v[list.n++] = o->jobs;
	}
	for (unsigned i = 0; i < list.n; i++)
		if (list.v[i] > 1024) {
			fprintf(stderr, "folio-bench overwrite-threads: at "
					"most 1024 threads\n");
			return 2;
		}
	if (!rounds || rounds > 1000) {
		fprintf(stderr, "folio-bench overwrite-threads: --rounds must "
				"be 1..1000\n");
		return 2;
	}
	if (o->bs > o->folio_size || o->bs % o->block_size) {
		fprintf(stderr, "folio-bench overwrite-threads: --bs must be "
				"a multiple of --block-size and at most "
				"--folio-size\n");
		return 2;
	}
	uint64_t most = 1;
	for (unsigned i = 0; i < list.n; i++)
		if (list.v[i] > most)
			most = list.v[i];
	slice = o->size / most / o->folio_size * o->folio_size;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	char s1[32], s2[32], s3[32];
	bench_title(c, "%s random overwrites of disjoint ranges of one "
		       "cache-hot %s mapping, %s folios, %s engine, no sync",
		    bench_fmt_size(s1, sizeof(s1), o->bs),
		    bench_fmt_size(s2, sizeof(s2), o->size),
		    bench_fmt_size(s3, sizeof(s3), o->folio_size),
		    bench_engine_name(o->engine));

	struct bench_engine be;
	int fd = -1;
	if (o->engine != BENCH_ENGINE_MEM && (fd = bench_tmpfile(o->dir)) < 0)
		return 1;
	int err = bench_engine_open(c, &be, o->engine, fd, o->size);
	if (err) {
		if (fd >= 0)
			close(fd);
		return 1;
	}
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = o->block_size,
		.max_folio_size = o->folio_size,
		.flags = o->tracking == BENCH_TRACK_FOLIO
				 ? FOLIO_MAPPING_FOLIO_DIRTY : 0,
		.engine = be.engine,
	};
	/* shared[i] = the one mapping for every thread; each[i] = thread
	 * i's own (each[0] is the shared one: one thread shares nothing),
	 * warmed over thread i's slice only. */
	struct folio_mapping **shared = calloc(most * 2, sizeof(*shared));
	struct folio_mapping **each = shared ? shared + most : NULL;
	if (!err && !shared)
		err = -ENOMEM;
	if (!err)
		err = folio_mapping_new(&shared[0], &mo);
	if (!err)
		err = warm(shared[0], 0, o->size);
	for (uint64_t i = 0; !err && i < most; i++) {
		shared[i] = each[0] = shared[0];
		if (i && !(err = folio_mapping_new(&each[i], &mo)))
			err = warm(each[i], i * slice, (i + 1) * slice);
	}
	struct result res[BENCH_LIST_MAX] = {{0}};
	unsigned char *plain = NULL;
	if (!err && !(plain = malloc(o->size)))
		err = -ENOMEM;
	if (!err) {
		memset(plain, 'w', o->size); /* fault it in, like warm() */
		err = measure(c, shared, each, plain, &list, res);
	}
	free(plain);
	for (uint64_t i = 0; each && i < most; i++) {
		if (!each[i])
			continue;
		int s = folio_mapping_sync(each[i], NULL);
		int f = folio_mapping_free(each[i]);
		if (!err)
			err = s ? s : f;
	}
	free(shared);
	bench_engine_close(&be);
	if (fd >= 0)
		close(fd);
	if (err) {
		fprintf(stderr, "folio-bench overwrite-threads: %s\n",
			strerror(-err));
		return 1;
	}
	bench_param_num(c, "rounds", (double)rounds);
	char base[32];
	snprintf(base, sizeof(base), "%llu thread%s",
		 (unsigned long long)list.v[0], list.v[0] == 1 ? "" : "s");
	double lib[BENCH_LIST_MAX], each_v[BENCH_LIST_MAX];
	double plain_v[BENCH_LIST_MAX], lib_c[BENCH_LIST_MAX];
	double each_c[BENCH_LIST_MAX], plain_c[BENCH_LIST_MAX];
	for (unsigned i = 0; i < list.n; i++) {
		lib[i] = res[i].lib;
		each_v[i] = res[i].each;
		plain_v[i] = res[i].plain;
		lib_c[i] = res[i].lib_cpu;
		each_c[i] = res[i].each_cpu;
		plain_c[i] = res[i].plain_cpu;
	}
	series_rows(c, &list, base, "", lib, BENCH_ROW_HEADLINE);
	series_rows(c, &list, base, ": a mapping each", each_v, 0);
	series_rows(c, &list, base, ": memcpy", plain_v, 0);
	scaling_rows(c, &list, "lib / memcpy scaling", lib, plain_v, "memcpy",
		     BENCH_ROW_HEADLINE);
	scaling_rows(c, &list, "same, per CPU second", lib_c, plain_c,
		     "memcpy", 0);
	scaling_rows(c, &list, "one mapping / a mapping each", lib, each_v,
		     "mapping each", BENCH_ROW_HEADLINE);
	scaling_rows(c, &list, "one / each, per CPU second", lib_c, each_c,
		     "mapping each", 0);
	for (unsigned i = 1; i < list.n; i++) {
		char fig[64];
		snprintf(fig, sizeof(fig), "%llu threads: CPU-only loop",
			 (unsigned long long)list.v[i]);
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = res[i].cpu / 1e6,
				     .unit = "M iter/s", .cmp = base,
				     .ratio = res[0].cpu > 0
						      ? res[i].cpu / res[0].cpu
						      : 0});
	}
	bench_note(c, "ratio = speedup over %s; median of %llu interleaved "
		      "rounds; memcpy = the same copies into a plain %s array; "
		      "each thread overwrites its own %s range; %ld CPUs online",
		   base, (unsigned long long)rounds, s2,
		   bench_fmt_size(s1, sizeof(s1), slice), cpus);
	bench_note(c, "per CPU second: ops per second of the threads' own "
		      "CPU time (what shared lines cost shows there too; a "
		      "busy machine's descheduling does not)");
	return 0;
}

static struct bench_cmd cmd = {
	.name = "overwrite-threads",
	.summary = "4 KiB overwrites from 1..N threads on disjoint ranges of "
		   "one mapping: scaling",
	.exec = run,
	.in_default = true,
	.order = 40,
	.help =
	"Writes the whole --size mapping once (mem engine: no I/O), then for\n"
	"each thread count: syncs (untimed, so every count starts clean),\n"
	"gives each thread its own folio-aligned range of --size divided by\n"
	"the largest thread count (the same range size at every count), and\n"
	"lets each thread overwrite --bs pieces at random offsets of its\n"
	"own range for --runtime seconds. Reports ops/s per thread count and\n"
	"the speedup over the first count. The same copies at the same random\n"
	"offsets into a plain array of --size bytes (memcpy) run interleaved\n"
	"with the library's, --rounds times each (medians; each run takes\n"
	"--runtime / --rounds seconds), and \"lib / memcpy scaling\" divides\n"
	"the library's speedup by memcpy's: 1.0 means the library scales as\n"
	"well as the copies themselves; \"per CPU second\" is the same ratio\n"
	"from ops per second of the threads' own CPU time, which a machine\n"
	"busy with other work disturbs less. The same threads each on a\n"
	"mapping of its own (same engine, same ranges) run interleaved too:\n"
	"\"one mapping / a mapping each\" is what sharing one mapping costs,\n"
	"with the library's own memory footprint on both sides. A loop that\n"
	"shares nothing shows what the machine allows (vCPUs may share a core).",
	.defaults = {.size = 64 * MIB, .bs = 4 * KIB, .jobs = 8, .runtime = 2,
		     .folio_size = 64 * KIB, .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_MEM},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_JOBS | BOPT_RUNTIME |
		BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE | BOPT_ENGINE |
		BOPT_TRACKING | BOPT_DIR,
	.xopts = xopts,
	.quick_runtime = 1,
};
BENCH_REGISTER(cmd)
