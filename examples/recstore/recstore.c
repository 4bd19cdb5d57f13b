/* SPDX-License-Identifier: MIT */
/*
 * recstore: fixed-size records over a libfolio-state mapping. See
 * recstore.h for the contract; this file shows the few decisions an
 * embedding has to make: geometry, engine choice, one error cursor per
 * consumer of errors, and what to do with dirty data at close.
 */
#ifndef _POSIX_C_SOURCE /* O_CLOEXEC, fstat(): POSIX, not C11 */
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recstore.h"


/* The usual device and file system block: the unit a checkpoint writes. */
#define BLOCK_SIZE 4096u
/* 16 blocks per folio: few cache objects for sequential fills, while
 * per-block dirty bits keep random puts from writing whole folios. */
#define DEFAULT_FOLIO_SIZE (64u * 1024u)
#define URING_DEPTH 64u
#define MAX_BYTES (UINT64_C(1) << 62) /* the mapping's largest size */
/* Per scan read: big engine requests for missing blocks, still in L2. */
#define SCAN_CHUNK (256u * 1024u)

struct recstore {
	struct folio_mapping *m;
	struct folio_pool *pool; /* NULL without a budget */
	uint64_t budget, cached_max;
	struct folio_engine *e;
	int fd; /* -1: the engine belongs to the caller */
	enum recstore_engine kind;
	size_t rsize;
	uint64_t nrec;
	uint64_t cache_limit;
	/* The store is the one consumer of write errors, so it owns one
	 * cursor: each error fails exactly one checkpoint. */
	folio_errseq_t cursor;
	uint64_t puts, gets, scanned, checkpoints, failed;
};

static bool bad_record_size(size_t rsize)
{
	return rsize == 0 || rsize > RECSTORE_MAX_RECORD_SIZE;
}

static int store_new(struct recstore **out, struct folio_engine *e, int fd,
		     uint64_t size, size_t rsize,
		     const struct recstore_opts *opts)
{
	static const struct recstore_opts defaults;
	if (!opts)
		opts = &defaults;
	/* Never hide records the file already holds, even a torn last one
	 * left by an interrupted write. */
	uint64_t held = size / rsize + (size % rsize != 0);
	uint64_t nrec = opts->nrecords > held ? opts->nrecords : held;
	if (!nrec)
		return -EINVAL;
	if (nrec > MAX_BYTES / rsize)
		return -EFBIG;

	struct recstore *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	if (opts->budget) {
		struct folio_pool_opts po = {.sz = sizeof(po),
					     .budget = opts->budget};
		int r = folio_pool_new(&rs->pool, &po);
		if (r) {
			free(rs);
			return r;
		}
		rs->budget = opts->budget;
	}
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = BLOCK_SIZE,
		.min_folio_size = opts->folio_size ? opts->folio_size
						   : DEFAULT_FOLIO_SIZE,
		.size = size,
		.engine = e,
		.pool = rs->pool,
	};
	/* The default largest folio may not fit a small budget, and one
	 * folio past the budget is the overshoot a pool allows: keep it to
	 * an eighth of the budget, never below the smallest folio. */
	if (opts->budget) {
		size_t max = mo.min_folio_size;
		while (max <= SIZE_MAX / 2 && max * 2 <= opts->budget / 8)
			max *= 2;
		mo.max_folio_size = max;
	}
	int r = folio_mapping_new(&rs->m, &mo);
	if (r) {
		folio_pool_free(rs->pool);
		free(rs);
		return r;
	}
	rs->e = e;
	rs->fd = fd;
	rs->rsize = rsize;
	rs->nrec = nrec;
	rs->cache_limit = opts->cache_limit;
	rs->cursor = folio_mapping_err_cursor(rs->m);
	*out = rs;
	return 0;
}

int recstore_open_engine(struct recstore **out, struct folio_engine *engine,
			 uint64_t size, size_t record_size,
			 const struct recstore_opts *opts)
{
	if (!out || !engine || bad_record_size(record_size))
		return -EINVAL;
	return store_new(out, engine, -1, size, record_size, opts);
}

int recstore_open(struct recstore **out, const char *path, size_t record_size,
		  const struct recstore_opts *opts)
{
	if (!out || !path || bad_record_size(record_size))
		return -EINVAL;
	/* Without a capacity only an existing store can be opened, so a
	 * mistyped path fails instead of leaving an empty file behind. */
	bool create = opts && opts->nrecords;
	int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
	int fd = open(path, flags, 0644);
	if (fd < 0)
		return -errno;

	struct folio_engine *e = NULL;
	enum recstore_engine kind = RECSTORE_ENGINE_POSIX;
	struct stat st;
	int r = fstat(fd, &st) ? -errno : 0;
	/* io_uring may be missing from the build, disabled by a sysctl or
	 * seccomp, or short of locked memory: every such failure is about
	 * the environment, and the posix engine serves the same requests. */
	if (!r && opts && opts->engine == RECSTORE_ENGINE_URING &&
	    folio_engine_uring(&e, fd, URING_DEPTH, 0) == 0)
		kind = RECSTORE_ENGINE_URING;
	if (!r && !e)
		r = folio_engine_posix(&e, fd, 0);
	if (!r)
		r = store_new(out, e, fd, (uint64_t)st.st_size, record_size,
			      opts);
	if (r) {
		folio_engine_free(e);
		close(fd);
		return r;
	}
	(*out)->kind = kind;
	return 0;
}

static int check_args(struct recstore *rs, uint64_t id, const void *rec)
{
	if (!rs || !rec)
		return -EINVAL;
	return id < rs->nrec ? 0 : -ERANGE;
}

/* Sampled after every put and get so a demo or test can check the
 * budget held while the store worked, not only at the end. */
static void note_cached(struct recstore *rs)
{
	struct folio_pool_stats ps = {.sz = sizeof(ps)};
	if (rs->pool && folio_pool_stats(rs->pool, &ps) == 0 &&
	    ps.cached_bytes > rs->cached_max)
		rs->cached_max = ps.cached_bytes;
}

int recstore_put(struct recstore *rs, uint64_t id, const void *rec)
{
	int r = check_args(rs, id, rec);
	if (r)
		return r;
	const unsigned char *src = rec;
	uint64_t pos = id * rs->rsize;
	/* A short count means a later folio failed; asking again for the
	 * rest returns that failure. */
	for (size_t done = 0; done < rs->rsize;) {
		ssize_t n = folio_mapping_write(rs->m, src + done,
						rs->rsize - done, pos + done);
		if (n <= 0)
			return n < 0 ? (int)n : -EIO;
		done += (size_t)n;
	}
	rs->puts++;
	note_cached(rs);
	return 0;
}

/* Fill @buf from [pos, pos+len): bytes past EOF were never written and
 * read as zeros. */
static int read_full(struct recstore *rs, void *buf, size_t len, uint64_t pos)
{
	unsigned char *dst = buf;
	while (len) {
		ssize_t n = folio_mapping_read(rs->m, dst, len, pos);
		if (n < 0)
			return (int)n;
		if (n == 0) {
			memset(dst, 0, len);
			break;
		}
		dst += n;
		len -= (size_t)n;
		pos += (uint64_t)n;
	}
	return 0;
}

int recstore_get(struct recstore *rs, uint64_t id, void *rec)
{
	int r = check_args(rs, id, rec);
	if (r)
		return r;
	r = read_full(rs, rec, rs->rsize, id * rs->rsize);
	if (!r)
		rs->gets++;
	note_cached(rs);
	return r;
}

/* Without a budget (a pool), the embedding bounds its cache itself:
 * clean folios are dropped, dirty ones kept. */
static void trim_cache(struct recstore *rs)
{
	struct folio_mapping_stats s = {.sz = sizeof(s)};
	if (rs->cache_limit && folio_mapping_stats(rs->m, &s) == 0 &&
	    s.cached_bytes > rs->cache_limit)
		(void)folio_mapping_invalidate(rs->m, 0, 0, 0);
}

int recstore_scan(struct recstore *rs, uint64_t first, uint64_t count,
		  int (*fn)(uint64_t id, const void *rec, void *arg),
		  void *arg)
{
	if (!rs || !fn)
		return -EINVAL;
	if (first > rs->nrec || count > rs->nrec - first)
		return -ERANGE;
	if (!count)
		return 0;
	size_t per = SCAN_CHUNK / rs->rsize;
	if (per > count)
		per = (size_t)count;
	unsigned char *buf = malloc(per * rs->rsize);
	if (!buf)
		return -ENOMEM;
	int r = 0;
	while (count && !r) {
		size_t k = count < per ? (size_t)count : per;
		r = read_full(rs, buf, k * rs->rsize, first * rs->rsize);
		for (size_t i = 0; i < k && !r; i++) {
			r = fn(first + i, buf + i * rs->rsize, arg);
			rs->scanned++;
		}
		note_cached(rs);
		first += k;
		count -= k;
	}
	free(buf);
	trim_cache(rs);
	return r;
}

int recstore_checkpoint(struct recstore *rs)
{
	if (!rs)
		return -EINVAL;
	rs->checkpoints++;
	/* With the library's default policy a failed write keeps its blocks
	 * dirty, so there is nothing to remember here for the retry. */
	int r = folio_mapping_sync(rs->m, &rs->cursor);
	if (r) {
		rs->failed++;
		return r;
	}
	trim_cache(rs);
	return 0;
}

int recstore_stats(struct recstore *rs, struct recstore_stats *st)
{
	if (!rs || !st)
		return -EINVAL;
	struct recstore_stats s = {
		.nrecords = rs->nrec,
		.record_size = rs->rsize,
		.engine = rs->kind,
		.puts = rs->puts,
		.gets = rs->gets,
		.scanned = rs->scanned,
		.checkpoints = rs->checkpoints,
		.failed_checkpoints = rs->failed,
		.cache = {.sz = sizeof(s.cache)},
		.budget = rs->budget,
		.cached_max = rs->cached_max,
	};
	int r = folio_mapping_stats(rs->m, &s.cache);
	if (r)
		return r;
	*st = s;
	return 0;
}

static int store_free(struct recstore *rs)
{
	/* Only fails while dirty data or I/O remains, which the callers
	 * have just ruled out; keep the store rather than leak the data. */
	int r = folio_mapping_free(rs->m);
	if (r)
		return r;
	/* The mapping, its last member, is gone: the pool cannot be busy. */
	(void)folio_pool_free(rs->pool);
	if (rs->fd >= 0) {
		folio_engine_free(rs->e);
		if (close(rs->fd))
			r = -errno;
	}
	free(rs);
	return r;
}

int recstore_close(struct recstore *rs)
{
	if (!rs)
		return 0;
	/* Closing must not be where data is silently lost: a store that
	 * cannot write stays open and says why. */
	int r = recstore_checkpoint(rs);
	return r ? r : store_free(rs);
}

int recstore_discard(struct recstore *rs)
{
	if (!rs)
		return 0;
	(void)folio_mapping_invalidate(rs->m, 0, 0, FOLIO_INVALIDATE_DISCARD);
	return store_free(rs);
}
