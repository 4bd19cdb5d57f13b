/* SPDX-License-Identifier: MIT */
/*
 * What a cached folio costs in resident memory, and what allocating one
 * costs in time, with the folio allocator (lib/alloc/) against the
 * malloc + posix_memalign pair that folio_alloc() used before it.
 *
 *   alloc-rss rss [--n N] [--size S] [--bs B] [--via folio|mapping|old]
 *       N folios of S bytes (blocks of B) cached, every page written, in
 *       a fresh child process each; prints the RSS growth per folio from
 *       /proc/self/statm and smaps_rollup. `folio`: folio_new(); `mapping`:
 *       one S-byte write each into a mapping over the mem engine (folio
 *       size S), so the index is counted too; `old`: the old folio_alloc's
 *       two allocations, malloc(header + bitmaps) and posix_memalign(4096,
 *       S), in this same binary (default: all three).
 *   alloc-rss speed [--rounds R] [--ops K]
 *       alloc/free time per folio, old pair against alloc_folio_mem(), in
 *       interleaved rounds (the machine is noisy); medians.
 *   alloc-rss loop --impl old|new --pattern pair|batch --size S --ops K
 *       one measured loop, for callgrind (folio-bench callgrind alloc).
 *   alloc-rss huge [--blocks N] [--rounds R]
 *       2 MiB blocks from private arenas with and without MADV_HUGEPAGE,
 *       interleaved: first touch (faults + the kernel's zeroing) and a
 *       later read pass (TLB reach), medians; AnonHugePages confirms.
 *
 * Built with -DALLOC_RSS_PUBLIC_ONLY it needs only the public API, so the
 * same `rss` runs can be linked against an older library for a before
 * figure of folio_new() and of the mapping.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "folio_state.h"
#include "folio_state_mem.h"
#include "statm.h"
#ifndef ALLOC_RSS_PUBLIC_ONLY
#include "alloc/alloc.h"
#endif

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static size_t meta_size(size_t size, size_t bs)
{
	size_t n = size / bs;
	return 64 + (n > 1 ? (3 * n + 63) / 64 * 8 : 0);
}

static long rollup_rss_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Rss: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void touch(void *p, size_t size)
{
	for (size_t off = 0; off < size; off += 4096)
		((volatile char *)p)[off] = 1;
	((volatile char *)p)[size - 1] = 1;
}

/* The child: cache n folios one way, print the growth. */
static int rss_child(const char *via, size_t n, size_t size, size_t bs)
{
	void **keep = calloc(2 * n, sizeof(*keep));
	struct folio_engine *e = NULL;
	struct folio_mapping *m = NULL;
	char *buf = malloc(size);
	if (!keep || !buf)
		return 2;
	memset(buf, 0x5a, size);
	if (!strcmp(via, "mapping")) {
		if (folio_engine_mem(&e, UINT64_C(1) << 40))
			return 4;
		struct folio_mapping_opts o = {
			.sz = sizeof(o),
			.block_size = bs,
			.min_folio_size = size,
			.max_folio_size = size,
			.engine = e,
		};
		if (folio_mapping_new(&m, &o))
			return 5;
		/* The index's first nodes and the engine's state exist
		 * before the baseline. */
		if (folio_mapping_write(m, buf, size, 0) != (ssize_t)size)
			return 6;
	}
	long rss0 = statm_rss_pages(), roll0 = rollup_rss_kib();
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(via, "folio")) {
			struct folio *f;
			if (folio_new(&f, 0, size, bs))
				return 7;
			touch(folio_data(f), size);
			keep[i] = f;
		} else if (!strcmp(via, "mapping")) {
			/* Spread out, as a cache of scattered blocks is. */
			uint64_t pos = (uint64_t)(i + 1) * size * 3;
			if (folio_mapping_write(m, buf, size, pos) !=
			    (ssize_t)size)
				return 8;
		} else {
			void *h = malloc(meta_size(size, bs)), *d;
			if (!h || posix_memalign(&d, FOLIO_DATA_ALIGN, size))
				return 9;
			memset(h, 0, meta_size(size, bs));
			touch(d, size);
			keep[2 * i] = h;
			keep[2 * i + 1] = d;
		}
	}
	long rss1 = statm_rss_pages(), roll1 = rollup_rss_kib();
	double per = (double)(rss1 - rss0) * (double)sysconf(_SC_PAGESIZE) /
		     (double)n;
	double per_roll = (double)(roll1 - roll0) * 1024.0 / (double)n;
	printf("%-8s %8zu %8zu %6zu %12.1f %12.1f %10.1f\n", via, n, size, bs,
	       per, per_roll, per - (double)size);
	fflush(stdout);
	return 0;
}

static int cmd_rss(int argc, char **argv)
{
	size_t n = 100000, size = 4096, bs = 4096;
	const char *via = NULL;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--n"))
			n = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--size"))
			size = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--bs"))
			bs = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--via"))
			via = argv[i + 1];
		else
			return 1;
	}
	const char *all[] = {"old", "folio", "mapping"};
	printf("%-8s %8s %8s %6s %12s %12s %10s\n", "via", "folios", "size",
	       "bs", "rss/folio", "rollup/folio", "overhead");
	fflush(stdout);
	for (size_t k = 0; k < 3; k++) {
		if (via && strcmp(via, all[k]))
			continue;
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (!pid)
			_exit(rss_child(all[k], n, size, bs));
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
		    WEXITSTATUS(st)) {
			fprintf(stderr, "%s: child failed (%d)\n", all[k],
				WIFEXITED(st) ? WEXITSTATUS(st) : -1);
			return 1;
		}
	}
	return 0;
}

#ifndef ALLOC_RSS_PUBLIC_ONLY

/* ---- speed ---- */

enum { MAX_BATCH = 1024 };
static void *slots[2 * MAX_BATCH];

static inline void old_alloc(size_t size, size_t meta, void **d, void **h)
{
	*h = malloc(meta);
	if (!*h || posix_memalign(d, FOLIO_DATA_ALIGN, size))
		abort();
}

static inline void new_alloc(size_t size, size_t meta, void **d, void **h)
{
	bool z;
	if (alloc_folio_mem(size, meta, d, h, &z))
		abort();
}

/* Allocate and free one folio, `ops` times: the thread-cache path. */
__attribute__((noinline)) void loop_pair_old(size_t size, size_t meta,
					     size_t ops);
__attribute__((noinline)) void loop_pair_new(size_t size, size_t meta,
					     size_t ops);
/* Allocate 1024 folios, free them, `ops` folios in all: refills and
 * flushes of the caches, the arena's lists. */
__attribute__((noinline)) void loop_batch_old(size_t size, size_t meta,
					      size_t ops);
__attribute__((noinline)) void loop_batch_new(size_t size, size_t meta,
					      size_t ops);

void loop_pair_old(size_t size, size_t meta, size_t ops)
{
	for (size_t i = 0; i < ops; i++) {
		void *d, *h;
		old_alloc(size, meta, &d, &h);
		__asm__ __volatile__("" ::"r"(d), "r"(h) : "memory");
		free(d);
		free(h);
	}
}

void loop_pair_new(size_t size, size_t meta, size_t ops)
{
	for (size_t i = 0; i < ops; i++) {
		void *d, *h;
		new_alloc(size, meta, &d, &h);
		__asm__ __volatile__("" ::"r"(d), "r"(h) : "memory");
		alloc_folio_mem_free(d, size, h, meta);
	}
}

void loop_batch_old(size_t size, size_t meta, size_t ops)
{
	for (size_t done = 0; done < ops; done += MAX_BATCH) {
		for (size_t i = 0; i < MAX_BATCH; i++)
			old_alloc(size, meta, &slots[2 * i], &slots[2 * i + 1]);
		for (size_t i = 0; i < MAX_BATCH; i++) {
			free(slots[2 * i]);
			free(slots[2 * i + 1]);
		}
	}
}

void loop_batch_new(size_t size, size_t meta, size_t ops)
{
	for (size_t done = 0; done < ops; done += MAX_BATCH) {
		for (size_t i = 0; i < MAX_BATCH; i++)
			new_alloc(size, meta, &slots[2 * i], &slots[2 * i + 1]);
		for (size_t i = 0; i < MAX_BATCH; i++)
			alloc_folio_mem_free(slots[2 * i], size,
					     slots[2 * i + 1], meta);
	}
}

typedef void loop_fn(size_t, size_t, size_t);

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int cmd_speed(int argc, char **argv)
{
	unsigned rounds = 15;
	size_t ops = 1 << 16;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rounds"))
			rounds = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--ops"))
			ops = strtoull(argv[i + 1], NULL, 0);
		else
			return 1;
	}
	if (rounds > 101)
		rounds = 101;
	static const struct {
		const char *name;
		loop_fn *old_fn, *new_fn;
	} pats[] = {
		{"pair", loop_pair_old, loop_pair_new},
		{"batch", loop_batch_old, loop_batch_new},
	};
	static const size_t sizes[] = {4096, 64 * KIB, 2 * MIB};
	printf("%-6s %8s %10s %10s %7s\n", "loop", "size", "old ns", "new ns",
	       "old/new");
	for (size_t p = 0; p < 2; p++)
		for (size_t s = 0; s < 3; s++) {
			size_t size = sizes[s], meta = meta_size(size, 4096);
			/* 2 MiB through malloc is an mmap each: fewer ops. */
			size_t k = size >= MIB ? ops / 16 : ops;
			k = (k + MAX_BATCH - 1) / MAX_BATCH * MAX_BATCH;
			double t_old[101], t_new[101];
			pats[p].old_fn(size, meta, MAX_BATCH); /* warm up */
			pats[p].new_fn(size, meta, MAX_BATCH);
			for (unsigned r = 0; r < rounds; r++) {
				/* Alternate who goes first. */
				for (int w = 0; w < 2; w++) {
					bool old_now = (r + (unsigned)w) % 2;
					double t0 = now_ns();
					(old_now ? pats[p].old_fn
						 : pats[p].new_fn)(size, meta, k);
					double t = (now_ns() - t0) / (double)k;
					(old_now ? t_old : t_new)[r] = t;
				}
			}
			qsort(t_old, rounds, sizeof(double), dbl_cmp);
			qsort(t_new, rounds, sizeof(double), dbl_cmp);
			double mo = t_old[rounds / 2], mn = t_new[rounds / 2];
			printf("%-6s %8zu %10.1f %10.1f %7.2f\n", pats[p].name,
			       size, mo, mn, mo / mn);
		}
	return 0;
}

static long rollup_kib(const char *key)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;
	size_t klen = strlen(key);
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) &&
		    sscanf(line + klen, " %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int cmd_huge(int argc, char **argv)
{
	unsigned rounds = 9, nblocks = 64;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rounds"))
			rounds = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--blocks"))
			nblocks = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else
			return 1;
	}
	if (rounds > 101)
		rounds = 101;
	if (nblocks > MAX_BATCH)
		nblocks = MAX_BATCH;
	double touch_ns[2][101], read_ns[2][101];
	long huge_kib[2] = {0, 0};
	const unsigned c2m = alloc_data_class(2 * MIB);
	volatile uint64_t sink = 0;
	for (unsigned r = 0; r < rounds; r++)
		for (int w = 0; w < 2; w++) {
			int hp = (int)((r + (unsigned)w) % 2);
			struct alloc_arena a;
			if (alloc_arena_init(&a, NULL, hp ? ALLOC_HUGEPAGE : 0))
				return 1;
			for (unsigned i = 0; i < nblocks; i++)
				if (!(slots[i] = alloc_obj(&a, NULL, c2m, NULL)))
					return 1;
			double t0 = now_ns();
			for (unsigned i = 0; i < nblocks; i++)
				memset(slots[i], 1, 2 * MIB);
			double t1 = now_ns();
			/* One word per 4 KiB page, pages in random-ish order
			 * across all blocks: what a lookup-heavy cache does. */
			uint64_t sum = 0;
			size_t pages = (size_t)nblocks * 512;
			for (size_t k = 0, j = 0; k < pages; k++) {
				j = (j + 7919) % pages;
				sum += *(uint64_t *)((char *)slots[j / 512] +
						     (j % 512) * 4096);
			}
			double t2 = now_ns();
			sink += sum;
			long h = rollup_kib("AnonHugePages:");
			if (h > huge_kib[hp])
				huge_kib[hp] = h;
			for (unsigned i = 0; i < nblocks; i++)
				alloc_obj_free(&a, NULL, c2m, slots[i]);
			alloc_arena_trim(&a);
			if (alloc_arena_destroy(&a))
				return 1;
			touch_ns[hp][r] = (t1 - t0) / nblocks;
			read_ns[hp][r] = (t2 - t1) / (double)pages;
		}
	printf("%-12s %16s %16s %14s\n", "advice", "touch us/2MiB",
	       "read ns/page", "AnonHuge KiB");
	for (int hp = 0; hp < 2; hp++) {
		qsort(touch_ns[hp], rounds, sizeof(double), dbl_cmp);
		qsort(read_ns[hp], rounds, sizeof(double), dbl_cmp);
		printf("%-12s %16.1f %16.2f %14ld\n",
		       hp ? "HUGEPAGE" : "none", touch_ns[hp][rounds / 2] / 1e3,
		       read_ns[hp][rounds / 2], huge_kib[hp]);
	}
	return sink == 42; /* keep the reads */
}

static int cmd_loop(int argc, char **argv)
{
	const char *impl = "new", *pat = "pair";
	size_t size = 4096, ops = 100000;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--impl"))
			impl = argv[i + 1];
		else if (!strcmp(argv[i], "--pattern"))
			pat = argv[i + 1];
		else if (!strcmp(argv[i], "--size"))
			size = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--ops"))
			ops = strtoull(argv[i + 1], NULL, 0);
		else
			return 1;
	}
	ops = (ops + MAX_BATCH - 1) / MAX_BATCH * MAX_BATCH;
	bool old = !strcmp(impl, "old");
	bool pair = !strcmp(pat, "pair");
	loop_fn *fn = pair ? (old ? loop_pair_old : loop_pair_new)
			   : (old ? loop_batch_old : loop_batch_new);
	size_t meta = meta_size(size, 4096);
	fn(size, meta, ops);
	printf("%s %s %zu %zu\n", impl, pat, size, ops);
	return 0;
}

#endif

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "rss"))
		return cmd_rss(argc, argv);
#ifndef ALLOC_RSS_PUBLIC_ONLY
	if (argc >= 2 && !strcmp(argv[1], "speed"))
		return cmd_speed(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "loop"))
		return cmd_loop(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "huge"))
		return cmd_huge(argc, argv);
#endif
	fprintf(stderr, "usage: alloc-rss rss|speed|loop [options] "
			"(see the comment at the top of bench/micro/alloc-rss.c)\n");
	return 1;
}
