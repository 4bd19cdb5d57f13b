/* SPDX-License-Identifier: MIT */
/*
 * Micro-benchmark of the radix tree index (lib/index/index.c).
 *
 * Usage: index-bench [entries] (default 1000000)
 *
 * Reports ns per insert, lookup and remove for order-0 entries with
 * sequential and random (shuffled dense) keys, the node memory, and the
 * cost of one find_tagged pass over 1000 tagged entries spread among all
 * entries compared with a pass over an index holding only those 1000
 * entries, all tagged. The two passes should cost about the same: tag
 * bits let the walk skip clean subtrees.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "index/index.h"

#define TAGGED 1000u

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * UINT64_C(0x2545F4914F6CDD1D);
}

static void *entry_for(uint64_t key)
{
	return (void *)(uintptr_t)((key + 1) << 4);
}

/* The compiler must not drop lookups whose results go unused. */
static volatile uintptr_t sink;

static void die(const char *what)
{
	fprintf(stderr, "index-bench: %s\n", what);
	exit(1);
}

static void run_basic(const char *name, const uint64_t *keys, size_t n,
		      const uint64_t *probe)
{
	struct index_tree idx;
	double t0, t1;
	uintptr_t acc = 0;

	index_init(&idx);
	t0 = now_ns();
	for (size_t i = 0; i < n; i++) {
		if (index_insert(&idx, keys[i], 0, entry_for(keys[i])))
			die("insert failed");
	}
	t1 = now_ns();
	double ins = (t1 - t0) / (double)n;

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		acc += (uintptr_t)index_lookup(&idx, probe[i]);
	t1 = now_ns();
	double lk_rand = (t1 - t0) / (double)n;

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		acc += (uintptr_t)index_lookup(&idx, keys[0] + i);
	t1 = now_ns();
	double lk_seq = (t1 - t0) / (double)n;

	t0 = now_ns();
	uint64_t key = 0;
	unsigned order;
	size_t found = 0;
	while (index_find(&idx, &key, UINT64_MAX, &order)) {
		found++;
		key += (uint64_t)1 << order;
	}
	t1 = now_ns();
	double iter = (t1 - t0) / (double)n;
	if (found != n)
		die("find pass missed entries");

	size_t nodes = index_node_count(&idx);
	t0 = now_ns();
	for (size_t i = 0; i < n; i++) {
		if (!index_remove(&idx, keys[i], 0))
			die("remove failed");
	}
	t1 = now_ns();
	double rm = (t1 - t0) / (double)n;
	sink = acc;

	printf("%-10s insert %6.1f ns  lookup rand %6.1f ns  lookup seq "
	       "%6.1f ns  find-iter %5.1f ns  remove %6.1f ns\n",
	       name, ins, lk_rand, lk_seq, iter, rm);
	printf("%-10s nodes %zu x %zu B = %.2f MiB (%.2f B/entry)\n", name,
	       nodes, (size_t)INDEX_NODE_BYTES,
	       (double)nodes * INDEX_NODE_BYTES / (1024.0 * 1024.0),
	       (double)nodes * INDEX_NODE_BYTES / (double)n);
	index_destroy(&idx);
}

/* One full find_tagged pass; returns ns and checks the count. */
static double tagged_pass(const struct index_tree *idx, size_t want)
{
	double t0 = now_ns();
	uint64_t key = 0;
	unsigned order;
	size_t found = 0;
	while (index_find_tagged(idx, &key, UINT64_MAX, INDEX_TAG_DIRTY,
				 &order)) {
		found++;
		key += (uint64_t)1 << order;
	}
	double t1 = now_ns();
	if (found != want)
		die("tagged pass count");
	return t1 - t0;
}

static double best_pass(const struct index_tree *idx, size_t want)
{
	double best = 1e300;
	for (int r = 0; r < 50; r++) {
		double t = tagged_pass(idx, want);
		if (t < best)
			best = t;
	}
	return best;
}

static void run_tagged(size_t n)
{
	struct index_tree big, small;
	uint64_t *tagged = malloc(TAGGED * sizeof(*tagged));

	if (!tagged)
		die("out of memory");
	index_init(&big);
	index_init(&small);
	for (size_t i = 0; i < n; i++) {
		if (index_insert(&big, i, 0, entry_for(i)))
			die("insert failed");
	}
	/* Random distinct keys: the worst spread, one per leaf or so. */
	for (size_t t = 0; t < TAGGED;) {
		uint64_t k = rnd() % n;
		if (index_tag_get(&big, k, INDEX_TAG_DIRTY))
			continue;
		index_tag_set(&big, k, 0, INDEX_TAG_DIRTY);
		if (index_insert(&small, k, 0, entry_for(k)))
			die("insert failed");
		index_tag_set(&small, k, 0, INDEX_TAG_DIRTY);
		tagged[t++] = k;
	}
	double tb = best_pass(&big, TAGGED);
	double ts = best_pass(&small, TAGGED);
	printf("find_tagged pass: %u tagged among %zu: %.1f us (%.1f ns/entry); "
	       "%u entries all tagged: %.1f us (%.1f ns/entry); ratio %.2f\n",
	       TAGGED, n, tb / 1e3, tb / TAGGED, TAGGED, ts / 1e3,
	       ts / TAGGED, tb / ts);

	/* Every n/1000-th key: evenly spread, the other common shape. */
	index_destroy(&small);
	index_init(&small);
	for (size_t t = 0; t < TAGGED; t++)
		index_tag_clear(&big, tagged[t], 0, INDEX_TAG_DIRTY);
	for (size_t t = 0; t < TAGGED; t++) {
		uint64_t k = (uint64_t)t * (n / TAGGED);
		index_tag_set(&big, k, 0, INDEX_TAG_DIRTY);
		if (index_insert(&small, k, 0, entry_for(k)))
			die("insert failed");
		index_tag_set(&small, k, 0, INDEX_TAG_DIRTY);
	}
	tb = best_pass(&big, TAGGED);
	ts = best_pass(&small, TAGGED);
	printf("find_tagged pass, evenly spaced: among %zu: %.1f us; alone: "
	       "%.1f us; ratio %.2f\n", n, tb / 1e3, ts / 1e3, tb / ts);

	/* Reference point: an untagged find pass over everything. */
	double t0 = now_ns();
	uint64_t key = 0;
	unsigned order;
	size_t found = 0;
	while (index_find(&big, &key, UINT64_MAX, &order)) {
		found++;
		key += (uint64_t)1 << order;
	}
	double t1 = now_ns();
	printf("untagged find pass over all %zu: %.1f us\n", found,
	       (t1 - t0) / 1e3);
	index_destroy(&big);
	index_destroy(&small);
	free(tagged);
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
	if (n < TAGGED)
		die("need at least 1000 entries");
	uint64_t *seq = malloc(n * sizeof(*seq));
	uint64_t *shuf = malloc(n * sizeof(*shuf));
	uint64_t *probe = malloc(n * sizeof(*probe));
	if (!seq || !shuf || !probe)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		seq[i] = shuf[i] = i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd() % (i + 1);
		uint64_t t = shuf[i];
		shuf[i] = shuf[j];
		shuf[j] = t;
	}
	for (size_t i = 0; i < n; i++)
		probe[i] = rnd() % n;

	printf("index-bench: %zu order-0 entries, node %zu bytes\n", n,
	       (size_t)INDEX_NODE_BYTES);
	run_basic("sequential", seq, n, probe);
	run_basic("random", shuf, n, probe);

	/* Sparse random keys below 2^40, the memory worst case of a radix
	 * tree (a chain of mostly empty nodes per key), shown for contrast
	 * with n / 16 entries to keep the footprint reasonable. */
	size_t ns = n / 16;
	for (size_t i = 0; i < ns; i++)
		shuf[i] = rnd() & ((UINT64_C(1) << 40) - 1);
	struct index_tree sp;
	index_init(&sp);
	size_t ok = 0;
	double t0 = now_ns();
	for (size_t i = 0; i < ns; i++)
		ok += index_insert(&sp, shuf[i], 0, entry_for(shuf[i])) == 0;
	double t1 = now_ns();
	printf("sparse     %zu keys < 2^40: insert %6.1f ns; nodes %zu = %.2f "
	       "MiB (%.1f B/entry)\n", ok, (t1 - t0) / (double)ns,
	       index_node_count(&sp),
	       (double)index_node_count(&sp) * INDEX_NODE_BYTES / 1048576.0,
	       (double)index_node_count(&sp) * INDEX_NODE_BYTES / (double)ok);
	index_destroy(&sp);

	run_tagged(n);
	free(seq);
	free(shuf);
	free(probe);
	return 0;
}
