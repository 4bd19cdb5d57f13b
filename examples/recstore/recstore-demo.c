/* SPDX-License-Identifier: MIT */
/*
 * recstore-demo: put N random records at random ids, checkpoint, close,
 * reopen, verify every record of the store, and print what the cache sent
 * to the file.
 *
 * usage: recstore-demo [-n PUTS] [-r RECORD_SIZE] [-c CAPACITY] [-b BUDGET]
 *                      [-u] [FILE]
 *   -b    hold at most BUDGET bytes of data in memory (a folio pool of
 *         its own, which reclaims and writes back as the store works)
 *   -u    use io_uring (falls back to posix where unavailable)
 *   FILE  an existing store of the same record size is extended, not
 *         wiped; default: a temp file in /var/tmp, removed afterwards
 */
/* mkstemp(), O_CLOEXEC and friends are POSIX, not C11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recstore.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
	/* xorshift64: reproducible runs without touching rand()'s state. */
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct model {
	unsigned char *bytes; /* what every record must read back as */
	size_t rsize;
	int load; /* 1: copy the store into the model, 0: compare */
	uint64_t mismatches;
};

static int visit(uint64_t id, const void *rec, void *arg)
{
	struct model *md = arg;
	unsigned char *want = md->bytes + id * md->rsize;
	if (md->load)
		memcpy(want, rec, md->rsize);
	else if (memcmp(want, rec, md->rsize))
		md->mismatches++;
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int r)
{
	fprintf(stderr, "recstore-demo: %s: %s\n", what, strerror(-r));
	return 1;
}

/* What a cache that tracks dirtiness per 64 KiB folio, not per block,
 * would have sent: every touched folio, whole. */
#define FOLIO_BYTES 65536u

static int run(const char *path, uint64_t puts, size_t rsize,
	       struct recstore_opts *opts)
{
	struct recstore *rs;
	struct recstore_stats st;
	struct model md = {.rsize = rsize, .load = 1};
	unsigned char *rec = NULL, *touched = NULL;
	uint64_t folios = 0;
	double t0 = now();
	int r = recstore_open(&rs, path, rsize, opts);
	if (r)
		goto out;
	rec = malloc(rsize);
	md.bytes = calloc(opts->nrecords, rsize);
	touched = calloc(opts->nrecords * rsize / FOLIO_BYTES + 2, 1);
	if (!rec || !md.bytes || !touched) {
		r = -ENOMEM;
		goto done;
	}
	/* The model starts as the store's current contents, so an existing
	 * store passed as FILE verifies too. */
	if ((r = recstore_scan(rs, 0, opts->nrecords, visit, &md)))
		goto done;
	for (uint64_t i = 0; i < puts; i++) {
		uint64_t id = rng() % opts->nrecords;
		for (size_t j = 0; j < rsize; j++)
			rec[j] = (unsigned char)rng();
		if ((r = recstore_put(rs, id, rec)))
			goto done;
		memcpy(md.bytes + id * rsize, rec, rsize);
		for (uint64_t f = id * rsize / FOLIO_BYTES;
		     f <= ((id + 1) * rsize - 1) / FOLIO_BYTES; f++) {
			folios += !touched[f];
			touched[f] = 1;
		}
	}
	if ((r = recstore_checkpoint(rs)) || (r = recstore_stats(rs, &st)))
		goto done;
	if ((r = recstore_close(rs)))
		goto done; /* retried there once, then given up */
	double t1 = now();

	if ((r = recstore_open(&rs, path, rsize, opts)))
		goto out;
	md.load = 0;
	if ((r = recstore_scan(rs, 0, opts->nrecords, visit, &md)))
		goto done;
	r = md.mismatches ? -EIO : 0;
	printf("%s engine: %" PRIu64 " puts of %zu bytes into %" PRIu64
	       " records, checkpointed in %.3f s\n"
	       "  written by puts:          %12" PRIu64 " bytes\n"
	       "  sent to the file:         %12" PRIu64 " bytes in %" PRIu64
	       " requests (%" PRIu64 " merges)\n"
	       "  per-folio dirty tracking: %12" PRIu64 " bytes (%" PRIu64
	       " touched 64 KiB folios)\n"
	       "  verified after reopen: %" PRIu64 " records, %" PRIu64
	       " mismatches\n",
	       st.engine == RECSTORE_ENGINE_URING ? "io_uring" : "posix",
	       st.puts, rsize, st.nrecords, t1 - t0, st.cache.bytes_written,
	       st.cache.wb_bytes, st.cache.wb_requests, st.cache.wb_merges,
	       folios * FOLIO_BYTES, folios, opts->nrecords, md.mismatches);
	struct recstore_stats st2;
	if (!r && opts->budget && !(r = recstore_stats(rs, &st2))) {
		/* Both runs (the puts, then the verifying scan) must have
		 * held the budget, give or take the folio being added when
		 * the count was read (recstore caps its folios at an eighth
		 * of the budget, or the smallest folio when that is more). */
		uint64_t hi = st.cached_max > st2.cached_max ? st.cached_max
							    : st2.cached_max;
		printf("  budget %" PRIu64 " bytes, data %" PRIu64
		       " bytes: cached at most %" PRIu64 " bytes\n",
		       opts->budget, opts->nrecords * rsize, hi);
		uint64_t folio = opts->folio_size ? opts->folio_size
						  : FOLIO_BYTES;
		if (folio < opts->budget / 8)
			folio = opts->budget / 8; /* the store's largest */
		if (hi > opts->budget + folio)
			r = -E2BIG;
	}
done:;
	int rc = recstore_close(rs);
	if (rc) {
		recstore_discard(rs);
		r = r ? r : rc;
	}
out:
	free(rec);
	free(touched);
	free(md.bytes);
	return r ? fail(path, r) : 0;
}

int main(int argc, char **argv)
{
	uint64_t puts = 1000;
	size_t rsize = 100;
	struct recstore_opts opts = {.nrecords = 0};
	int c;
	while ((c = getopt(argc, argv, "n:r:c:b:u")) != -1) {
		switch (c) {
		case 'n': puts = strtoull(optarg, NULL, 0); break;
		case 'r': rsize = strtoull(optarg, NULL, 0); break;
		case 'c': opts.nrecords = strtoull(optarg, NULL, 0); break;
		case 'b': opts.budget = strtoull(optarg, NULL, 0); break;
		case 'u': opts.engine = RECSTORE_ENGINE_URING; break;
		default:
			fprintf(stderr, "usage: %s [-n PUTS] [-r RECORD_SIZE] "
				"[-c CAPACITY] [-b BUDGET] [-u] [FILE]\n", argv[0]);
			return 2;
		}
	}
	if (!opts.nrecords)
		opts.nrecords = puts ? 64 * puts : 1; /* sparse: few puts per block */
	if (optind < argc)
		return run(argv[optind], puts, rsize, &opts);

	char tmp[] = "/var/tmp/recstore-demo-XXXXXX";
	int fd = mkstemp(tmp);
	if (fd < 0)
		return fail(tmp, -errno);
	close(fd);
	int ret = run(tmp, puts, rsize, &opts);
	unlink(tmp);
	return ret;
}
