/* SPDX-License-Identifier: MIT */
/*
 * The RADOS engine against a real cluster: the one scripts/test.sh starts
 * with scripts/ceph-cluster.sh and names in $FOLIO_TEST_CEPH_CONF (pool
 * $FOLIO_TEST_CEPH_POOL, default "folio"). Without it the whole program
 * is skipped with a message. What the engine stored is checked through a
 * second, raw librados handle. Each test uses its own object prefix
 * (with the pid, so reruns on one cluster do not collide).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <inttypes.h>
#include <rados/librados.h>
#include <signal.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "folio_state_rados.h"
#include "test_util.h"

#define OSIZE 65536u /* small stripe objects: requests cross them often */

static const char *conf, *pool;
static rados_t raw;
static rados_ioctx_t rio;

static void prefix_of(char *buf, size_t n, const char *test)
{
	snprintf(buf, n, "t%d.%s", (int)getpid(), test);
}

static struct folio_engine *open_engine(const char *prefix, uint64_t osize,
					unsigned timeout)
{
	struct folio_rados_opts o = {
		.sz = sizeof(o), .conf_path = conf, .pool = pool,
		.prefix = prefix, .object_size = osize, .timeout = timeout,
	};
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_rados(&e, &o), 0);
	return e;
}

/* The raw object @idx of @prefix: its bytes (up to n), or -ENOENT. */
static int raw_read(const char *prefix, uint64_t idx, void *buf, size_t n,
		    uint64_t off)
{
	char name[256];
	snprintf(name, sizeof(name), "%s.%016" PRIx64, prefix, idx);
	return rados_read(rio, name, buf, n, off);
}

static int64_t raw_obj_size(const char *prefix, uint64_t idx)
{
	char name[256];
	uint64_t size;
	time_t mtime;
	snprintf(name, sizeof(name), "%s.%016" PRIx64, prefix, idx);
	int r = rados_stat(rio, name, &size, &mtime);
	return r ? r : (int64_t)size;
}

/* The size the header holds; 0 without a header (as the engine reads
 * it: nothing has set a size yet). */
static int64_t raw_header_size(const char *prefix)
{
	char buf[32];
	int r = rados_getxattr(rio, prefix, "folio.size", buf, sizeof(buf) - 1);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	buf[r] = 0;
	return (int64_t)strtoull(buf, NULL, 10);
}

/* The striped object's bytes [pos, pos + len) as stored, holes as
 * zeros, read object by object through the raw handle. */
static void raw_range(const char *prefix, void *buf, size_t len, uint64_t pos,
		      uint64_t osize)
{
	memset(buf, 0, len);
	for (size_t at = 0; at < len;) {
		uint64_t p = pos + at, idx = p / osize, off = p % osize;
		size_t n = (size_t)test_min_u64(len - at, osize - off);
		int r = raw_read(prefix, idx, (char *)buf + at, n, off);
		assert_true(r >= 0 || r == -ENOENT);
		at += n;
	}
}

/* ---- tests ---------------------------------------------------------- */

/* A multi-segment write crossing three objects, read back through the
 * engine and as stored; the size header covers it. */
static void test_round_trip(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "round_trip");
	struct folio_engine *e = open_engine(prefix, OSIZE, 0);
	size_t len = 2 * OSIZE + 5000;
	uint64_t pos = OSIZE - 3000;
	char *in = xmalloc(len), *out = xmalloc(len), *chk = xmalloc(len);
	fill(in, len, 11);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, pos, in, len, 7, 3),
			 (long)len);
	memset(out, 0xaa, len);
	assert_int_equal(do_io(e, FOLIO_IO_READ, pos, out, len, 5, 4),
			 (long)len);
	assert_memory_equal(in, out, len);
	raw_range(prefix, chk, len, pos, OSIZE);
	assert_memory_equal(in, chk, len);
	/* Objects 0..3 hold it: 0 from pos, 3 up to the end. */
	assert_int_equal(raw_obj_size(prefix, 0), OSIZE);
	assert_int_equal(raw_obj_size(prefix, 3), (pos + len) % OSIZE);
	assert_int_equal(raw_obj_size(prefix, 4), -ENOENT);
	assert_int_equal(raw_header_size(prefix), pos + len);
	uint64_t size;
	assert_int_equal(folio_engine_rados_size(e, &size), 0);
	assert_int_equal(size, pos + len);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(folio_engine_free(e), 0);
	/* A new engine finds the size. */
	e = open_engine(prefix, OSIZE, 0);
	assert_int_equal(folio_engine_rados_size(e, &size), 0);
	assert_int_equal(size, pos + len);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
	/* Another stripe size is refused. */
	struct folio_rados_opts o = {.sz = sizeof(o), .conf_path = conf,
				     .pool = pool, .prefix = prefix,
				     .object_size = 2 * OSIZE};
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	free(in);
	free(out);
	free(chk);
}

/* Holes: a missing object and the bytes past a short one read as zeros
 * (whatever the buffer held). */
static void test_holes(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "holes");
	struct folio_engine *e = open_engine(prefix, OSIZE, 0);
	char in[1000];
	fill(in, sizeof(in), 5);
	uint64_t pos = 3 * OSIZE + 100;
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, pos, in, sizeof(in), 1, 0),
			 (long)sizeof(in));
	size_t len = 4 * OSIZE;
	char *out = xmalloc(len);
	memset(out, 0x55, len);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, len, 3, 9),
			 (long)len);
	assert_true(all_bytes(out, pos, 0));
	assert_memory_equal(out + pos, in, sizeof(in));
	assert_true(all_bytes(out + pos + sizeof(in), len - pos - sizeof(in), 0));
	assert_int_equal(raw_obj_size(prefix, 0), -ENOENT);
	assert_int_equal(raw_obj_size(prefix, 3), 1100);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(out);
}

/* Truncate mid-object: the size goes down, the object holding the new end
 * is cut there, the ones past it are removed; growing reads zeros. */
static void test_truncate(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "truncate");
	struct folio_engine *e = open_engine(prefix, OSIZE, 0);
	size_t len = 5 * OSIZE;
	char *in = xmalloc(len), *out = xmalloc(len);
	fill(in, len, 21);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, in, len, 2, 0), (long)len);
	uint64_t cut = 2 * OSIZE + 777;
	assert_int_equal(eng_truncate(e, cut), 0);
	assert_int_equal(raw_header_size(prefix), cut);
	assert_int_equal(raw_obj_size(prefix, 1), OSIZE);
	assert_int_equal(raw_obj_size(prefix, 2), 777);
	assert_int_equal(raw_obj_size(prefix, 3), -ENOENT);
	assert_int_equal(raw_obj_size(prefix, 4), -ENOENT);
	/* At an object boundary the object there goes too. */
	assert_int_equal(eng_truncate(e, OSIZE), 0);
	assert_int_equal(raw_obj_size(prefix, 1), -ENOENT);
	assert_int_equal(raw_obj_size(prefix, 0), OSIZE);
	assert_int_equal(eng_truncate(e, len), 0);
	assert_int_equal(raw_header_size(prefix), len);
	memset(out, 0x77, len);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, len, 1, 0), (long)len);
	assert_memory_equal(out, in, OSIZE);
	assert_true(all_bytes(out + OSIZE, len - OSIZE, 0));
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(raw_obj_size(prefix, 0), -ENOENT);
	assert_int_equal(raw_header_size(prefix), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(in);
	free(out);
}

/* The header's high-water mark; -ENOENT without one. */
static int64_t raw_high(const char *prefix)
{
	char buf[32];
	int r = rados_getxattr(rio, prefix, "folio.high_water", buf,
			       sizeof(buf) - 1);
	if (r < 0)
		return r;
	buf[r] = 0;
	return (int64_t)strtoull(buf, NULL, 10);
}

/* A write past the mark raises it, to the end of the stripe object it
 * reaches, before its data lands; a shrink whose trim succeeded brings
 * it down to the size. */
static void test_high_water(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "high_water");
	struct folio_engine *e = open_engine(prefix, OSIZE, 0);
	char buf[4096];
	fill(buf, sizeof(buf), 3);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 2 * OSIZE + 100, buf,
			       sizeof(buf), 1, 0), (long)sizeof(buf));
	assert_int_equal(raw_high(prefix), 3 * OSIZE);
	/* Below the mark: no header write. */
	assert_int_equal(rados_rmxattr(rio, prefix, "folio.high_water"), 0);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 1, 0),
			 (long)sizeof(buf));
	assert_int_equal(raw_high(prefix), -ENODATA);
	assert_int_equal(eng_truncate(e, 4096), 0);
	assert_int_equal(raw_high(prefix), 4096);
	assert_int_equal(folio_engine_free(e), 0);
}

/*
 * A process that died between a shrink's size update and its trim (or
 * after a write's data landed and before its size did) leaves bytes past
 * the size. The next engine on the object must not let a grow expose
 * them: modelled here by putting stale bytes past the size through the
 * raw handle, with the mark a crashed engine would have left.
 */
static void test_crash_leftovers(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "crash_leftovers");
	size_t len = 3 * OSIZE;
	char *stale = xmalloc(len), *out = xmalloc(len);
	fill(stale, len, 9);
	for (uint64_t i = 0; i < 3; i++) {
		char name[256];
		snprintf(name, sizeof(name), "%s.%016" PRIx64, prefix, i);
		assert_int_equal(rados_write_full(rio, name, stale + i * OSIZE,
						  OSIZE), 0);
	}
	assert_int_equal(rados_setxattr(rio, prefix, "folio.size", "5000", 4),
			 0);
	char hw[24];
	int n = snprintf(hw, sizeof(hw), "%zu", len);
	assert_int_equal(rados_setxattr(rio, prefix, "folio.high_water", hw,
					(size_t)n), 0);
	struct folio_engine *e = open_engine(prefix, OSIZE, 0);
	uint64_t size = 0;
	assert_int_equal(folio_engine_rados_size(e, &size), 0);
	assert_int_equal(size, 5000);
	assert_int_equal(eng_truncate(e, len), 0);
	memset(out, 0x55, len);
	assert_int_equal(do_io(e, FOLIO_IO_READ, 0, out, len, 1, 0), (long)len);
	assert_memory_equal(out, stale, 5000);
	assert_true(all_bytes(out + 5000, len - 5000, 0));
	raw_range(prefix, out, len, 0, OSIZE);
	assert_true(all_bytes(out + 5000, len - 5000, 0));
	/* Trimmed at open, so the mark came down to the size then. */
	assert_int_equal(raw_high(prefix), 5000);
	assert_int_equal(folio_engine_free(e), 0);
	free(stale);
	free(out);
}

/* Writes submitted from completions (librados' threads), many requests
 * in flight past the depth, and durable writes. */
static void test_completions(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "completions");
	struct folio_rados_opts o = {.sz = sizeof(o), .conf_path = conf,
				     .pool = pool, .prefix = prefix,
				     .object_size = 4096, .depth = 4};
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_rados(&e, &o), 0);
	chain_finish(chain_run(e, CHAIN_MAX, 77));

	enum { N = 48 };
	struct tio *t = xmalloc(N * sizeof(*t));
	char *buf = xmalloc(N * 3000);
	fill(buf, N * 3000, 8);
	for (int i = 0; i < N; i++) {
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 3000,
			 buf + i * 3000, 3000, 2, (uint64_t)i + 1);
		if (i % 3 == 0)
			t[i].rq.io.flags |= FOLIO_IO_DURABLE;
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	wait_all(e, t, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&t[i].result), 3000);
	assert_int_equal(eng_flush(e), 0);
	char *chk = xmalloc(N * 3000);
	raw_range(prefix, chk, N * 3000, 0, 4096);
	assert_memory_equal(chk, buf, N * 3000);
	assert_int_equal(raw_header_size(prefix), N * 3000);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(t);
	free(buf);
	free(chk);
}

/* The byte-array model through a mapping over the remote object: random
 * writes, reads, truncates, syncs and invalidates; what the store holds
 * after each sync is the model. */
static void test_model(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "model");
	uint64_t seed = test_seed("test_model");
	struct folio_engine *e = open_engine(prefix, 16384, 0);
	enum { MAX = 256 * 1024 };
	unsigned char *model = calloc(1, MAX), *buf = xmalloc(MAX),
		      *chk = xmalloc(MAX);
	uint64_t size = 0;
	struct folio_mapping_opts mo = {.sz = sizeof(mo), .engine = e,
					.max_folio_size = 65536};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	unsigned iters = test_iters(400, 60);
	for (unsigned i = 0; i < iters; i++) {
		unsigned op = (unsigned)test_rand_below(&seed, 100);
		uint64_t pos = test_rand_below(&seed, MAX);
		size_t len = (size_t)test_rand_below(&seed, 20000) + 1;
		len = (size_t)test_min_u64(len, MAX - pos);
		if (op < 45) {
			fill(buf, len, seed);
			assert_int_equal(folio_mapping_write(m, buf, len, pos),
					 (ssize_t)len);
			memcpy(model + pos, buf, len);
			size = size > pos + len ? size : pos + len;
		} else if (op < 75) {
			ssize_t want = pos >= size ? 0
				: (ssize_t)test_min_u64(len, size - pos);
			assert_int_equal(folio_mapping_read(m, buf, len, pos),
					 want);
			assert_memory_equal(buf, model + pos, (size_t)want);
		} else if (op < 83) {
			uint64_t to = test_rand_below(&seed, MAX);
			assert_int_equal(folio_mapping_truncate(m, to), 0);
			if (to < size)
				memset(model + to, 0, size - to);
			size = to;
		} else if (op < 90) {
			/* Drop the cache so reads come from the store. */
			assert_int_equal(folio_mapping_sync(m, &cur), 0);
			assert_int_equal(folio_mapping_invalidate(m, 0, 0, 0), 0);
		} else {
			assert_int_equal(folio_mapping_sync(m, &cur), 0);
			assert_int_equal(raw_header_size(prefix), size);
			raw_range(prefix, chk, size, 0, 16384);
			assert_memory_equal(chk, model, size);
		}
	}
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	raw_range(prefix, chk, size, 0, 16384);
	assert_memory_equal(chk, model, size);
	uint64_t stored;
	assert_int_equal(folio_engine_rados_size(e, &stored), 0);
	assert_int_equal(stored, size);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
	free(model);
	free(buf);
	free(chk);
}

/* The size grows only once the data is stored: a write the OSD refuses
 * (past its largest object, osd_max_object_size, 128 MiB by default)
 * leaves the header's size where it was. Growing the size first, or at
 * the same time, would leave a size over bytes that were never stored. */
static void test_size_after_failed_write(void **state)
{
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "size_after_failed_write");
	struct folio_engine *e = open_engine(prefix, UINT64_C(1) << 30, 0);
	char buf[4096];
	fill(buf, sizeof(buf), 3);
	assert_int_equal(do_io(e, FOLIO_IO_WRITE, 0, buf, sizeof(buf), 1, 0),
			 4096);
	long r = do_io(e, FOLIO_IO_WRITE, UINT64_C(512) << 20, buf,
		       sizeof(buf), 2, 0);
	printf("# a write past the OSD's largest object: %ld\n", r);
	assert_true(r < 0);
	assert_int_equal(raw_header_size(prefix), 4096);
	uint64_t size;
	assert_int_equal(folio_engine_rados_size(e, &size), 0);
	assert_int_equal(size, 4096);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- fault: the OSD stops answering ---------------------------------- */

static pid_t osd_pid(void)
{
	char path[512];
	snprintf(path, sizeof(path), "%.*s/osd.0.pid",
		 (int)(strrchr(conf, '/') - conf), conf);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int pid = -1;
	if (fscanf(f, "%d", &pid) != 1)
		pid = -1;
	fclose(f);
	return pid;
}

static pid_t stopped_osd;

static void osd_resume(void)
{
	if (stopped_osd > 0)
		kill(stopped_osd, SIGCONT);
	stopped_osd = 0;
}

/* A paused OSD (SIGSTOP: memstore would lose the data on a restart, and
 * a paused daemon is exactly "stops answering"): a sync fails with the
 * timeout instead of hanging, what was synced before stays, the data
 * stays dirty, and once the OSD answers again the next sync writes it. */
static void test_osd_stopped(void **state)
{
	pid_t pid = osd_pid();
	if (pid <= 0) {
		printf("# no OSD pid file next to %s: fault test not run\n",
		       conf);
		return;
	}
	char prefix[64];
	prefix_of(prefix, sizeof(prefix), "osd_stopped");
	struct folio_engine *e = open_engine(prefix, OSIZE, 2);
	struct folio_mapping_opts mo = {.sz = sizeof(mo), .engine = e};
	struct folio_mapping *m;
	assert_int_equal(folio_mapping_new(&m, &mo), 0);
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	char a[20000], b[30000], chk[30000];
	fill(a, sizeof(a), 1);
	fill(b, sizeof(b), 2);
	assert_int_equal(folio_mapping_write(m, a, sizeof(a), 0),
			 (ssize_t)sizeof(a));
	assert_int_equal(folio_mapping_sync(m, &cur), 0);

	assert_int_equal(kill(pid, SIGSTOP), 0);
	stopped_osd = pid;
	assert_int_equal(folio_mapping_write(m, b, sizeof(b), 10000),
			 (ssize_t)sizeof(b));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int r = folio_mapping_sync(m, &cur);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	osd_resume();
	double s = (double)(t1.tv_sec - t0.tv_sec) +
		   (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("# sync with the OSD paused: %d after %.2f s\n", r, s);
	assert_int_equal(r, -ETIMEDOUT);
	assert_true(s < 20);
	/* Still dirty: written again now that the OSD answers. */
	struct folio_mapping_stats st = test_mapping_stats(m);
	assert_true(st.dirty_bytes > 0);
	assert_int_equal(folio_mapping_sync(m, &cur), 0);
	raw_range(prefix, chk, 10000, 0, OSIZE);
	assert_memory_equal(chk, a, 10000);
	raw_range(prefix, chk, sizeof(b), 10000, OSIZE);
	assert_memory_equal(chk, b, sizeof(b));
	assert_int_equal(raw_header_size(prefix), 40000);
	assert_int_equal(folio_mapping_truncate(m, 0), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- bad input ------------------------------------------------------- */

static void test_bad_input(void **state)
{
	struct folio_engine *e = (struct folio_engine *)0x1;
	struct folio_rados_opts ok = {.sz = sizeof(ok), .conf_path = conf,
				      .pool = pool, .prefix = "x"};
	struct folio_rados_opts o = ok;
	assert_int_equal(folio_engine_rados(NULL, &ok), -EINVAL);
	assert_int_equal(folio_engine_rados(&e, NULL), -EINVAL);
	o.pool = NULL;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o = ok;
	o.prefix = "";
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	char longp[300];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = 0;
	o.prefix = longp;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o = ok;
	o.object_size = 5000;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o.object_size = 2048;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o = ok;
	o.depth = 5000;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o = ok;
	o.cluster = raw;
	o.timeout = 5;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	o = ok;
	o.sz = 8;
	assert_int_equal(folio_engine_rados(&e, &o), -EINVAL);
	struct {
		struct folio_rados_opts o;
		int tail;
	} big = {ok, 1};
	big.o.sz = sizeof(big);
	assert_int_equal(folio_engine_rados(&e, &big.o), -E2BIG);
	assert_ptr_equal(e, (struct folio_engine *)0x1);
	o = ok;
	o.pool = "folio-no-such-pool";
	assert_int_equal(folio_engine_rados(&e, &o), -ENOENT);
	assert_ptr_equal(e, (struct folio_engine *)0x1);

	/* A caller-owned handle: used, and left to the caller. */
	o = ok;
	o.conf_path = NULL;
	o.cluster = raw;
	o.prefix = "bad_input_owned";
	assert_int_equal(folio_engine_rados(&e, &o), 0);
	uint64_t size;
	assert_int_equal(folio_engine_rados_size(NULL, &size), -EINVAL);
	assert_int_equal(folio_engine_rados_size(e, NULL), -EINVAL);
	struct tio t;
	char buf[16];
	tio_prep(&t, FOLIO_IO_READ, 0, buf, sizeof(buf), 1, 0);
	t.rq.io.flags = FOLIO_IO_DURABLE;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	t.rq.io.flags = 0;
	t.rq.io.len = 17;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	assert_int_equal(eng_truncate(e, FOLIO_MAX_POS + 1), -EINVAL);
	assert_int_equal(folio_engine_free(e), 0);
	/* A mem engine is not a RADOS engine. */
	struct folio_engine *mem;
	assert_int_equal(folio_engine_mem(&mem, 4096), 0);
	assert_int_equal(folio_engine_rados_size(mem, &size), -EINVAL);
	assert_int_equal(folio_engine_free(mem), 0);
	/* The raw handle still works. */
	assert_int_equal(raw_obj_size("x", 0), -ENOENT);
}

int main(void)
{
	conf = getenv("FOLIO_TEST_CEPH_CONF");
	pool = getenv("FOLIO_TEST_CEPH_POOL");
	if (!pool || !*pool)
		pool = "folio";
	if (!conf || !*conf) {
		printf("1..0 # SKIP FOLIO_TEST_CEPH_CONF is not set (scripts/"
		       "test.sh starts a cluster with scripts/ceph-cluster.sh)\n");
		return 0;
	}
	if (rados_create(&raw, "admin") || rados_conf_read_file(raw, conf) ||
	    rados_conf_set(raw, "rados_osd_op_timeout", "30") ||
	    rados_connect(raw) || rados_ioctx_create(raw, pool, &rio)) {
		printf("1..0 # SKIP no cluster answers at %s\n", conf);
		return 0;
	}
	atexit(osd_resume);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_holes),
		cmocka_unit_test(test_truncate),
		cmocka_unit_test(test_high_water),
		cmocka_unit_test(test_crash_leftovers),
		cmocka_unit_test(test_completions),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_size_after_failed_write),
		cmocka_unit_test(test_osd_stopped),
		cmocka_unit_test(test_bad_input),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	osd_resume();
	rados_ioctx_destroy(rio);
	rados_shutdown(raw);
	return r;
}
