/* SPDX-License-Identifier: MIT */
/*
 * folio-bench state: the cost of the per-block state calls themselves, in
 * ns per call, on a 64 KiB and a 2 MiB folio with 4 KiB blocks:
 *
 *   a  folio_set_dirty_uptodate() of one 4 KiB block of a folio that is
 *      not yet uptodate (the write fast path: one lock round trip)
 *   b  the same write as two calls, folio_set_uptodate() + folio_set_dirty()
 *   c  a on a folio that is already uptodate (only the dirty bits change)
 *   d  a walk over the whole folio with folio_next_dirty(), 8 dirty runs
 *
 * Public API only. Each measured loop lives in its own non-inlined
 * function (state_loop_a .. state_loop_d) so that callgrind can count
 * exactly its instructions (folio-bench callgrind state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "folio_state.h"

#define STATE_BLOCK 4096u
/* Operations per timed batch: enough that the two clock reads around a
 * batch are noise, few enough that a batch's folios stay in cache. */
#define STATE_BATCH_OPS 4096u
#define STATE_DIRTY_RUNS 8u

struct state_geom {
	const char *name;
	size_t size;
};

static const struct state_geom state_geoms[] = {
	{"64K", (size_t)64 << 10},
	{"2M", (size_t)2 << 20},
};
#define STATE_NGEOMS (sizeof(state_geoms) / sizeof(state_geoms[0]))

struct state_case {
	char id;
	unsigned calls_per_op; /* library calls in one measured op */
	const char *what;
};

static const struct state_case state_cases[] = {
	{'a', 1, "write 4K: set_dirty_uptodate, folio not uptodate"},
	{'b', 2, "write 4K: set_uptodate + set_dirty, folio not uptodate"},
	{'c', 1, "write 4K: set_dirty_uptodate, folio already uptodate"},
	{'d', 1 + STATE_DIRTY_RUNS, "walk: next_dirty over the folio, 8 runs"},
};
#define STATE_NCASES (sizeof(state_cases) / sizeof(state_cases[0]))

/* The folios one case runs over: `k` folios of `n` blocks. */
struct state_set {
	struct folio **f;
	size_t k, n;
};

/* Separate symbols for callgrind: gcc would otherwise fold the identical
 * loops of (a) and (c) into one function (noipa stops that; clang does not
 * fold them and does not know noipa). */
#if defined(__GNUC__) && !defined(__clang__)
#define STATE_LOOP __attribute__((noipa))
#else
#define STATE_LOOP __attribute__((noinline))
#endif

/*
 * How (a) and (b) stay honest: each batch writes every block of every
 * folio of the set exactly once, block by block, so before each call the
 * block it marks is not uptodate and its folio is not fully uptodate (the
 * last block of a folio completes it, as the last write of a sequential
 * fill does). Between batches, outside the timed region, every folio is
 * reset to clean and not uptodate. (c) resets only the dirty bits, so each
 * of its calls dirties a clean block of a fully uptodate folio. The sums
 * of the returned FOLIO_BECAME_* bits are checked after each batch: they
 * prove the calls really made the transitions described.
 */
STATE_LOOP static unsigned long
state_loop_a(const struct state_set *s)
{
	unsigned long acc = 0;
	for (size_t i = 0; i < s->k; i++)
		for (size_t b = 0; b < s->n; b++)
			acc += (unsigned)folio_set_dirty_uptodate(
				s->f[i], b * STATE_BLOCK, STATE_BLOCK);
	return acc;
}

STATE_LOOP static unsigned long
state_loop_b(const struct state_set *s)
{
	unsigned long acc = 0;
	for (size_t i = 0; i < s->k; i++)
		for (size_t b = 0; b < s->n; b++) {
			acc += (unsigned)folio_set_uptodate(
				s->f[i], b * STATE_BLOCK, STATE_BLOCK);
			acc += (unsigned)folio_set_dirty(s->f[i], b * STATE_BLOCK,
							 STATE_BLOCK);
		}
	return acc;
}

STATE_LOOP static unsigned long
state_loop_c(const struct state_set *s)
{
	unsigned long acc = 0;
	for (size_t i = 0; i < s->k; i++)
		for (size_t b = 0; b < s->n; b++)
			acc += (unsigned)folio_set_dirty_uptodate(
				s->f[i], b * STATE_BLOCK, STATE_BLOCK);
	return acc;
}

/* Returns the dirty bytes found; the dirty runs never change. */
STATE_LOOP static unsigned long
state_loop_d(const struct state_set *s)
{
	unsigned long bytes = 0;
	for (size_t i = 0; i < s->k; i++) {
		size_t off = 0;
		ssize_t len;
		while ((len = folio_next_dirty(s->f[i], &off)) > 0) {
			bytes += (unsigned long)len;
			off += (size_t)len;
		}
		if (len < 0)
			return 0;
	}
	return bytes;
}

/* Eight runs spread over the folio, none at its start, so a walk crosses
 * clean words between them on the large folio. */
static int state_mark_runs(struct folio *f, size_t n)
{
	size_t step = n / STATE_DIRTY_RUNS, len = n >= 512 ? n / 64 : 1;
	for (size_t r = 0; r < STATE_DIRTY_RUNS; r++)
		if (folio_set_dirty_uptodate(f, (r * step + step / 2) * STATE_BLOCK,
					     len * STATE_BLOCK) < 0)
			return -1;
	return 0;
}

static size_t state_dirty_bytes(size_t n)
{
	return STATE_DIRTY_RUNS * (n >= 512 ? n / 64 : 1) * STATE_BLOCK;
}

/* Put every folio into the state a batch of case `id` starts from. */
static int state_reset(const struct state_set *s, char id)
{
	size_t size = s->n * STATE_BLOCK;
	for (size_t i = 0; i < s->k; i++) {
		struct folio *f = s->f[i];
		if (id == 'd')
			continue;
		/* Dirty first: a dirty block keeps its uptodate bit. */
		if (folio_clear_dirty(f, 0, size))
			return -1;
		if (id != 'c' && folio_clear_uptodate(f, 0, size))
			return -1;
		if (id == 'c' && folio_set_uptodate(f, 0, size) < 0)
			return -1;
	}
	return 0;
}

/* One batch; its result is checked against state_expect(). */
static unsigned long state_batch(const struct state_set *s, char id)
{
	switch (id) {
	case 'a': return state_loop_a(s);
	case 'b': return state_loop_b(s);
	case 'c': return state_loop_c(s);
	default: return state_loop_d(s);
	}
}

/* What a batch of case `id` must return (see the comment above). */
static unsigned long state_expect(const struct state_set *s, char id)
{
	switch (id) {
	case 'a':
	case 'b':
		return s->k * (FOLIO_BECAME_DIRTY + FOLIO_BECAME_UPTODATE);
	case 'c': return s->k * FOLIO_BECAME_DIRTY;
	default: return s->k * state_dirty_bytes(s->n);
	}
}

/*
 * The timed loops run single-threaded and never sleep, so their cost is
 * the thread's CPU time; unlike wall time it does not count the slices
 * other processes get on a busy machine, which would otherwise decide the
 * "best" repetition. (A system call per batch of 4096 ops is noise.)
 */
static uint64_t state_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct state_result {
	double ns_per_op;
	unsigned long ops_run; /* every op through the loop, untimed too */
};

static int state_measure(const struct state_set *s, const struct state_case *c,
			 unsigned long iters, unsigned reps,
			 struct state_result *res)
{
	/* A walk (d) counts as one op per folio; a write as one per block. */
	unsigned long ops_per_batch = c->id == 'd' ? s->k : s->k * s->n;
	unsigned long want = state_expect(s, c->id);
	unsigned long batches;

	if (state_reset(s, c->id))
		return -1;
	/* Warm-up batch, which also sizes the repetitions: ~20 ms each
	 * (5 repetitions x 2 folio sizes = ~0.2 s per case). */
	uint64_t t0 = state_cpu_ns();
	unsigned long got = state_batch(s, c->id);
	uint64_t dt = state_cpu_ns() - t0;
	res->ops_run = ops_per_batch;
	if (got != want) {
		fprintf(stderr, "state: case %c returned %lu, expected %lu\n",
			c->id, got, want);
		return -1;
	}
	if (iters)
		batches = (iters + ops_per_batch - 1) / ops_per_batch;
	else
		batches = dt ? (unsigned long)(20000000 / dt) : 1000;
	if (!batches)
		batches = 1;

	res->ns_per_op = -1;
	for (unsigned r = 0; r < reps; r++) {
		uint64_t total = 0;
		for (unsigned long i = 0; i < batches; i++) {
			if (state_reset(s, c->id))
				return -1;
			t0 = state_cpu_ns();
			got = state_batch(s, c->id);
			total += state_cpu_ns() - t0;
			if (got != want) {
				fprintf(stderr,
					"state: case %c returned %lu, expected %lu\n",
					c->id, got, want);
				return -1;
			}
		}
		res->ops_run += batches * ops_per_batch;
		double ns = (double)total / (double)(batches * ops_per_batch);
		if (res->ns_per_op < 0 || ns < res->ns_per_op)
			res->ns_per_op = ns;
	}
	return 0;
}

static void state_free_set(struct state_set *s)
{
	for (size_t i = 0; s->f && i < s->k; i++)
		folio_put(s->f[i]);
	free(s->f);
	s->f = NULL;
}

static int state_new_set(struct state_set *s, size_t size, char id)
{
	s->n = size / STATE_BLOCK;
	s->k = s->n >= STATE_BATCH_OPS ? 1 : STATE_BATCH_OPS / s->n;
	s->f = calloc(s->k, sizeof(*s->f));
	if (!s->f)
		return -1;
	for (size_t i = 0; i < s->k; i++) {
		/* Consecutive positions, as the folios of one file would be. */
		if (folio_new(&s->f[i], (uint64_t)i * size, size, STATE_BLOCK) ||
		    (id == 'd' && state_mark_runs(s->f[i], s->n))) {
			state_free_set(s);
			return -1;
		}
	}
	return 0;
}

static void state_usage(FILE *out)
{
	fprintf(out,
		"usage: folio-bench state [--case a|b|c|d] [--size 64k|2m] "
		"[--iters N] [--reps N]\n"
		"Cost of the per-block state calls, ns per call (best of the "
		"repetitions).\n"
		"  a  folio_set_dirty_uptodate, 4K block, folio not uptodate\n"
		"  b  the same as folio_set_uptodate + folio_set_dirty\n"
		"  c  folio_set_dirty_uptodate, folio already uptodate\n"
		"  d  folio_next_dirty walk over the folio with 8 dirty runs\n"
		"Options:\n"
		"  --case C    run only case C (default: all)\n"
		"  --size S    run only the 64k or the 2m folio (default: both)\n"
		"  --iters N   ops per repetition (default: ~20 ms worth)\n"
		"  --reps N    repetitions, the best is reported (default 5)\n"
		"  --help      this text\n"
		"An op is one 4K write (a-c) or one whole walk (d); ops-run "
		"counts every op\nthrough the measured loop, untimed warm-up "
		"included (for callgrind).\n");
}

static int state_parse_count(const char *opt, const char *s,
			     unsigned long *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		goto bad;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || !v)
		goto bad;
	*out = v;
	return 0;
bad:
	fprintf(stderr, "folio-bench state: %s needs a positive number\n", opt);
	return -1;
}

static int state_run(int argc, char **argv)
{
	const char *only_case = NULL, *only_size = NULL;
	unsigned long iters = 0, reps = 5;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			state_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--case")) {
			if (!v || strlen(v) != 1 || v[0] < 'a' || v[0] > 'd') {
				fprintf(stderr, "folio-bench state: --case "
						"takes a, b, c or d\n");
				return 2;
			}
			only_case = v;
			i++;
		} else if (!strcmp(a, "--size")) {
			if (v && (!strcmp(v, "64k") || !strcmp(v, "64K"))) {
				only_size = "64K";
			} else if (v && (!strcmp(v, "2m") || !strcmp(v, "2M"))) {
				only_size = "2M";
			} else {
				fprintf(stderr, "folio-bench state: --size "
						"takes 64k or 2m\n");
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--iters")) {
			if (state_parse_count(a, v, &iters))
				return 2;
			i++;
		} else if (!strcmp(a, "--reps")) {
			if (state_parse_count(a, v, &reps))
				return 2;
			i++;
		} else {
			fprintf(stderr, "folio-bench state: unknown option "
					"'%s'\n",
				a);
			state_usage(stderr);
			return 2;
		}
	}

	printf("state: per-block state calls, 4K blocks, best of %lu "
	       "repetition%s\n",
	       reps, reps == 1 ? "" : "s");
	printf("%-4s %-5s %9s %8s %9s %10s  %s\n", "case", "folio", "ns/op",
	       "calls/op", "ns/call", "ops-run", "op");
	for (size_t ci = 0; ci < STATE_NCASES; ci++) {
		const struct state_case *c = &state_cases[ci];
		if (only_case && only_case[0] != c->id)
			continue;
		for (size_t gi = 0; gi < STATE_NGEOMS; gi++) {
			const struct state_geom *g = &state_geoms[gi];
			if (only_size && strcmp(only_size, g->name))
				continue;
			struct state_set s;
			struct state_result res;
			if (state_new_set(&s, g->size, c->id)) {
				fprintf(stderr, "folio-bench state: cannot "
						"allocate folios\n");
				return 1;
			}
			int rc = state_measure(&s, c, iters, (unsigned)reps,
					       &res);
			state_free_set(&s);
			if (rc)
				return 1;
			printf("%-4c %-5s %9.1f %8u %9.1f %10lu  %s\n", c->id,
			       g->name, res.ns_per_op, c->calls_per_op,
			       res.ns_per_op / c->calls_per_op, res.ops_run,
			       c->what);
		}
	}
	return 0;
}

static struct bench_cmd state_cmd = {
	.name = "state",
	.summary = "ns per call of the per-block state operations",
	.run = state_run,
	.in_default = true,
	.order = 10,
};
BENCH_REGISTER(state_cmd)
