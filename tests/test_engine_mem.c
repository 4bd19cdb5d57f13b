/* SPDX-License-Identifier: MIT */
/*
 * Tests of the mem engine through the public API, with the request helpers
 * of engine_test_util.h (no mapping layer needed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "folio_state_mem.h"
#include "test_util.h"

/* A request whose device place differs from its file position, as a map
 * gives; its result. */
static long io_at(struct folio_engine *e, enum folio_io_op op, uint64_t pos,
		  uint64_t dev_pos, void *buf, size_t len, int nseg)
{
	struct tio t;
	tio_prep(&t, op, pos, buf, len, nseg, 0);
	t.rq.io.dev_pos = dev_pos;
	long ret = tio_run(e, &t);
	tio_free(&t);
	return ret;
}

static long wr(struct folio_engine *e, uint64_t pos, const void *buf,
	       size_t len)
{
	return do_io(e, FOLIO_IO_WRITE, pos, (void *)buf, len, 3, 0);
}

static long rd(struct folio_engine *e, uint64_t pos, void *buf, size_t len)
{
	return do_io(e, FOLIO_IO_READ, pos, buf, len, 3, 0);
}

static struct folio_mem_stats stats(struct folio_engine *e)
{
	struct folio_mem_stats st = {.sz = sizeof(st)};
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	return st;
}

static struct folio_engine *mem_new(uint64_t capacity)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_mem(&e, capacity), 0);
	assert_non_null(e);
	return e;
}

/* ---- basic data path ------------------------------------------------ */

static void test_round_trip(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char in[10000], out[10000], peek[10000];
	fill(in, sizeof(in), 1);
	/* Straddles a 64 KiB chunk boundary. */
	uint64_t pos = 65536 - 3000;
	assert_int_equal(wr(e, pos, in, sizeof(in)), (long)sizeof(in));
	memset(out, 0xee, sizeof(out));
	assert_int_equal(rd(e, pos, out, sizeof(out)), (long)sizeof(out));
	assert_memory_equal(in, out, sizeof(in));
	assert_int_equal(folio_engine_mem_peek(e, peek, sizeof(peek), pos), 0);
	assert_memory_equal(in, peek, sizeof(in));

	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.size, pos + sizeof(in));
	assert_int_equal(st.write_requests, 1);
	assert_int_equal(st.write_bytes, sizeof(in));
	assert_int_equal(st.read_requests, 1);
	assert_int_equal(st.read_bytes, sizeof(out));
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.mem_bytes, 2 * 65536);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_zero_length(void **state)
{
	struct folio_engine *e = mem_new(4096);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 100, 100, NULL, 0, 0), 0);
	assert_int_equal(io_at(e, FOLIO_IO_READ, 100, 100, NULL, 0, 0), 0);
	assert_int_equal(stats(e).size, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_read_past_size(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char data[100], buf[8192];
	fill(data, sizeof(data), 2);
	assert_int_equal(folio_engine_mem_poke(e, data, sizeof(data), 0), 0);
	assert_int_equal(stats(e).size, 100);

	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	assert_true(all_bytes(buf + 100, sizeof(buf) - 100, 0));

	/* Far past the size, and past the capacity. */
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(rd(e, 500000, buf, sizeof(buf)), (long)sizeof(buf));
	assert_true(all_bytes(buf, sizeof(buf), 0));
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(rd(e, 4 << 20, buf, sizeof(buf)), (long)sizeof(buf));
	assert_true(all_bytes(buf, sizeof(buf), 0));

	/* peek past the size gives zeros as well. */
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(folio_engine_mem_peek(e, buf, 200, 0), 0);
	assert_memory_equal(buf, data, sizeof(data));
	assert_true(all_bytes(buf + 100, 100, 0));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_write_extends_with_zero_gap(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char a[300], buf[2000];
	fill(a, sizeof(a), 3);
	assert_int_equal(wr(e, 1000, a, sizeof(a)), (long)sizeof(a));
	assert_int_equal(stats(e).size, 1300);
	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), (long)sizeof(buf));
	assert_true(all_bytes(buf, 1000, 0));
	assert_memory_equal(buf + 1000, a, sizeof(a));
	assert_true(all_bytes(buf + 1300, 700, 0));
	/* A write below the size does not shrink it. */
	assert_int_equal(wr(e, 0, a, 10), 10);
	assert_int_equal(stats(e).size, 1300);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_capacity(void **state)
{
	const uint64_t cap = 1 << 20;
	struct folio_engine *e = mem_new(cap);
	char buf[4096], chk[4096];
	fill(buf, sizeof(buf), 4);
	assert_int_equal(wr(e, cap - 4096, buf, 4096), 4096);
	assert_int_equal(stats(e).size, cap);
	/* One byte over: refused as a whole, nothing written. */
	char other[4096];
	fill(other, sizeof(other), 5);
	assert_int_equal(wr(e, cap - 4095, other, 4096), -ENOSPC);
	assert_int_equal(wr(e, cap, other, 1), -ENOSPC);
	assert_int_equal(folio_engine_mem_peek(e, chk, 4096, cap - 4096), 0);
	assert_memory_equal(chk, buf, 4096);
	/* Reads past the capacity are fine (zeros). */
	memset(chk, 1, sizeof(chk));
	assert_int_equal(rd(e, cap, chk, 4096), 4096);
	assert_true(all_bytes(chk, 4096, 0));
	assert_int_equal(eng_truncate(e, cap + 1), -EFBIG);
	assert_int_equal(stats(e).size, cap);
	assert_int_equal(folio_engine_mem_poke(e, buf, 2, cap - 1), -ENOSPC);
	assert_int_equal(folio_engine_mem_peek(e, chk, 2, cap - 1), -ERANGE);
	assert_int_equal(folio_engine_free(e), 0);

	/* Capacity of one byte. */
	e = mem_new(1);
	assert_int_equal(wr(e, 0, buf, 1), 1);
	assert_int_equal(wr(e, 0, buf, 2), -ENOSPC);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_sparse_huge(void **state)
{
	const uint64_t cap = FOLIO_MEM_MAX_CAPACITY;
	struct folio_engine *e = mem_new(cap);
	char a[4096], b[4096], c[4096], buf[4096];
	fill(a, sizeof(a), 6);
	fill(b, sizeof(b), 7);
	fill(c, sizeof(c), 8);
	const uint64_t pb = (cap >> 1) + 12345, pc = cap - 4096;
	assert_int_equal(wr(e, 0, a, 4096), 4096);
	assert_int_equal(wr(e, pb, b, 4096), 4096);
	assert_int_equal(wr(e, pc, c, 4096), 4096);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.size, cap);
	assert_int_equal(st.mem_bytes, 3 * 65536);

	assert_int_equal(rd(e, pb, buf, 4096), 4096);
	assert_memory_equal(buf, b, 4096);
	assert_int_equal(rd(e, pc, buf, 4096), 4096);
	assert_memory_equal(buf, c, 4096);
	/* Between the islands: zeros, nothing allocated. */
	memset(buf, 1, sizeof(buf));
	assert_int_equal(rd(e, cap >> 2, buf, 4096), 4096);
	assert_true(all_bytes(buf, 4096, 0));
	assert_int_equal(stats(e).mem_bytes, 3 * 65536);

	/* Shrinking frees the islands past the size; growing back reads
	 * zeros where they were. */
	assert_int_equal(eng_truncate(e, 100), 0);
	st = stats(e);
	assert_int_equal(st.size, 100);
	assert_int_equal(st.mem_bytes, 65536);
	assert_int_equal(st.truncates, 1);
	assert_int_equal(eng_truncate(e, cap), 0);
	memset(buf, 1, sizeof(buf));
	assert_int_equal(rd(e, pb, buf, 4096), 4096);
	assert_true(all_bytes(buf, 4096, 0));
	assert_int_equal(rd(e, 0, buf, 4096), 4096);
	assert_memory_equal(buf, a, 100);
	assert_true(all_bytes(buf + 100, 4096 - 100, 0));
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(stats(e).mem_bytes, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_truncate_partial_chunk(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char a[200000], buf[200000];
	fill(a, sizeof(a), 9);
	assert_int_equal(wr(e, 0, a, sizeof(a)), (long)sizeof(a));
	assert_int_equal(eng_truncate(e, 70000), 0);
	assert_int_equal(stats(e).size, 70000);
	assert_int_equal(stats(e).mem_bytes, 2 * 65536);
	assert_int_equal(eng_truncate(e, sizeof(a)), 0);
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), (long)sizeof(buf));
	assert_memory_equal(buf, a, 70000);
	assert_true(all_bytes(buf + 70000, sizeof(buf) - 70000, 0));
	/* The store past the size is really zero, not just masked. */
	assert_int_equal(folio_engine_mem_peek(e, buf, sizeof(buf), 0), 0);
	assert_true(all_bytes(buf + 70000, sizeof(buf) - 70000, 0));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_flush_counts(void **state)
{
	struct folio_engine *e = mem_new(4096);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(stats(e).flushes, 2);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- faults --------------------------------------------------------- */

static struct folio_mem_fault fault(unsigned ops, uint64_t skip,
				    uint64_t count, int error,
				    size_t short_len)
{
	struct folio_mem_fault f = {
		.sz = sizeof(f), .ops = ops, .skip = skip, .count = count,
		.error = error, .short_len = short_len,
	};
	return f;
}

static void test_fault_nth(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_WRITE, 2, 1, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	char buf[512], chk[512];
	fill(buf, sizeof(buf), 10);
	long expect[6] = {512, 512, -EIO, 512, 512, 512};
	for (int i = 0; i < 6; i++) {
		/* Reads do not count for a write rule. */
		assert_int_equal(rd(e, 0, chk, sizeof(chk)), 512);
		assert_int_equal(wr(e, (uint64_t)i * 512, buf, 512), expect[i]);
	}
	memset(chk, 1, sizeof(chk));
	assert_int_equal(folio_engine_mem_peek(e, chk, 512, 2 * 512), 0);
	assert_true(all_bytes(chk, 512, 0));
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.faults, 1);
	assert_int_equal(st.write_requests, 6);
	assert_int_equal(st.write_bytes, 5 * 512);

	/* count 0: every match after the skip, until cleared. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	f = fault(FOLIO_MEM_OP_READ, 1, 0, -ENXIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(rd(e, 0, chk, 512), 512);
	for (int i = 0; i < 5; i++)
		assert_int_equal(rd(e, 0, chk, 512), -ENXIO);
	assert_int_equal(wr(e, 0, buf, 512), 512);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(rd(e, 0, chk, 512), 512);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_fault_read_error_leaves_buffer(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char data[1024], buf[1024];
	fill(data, sizeof(data), 11);
	assert_int_equal(folio_engine_mem_poke(e, data, sizeof(data), 0), 0);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), -EIO);
	assert_true(all_bytes(buf, sizeof(buf), 0x5a));
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	assert_int_equal(folio_engine_free(e), 0);
}

/* FOLIO_MEM_FAULT_APPLIED: the write lands in full (bytes and size) and
 * its completion reports the error; only on write rules with an error. */
static void test_fault_applied_write(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char data[1024], buf[1024];
	fill(data, sizeof(data), 12);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_WRITE, 0, 1, -EPIPE, 0);
	f.flags = FOLIO_MEM_FAULT_APPLIED;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 8192, data, sizeof(data)), -EPIPE);
	assert_int_equal(stats(e).size, 8192 + sizeof(data));
	memset(buf, 0, sizeof(buf));
	assert_int_equal(rd(e, 8192, buf, sizeof(buf)), (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	assert_int_equal(wr(e, 0, data, sizeof(data)), (long)sizeof(data));
	memset(buf, 0, sizeof(buf));
	assert_int_equal(rd(e, 0, buf, sizeof(buf)), (long)sizeof(buf));
	assert_memory_equal(buf, data, sizeof(data));
	/* Bad rules change nothing. */
	uint64_t before = stats(e).faults;
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, 0, 100);
	f.flags = FOLIO_MEM_FAULT_APPLIED; /* a short write is not a failure */
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_WRITE | FOLIO_MEM_OP_READ, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_APPLIED;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_APPLIED;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_LOSE;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	assert_int_equal(wr(e, 0, data, sizeof(data)), (long)sizeof(data));
	assert_int_equal(stats(e).faults, before);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_fault_range(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_READ, 0, 0, -EIO, 0);
	f.pos = 8192;
	f.len = 4096;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	char buf[4096];
	assert_int_equal(rd(e, 0, buf, 4096), 4096);
	assert_int_equal(rd(e, 4096, buf, 4096), 4096);    /* ends at 8192 */
	assert_int_equal(rd(e, 4097, buf, 4096), -EIO);    /* overlaps 1 byte */
	assert_int_equal(rd(e, 8192, buf, 4096), -EIO);
	assert_int_equal(rd(e, 12287, buf, 1), -EIO);
	assert_int_equal(rd(e, 12288, buf, 4096), 4096);
	assert_int_equal(io_at(e, FOLIO_IO_READ, 9000, 9000, NULL, 0, 0),
			 -EIO); /* zero length inside the range */
	assert_int_equal(io_at(e, FOLIO_IO_READ, 100, 100, NULL, 0, 0), 0);
	/* Writes in the range are untouched by a read rule. */
	assert_int_equal(wr(e, 8192, buf, 4096), 4096);
	assert_int_equal(stats(e).faults, 4);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_fault_short(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char old[4096], neu[4096], buf[4096];
	fill(old, sizeof(old), 12);
	fill(neu, sizeof(neu), 13);
	assert_int_equal(folio_engine_mem_poke(e, old, 4096, 0), 0);

	struct folio_mem_fault f = fault(FOLIO_MEM_OP_WRITE, 0, 1, 0, 1000);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 0, neu, 4096), 1000);
	assert_int_equal(folio_engine_mem_peek(e, buf, 4096, 0), 0);
	assert_memory_equal(buf, neu, 1000);
	assert_memory_equal(buf + 1000, old + 1000, 4096 - 1000);

	/* A short write past the size extends it by exactly the bytes
	 * transferred. */
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, 0, 777);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 4096, neu, 4096), 777);
	assert_int_equal(stats(e).size, 4096 + 777);

	/* Short read: exactly short_len bytes land, the rest is untouched. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, 0, 1234);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	memset(buf, 0xcc, sizeof(buf));
	assert_int_equal(rd(e, 0, buf, 4096), 1234);
	assert_memory_equal(buf, neu, 1000);
	assert_memory_equal(buf + 1000, old + 1000, 234);
	assert_true(all_bytes(buf + 1234, 4096 - 1234, 0xcc));

	/* short_len >= len: the whole request goes through. */
	f = fault(FOLIO_MEM_OP_READ, 0, 1, 0, 100000);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(rd(e, 0, buf, 4096), 4096);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_fault_flush_truncate(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char buf[4096];
	fill(buf, sizeof(buf), 14);
	assert_int_equal(wr(e, 0, buf, 4096), 4096);

	struct folio_mem_fault f = fault(FOLIO_MEM_OP_FLUSH, 1, 2, -EIO, 0);
	f.pos = 1 << 30; /* the range does not matter for flush */
	f.len = 1;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(eng_flush(e), -EIO);
	assert_int_equal(eng_flush(e), -EIO);
	assert_int_equal(eng_flush(e), 0);

	f = fault(FOLIO_MEM_OP_TRUNCATE, 0, 1, -EROFS, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(eng_truncate(e, 100), -EROFS);
	assert_int_equal(stats(e).size, 4096); /* unchanged */
	assert_int_equal(eng_truncate(e, 100), 0);
	assert_int_equal(stats(e).size, 100);

	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.flushes, 4);
	assert_int_equal(st.truncates, 2);
	assert_int_equal(st.faults, 3);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_fault_order_and_limit(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	/* Both fire on the first write: the rule added first decides, and
	 * the second still counts the match. */
	struct folio_mem_fault f1 = fault(FOLIO_MEM_OP_WRITE, 0, 1, -EIO, 0);
	struct folio_mem_fault f2 = fault(FOLIO_MEM_OP_WRITE, 0, 2, -ENOSPC, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f1), 0);
	assert_int_equal(folio_engine_mem_inject(e, &f2), 0);
	char buf[512] = {0};
	assert_int_equal(wr(e, 0, buf, 512), -EIO);
	assert_int_equal(wr(e, 0, buf, 512), -ENOSPC);
	assert_int_equal(wr(e, 0, buf, 512), 512);
	assert_int_equal(stats(e).faults, 2);

	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_READ, 1000, 1, -EIO, 0);
	for (int i = 0; i < 64; i++)
		assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -ENOSPC);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- map checking --------------------------------------------------- */

static int eng_map(struct folio_engine *e, uint64_t pos,
		   struct folio_extent *ext)
{
	if (!e->ops.map)
		return -EOPNOTSUPP;
	return e->ops.map(folio_engine_ctx(e), pos, 1, ext);
}

static void test_map_identity(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char buf[8192], chk[8192];
	fill(buf, sizeof(buf), 15);
	struct folio_extent ext;
	/* No map: dev_pos must equal pos. */
	assert_int_equal(eng_map(e, 0, &ext), -EOPNOTSUPP);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 0, 512, buf, 512, 1), -EIO);
	assert_int_equal(stats(e).misdirected, 1);
	assert_int_equal(stats(e).size, 0);

	assert_int_equal(folio_engine_mem_set_map(e, 4096, false), 0);
	assert_int_equal(eng_map(e, 5000, &ext), 0);
	assert_int_equal(ext.pos, 4096);
	assert_int_equal(ext.len, 4096);
	assert_int_equal(ext.dev_pos, 4096);
	assert_int_equal(ext.flags, 0);
	assert_int_equal(stats(e).map_calls, 1);
	/* Identity extents are contiguous: crossing them is fine. */
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 2048, 2048, buf, 8192, 4),
			 8192);
	assert_int_equal(io_at(e, FOLIO_IO_READ, 2048, 2049, chk, 8192, 4),
			 -EIO);
	assert_int_equal(io_at(e, FOLIO_IO_READ, 2048, 2048, chk, 8192, 4),
			 8192);
	assert_memory_equal(chk, buf, 8192);
	assert_int_equal(stats(e).misdirected, 2);
	/* The map cannot change under data. */
	assert_int_equal(folio_engine_mem_set_map(e, 8192, true), -EBUSY);
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 0, false), 0);
	assert_int_equal(eng_map(e, 0, &ext), -EOPNOTSUPP);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_map_scatter(void **state)
{
	/* The last extent pair is incomplete: file extent 2 lives at device
	 * extent 3, past the capacity. */
	const uint64_t E = 4096, cap = 2 * E + 100;
	struct folio_engine *e = mem_new(cap);
	assert_int_equal(folio_engine_mem_set_map(e, E, true), 0);
	struct folio_extent ext;
	assert_int_equal(eng_map(e, 100, &ext), 0);
	assert_int_equal(ext.pos, 0);
	assert_int_equal(ext.dev_pos, E);
	assert_int_equal(eng_map(e, E + 1, &ext), 0);
	assert_int_equal(ext.pos, E);
	assert_int_equal(ext.dev_pos, 0);
	assert_int_equal(eng_map(e, 2 * E, &ext), 0);
	assert_int_equal(ext.dev_pos, 3 * E);

	char a[4096], b[4096], c[100], buf[2 * 4096 + 100];
	fill(a, sizeof(a), 16);
	fill(b, sizeof(b), 17);
	fill(c, sizeof(c), 18);
	/* Wrong places fail... */
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 0, 0, a, E, 2), -EIO);
	/* ...and so does running from one extent into the next, even when
	 * it starts at the right place. */
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, E - 512, 2 * E - 512, a,
			       1024, 2), -EIO);
	assert_int_equal(stats(e).misdirected, 2);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 0, E, a, E, 2), (long)E);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, E, 0, b, E, 2), (long)E);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 2 * E, 3 * E, c, 100, 1),
			 100);
	assert_int_equal(stats(e).size, cap);

	/* Peek translates: the file reads back in file order. */
	assert_int_equal(folio_engine_mem_peek(e, buf, sizeof(buf), 0), 0);
	assert_memory_equal(buf, a, E);
	assert_memory_equal(buf + E, b, E);
	assert_memory_equal(buf + 2 * E, c, 100);
	/* A read at its device place gets the data. */
	char chk[4096];
	assert_int_equal(io_at(e, FOLIO_IO_READ, E, 0, chk, E, 3), (long)E);
	assert_memory_equal(chk, b, E);

	/* Truncate zeroes by file position. */
	assert_int_equal(eng_truncate(e, E + 10), 0);
	assert_int_equal(eng_truncate(e, cap), 0);
	assert_int_equal(folio_engine_mem_peek(e, buf, sizeof(buf), 0), 0);
	assert_memory_equal(buf, a, E);
	assert_memory_equal(buf + E, b, 10);
	assert_true(all_bytes(buf + E + 10, sizeof(buf) - E - 10, 0));
	assert_int_equal(folio_engine_free(e), 0);
}

/* Random single-extent writes through a scattered map against a model. */
static void test_map_scatter_random(void **state)
{
	uint64_t seed = test_seed("map_scatter_random");
	const uint64_t E = 512, cap = 64 * 1024;
	struct folio_engine *e = mem_new(cap);
	assert_int_equal(folio_engine_mem_set_map(e, E, true), 0);
	unsigned char *model = calloc(1, cap), *buf = xmalloc(cap);
	assert_non_null(model);
	assert_non_null(buf);
	uint64_t size = 0;
	unsigned iters = test_iters(2000, 200);
	for (unsigned i = 0; i < iters; i++) {
		uint64_t pos = test_rand_below(&seed, cap);
		uint64_t want = 1 + test_rand_below(&seed, E);
		size_t len = (size_t)MIN(E - (pos & (E - 1)), want);
		struct folio_extent ext;
		assert_int_equal(eng_map(e, pos, &ext), 0);
		uint64_t dev = ext.dev_pos + (pos - ext.pos);
		if (test_rand(&seed) & 1) {
			unsigned char tmp[512];
			fill(tmp, len, test_rand(&seed));
			assert_int_equal(io_at(e, FOLIO_IO_WRITE, pos, dev, tmp,
					       len, 1),
					 (long)len);
			memcpy(model + pos, tmp, len);
			size = MAX(size, pos + len);
		} else {
			unsigned char tmp[512];
			assert_int_equal(io_at(e, FOLIO_IO_READ, pos, dev, tmp,
					       len, 2),
					 (long)len);
			assert_memory_equal(tmp, model + pos, len);
		}
		if (test_rand_below(&seed, 100) == 0) {
			uint64_t ns = test_rand_below(&seed, cap);
			assert_int_equal(eng_truncate(e, ns), 0);
			if (ns < size)
				memset(model + ns, 0, size - ns);
			size = ns;
		}
	}
	assert_int_equal(stats(e).size, size);
	assert_int_equal(folio_engine_mem_peek(e, buf, cap, 0), 0);
	assert_memory_equal(buf, model, cap);
	assert_int_equal(stats(e).misdirected, 0);
	free(model);
	free(buf);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- completion modes ----------------------------------------------- */

#define POLL_N 64

/* Submit POLL_N writes and reap them with wait(); returns the completion
 * order in order[]. */
static void poll_run(uint64_t seed, unsigned *order)
{
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, seed), 0);
	static struct tio t[POLL_N];
	static char bufs[POLL_N][512];
	for (int i = 0; i < POLL_N; i++) {
		fill(bufs[i], 512, (uint64_t)i + 100);
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 512,
			 bufs[i], 512, 2, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	unsigned base = tio_completion_rank();
	/* Held: nothing completed, nothing stored yet. */
	for (int i = 0; i < POLL_N; i++)
		assert_int_equal(tio_done(&t[i]), 0);
	assert_int_equal(stats(e).inflight, POLL_N);
	assert_int_equal(stats(e).size, 0);
	int ndone = 0;
	while (ndone < POLL_N) {
		assert_int_equal(eng_wait(e), 0);
		int now = 0;
		for (int i = 0; i < POLL_N; i++)
			now += tio_done(&t[i]);
		assert_true(now > ndone); /* at least one per call */
		ndone = now;
	}
	assert_int_equal(eng_wait(e), 0); /* nothing in flight: at once */
	for (int i = 0; i < POLL_N; i++) {
		assert_int_equal(tio_done(&t[i]), 1);
		assert_int_equal(atomic_load(&t[i].result), 512);
		order[i] = atomic_load(&t[i].order) - base;
	}
	char chk[512];
	for (int i = 0; i < POLL_N; i++) {
		assert_int_equal(folio_engine_mem_peek(e, chk, 512,
						       (uint64_t)i * 512), 0);
		assert_memory_equal(chk, bufs[i], 512);
	}
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_poll_mode(void **state)
{
	uint64_t seed = test_seed("poll_mode");
	unsigned o1[POLL_N], o2[POLL_N];
	poll_run(seed, o1);
	poll_run(seed, o2);
	/* Same seed, same order; and not the submission order. */
	assert_memory_equal(o1, o2, sizeof(o1));
	int inversions = 0;
	for (int i = 1; i < POLL_N; i++)
		inversions += o1[i] < o1[i - 1];
	assert_true(inversions > 0);
}

/* Data moves at completion time, so a read held behind a write sees
 * whatever has completed when the read completes. */
/* inflight_writes counts the writes among the held requests, through
 * completion by wait() and by a power cut failing what is held. */
static void test_inflight_writes(void **state)
{
	(void)state;
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 3), 0);
	static char buf[3][512];
	struct tio t[3];
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 3; i++) {
			tio_prep(&t[i], i ? FOLIO_IO_READ : FOLIO_IO_WRITE,
				 (uint64_t)i * 512, buf[i], 512, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		struct folio_mem_stats st = stats(e);
		assert_int_equal(st.inflight, 3);
		assert_int_equal(st.inflight_writes, 1);
		if (round)
			assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
		wait_all(e, t, 3);
		st = stats(e);
		assert_int_equal(st.inflight, 0);
		assert_int_equal(st.inflight_writes, 0);
		for (int i = 0; i < 3; i++)
			tio_free(&t[i]);
	}
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_poll_data_at_completion(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 7), 0);
	char buf[512];
	fill(buf, sizeof(buf), 20);
	struct tio t;
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 512, 1, 0);
	assert_int_equal(eng_submit(e, &t), 0);
	memset(buf, 0x77, sizeof(buf)); /* changed while in flight */
	while (!tio_done(&t))
		assert_int_equal(eng_wait(e), 0);
	char chk[512];
	assert_int_equal(folio_engine_mem_peek(e, chk, 512, 0), 0);
	assert_true(all_bytes(chk, 512, 0x77));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_poll_faults_decided_at_submit(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 99), 0);
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_WRITE, 3, 2, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	struct tio t[8];
	char buf[512] = {0};
	for (int i = 0; i < 8; i++) {
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 512,
			 buf, 512, 1, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	/* Clearing the rules now changes nothing for what is held. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	for (;;) {
		int n = 0;
		for (int i = 0; i < 8; i++)
			n += tio_done(&t[i]);
		if (n == 8)
			break;
		assert_int_equal(eng_wait(e), 0);
	}
	for (int i = 0; i < 8; i++)
		assert_int_equal(atomic_load(&t[i].result),
				 i == 3 || i == 4 ? -EIO : 512);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_mode_switch_drains(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 1), 0);
	struct tio t[10];
	char buf[10][512];
	for (int i = 0; i < 10; i++) {
		fill(buf[i], 512, (uint64_t)i);
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 512,
			 buf[i], 512, 1, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_SYNC, 0), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(tio_done(&t[i]), 1);
		assert_int_equal(atomic_load(&t[i].result), 512);
	}
	assert_int_equal(stats(e).size, 10 * 512);
	assert_int_equal(stats(e).inflight, 0);

	/* POLL -> THREAD -> POLL -> THREAD -> SYNC with requests held. */
	enum folio_mem_mode seq[] = {FOLIO_MEM_THREAD, FOLIO_MEM_POLL,
				     FOLIO_MEM_THREAD, FOLIO_MEM_THREAD,
				     FOLIO_MEM_SYNC};
	for (size_t m = 0; m < sizeof(seq) / sizeof(seq[0]); m++) {
		for (int i = 0; i < 10; i++) {
			tio_prep(&t[i], FOLIO_IO_READ, (uint64_t)i * 512,
				 buf[i], 512, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(folio_engine_mem_set_mode(e, seq[m], m), 0);
		for (int i = 0; i < 10; i++) {
			while (!tio_done(&t[i]))
				assert_int_equal(eng_wait(e), 0);
			assert_int_equal(atomic_load(&t[i].result), 512);
		}
	}
	assert_int_equal(stats(e).inflight, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_destroy_held(void **state)
{
	enum folio_mem_mode modes[] = {FOLIO_MEM_POLL, FOLIO_MEM_THREAD};
	for (int m = 0; m < 2; m++) {
		struct folio_engine *e = mem_new(1 << 20);
		assert_int_equal(folio_engine_mem_set_mode(e, modes[m], 5), 0);
		enum { N = 200 };
		static struct tio t[N];
		static char buf[512];
		for (int i = 0; i < N; i++) {
			tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 512,
				 buf, 512, 1, 0);
			assert_int_equal(eng_submit(e, &t[i]), 0);
		}
		assert_int_equal(folio_engine_free(e), 0);
		int canceled = 0;
		for (int i = 0; i < N; i++) {
			assert_int_equal(tio_done(&t[i]), 1);
			long r = atomic_load(&t[i].result);
			assert_true(r == 512 || r == -ECANCELED);
			canceled += r == -ECANCELED;
		}
		if (modes[m] == FOLIO_MEM_POLL)
			assert_int_equal(canceled, N);
	}
}

static void test_reentrant_submit(void **state)
{
	enum folio_mem_mode modes[] = {FOLIO_MEM_SYNC, FOLIO_MEM_POLL,
				       FOLIO_MEM_THREAD};
	for (int m = 0; m < 3; m++) {
		struct folio_engine *e = mem_new(1 << 20);
		assert_int_equal(folio_engine_mem_set_mode(e, modes[m], 3), 0);
		struct chain *ch = chain_run(e, 64, 1000);
		for (int i = 0; i < ch->n; i++) {
			char chk[512];
			assert_int_equal(folio_engine_mem_peek(
						 e, chk, 512, (uint64_t)i * 512),
					 0);
			assert_memory_equal(chk, ch->buf[i], 512);
		}
		assert_int_equal(folio_engine_free(e), 0);
		chain_finish(ch);
	}
}

static atomic_int hook_ret;

static void set_mode_hook(struct tio *t)
{
	struct folio_engine *e = t->arg;
	atomic_store(&hook_ret, folio_engine_mem_set_mode(e, FOLIO_MEM_SYNC, 0));
}

static void test_set_mode_from_thread(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_THREAD, 1), 0);
	atomic_store(&hook_ret, 1);
	assert_int_equal(run_hooked(e, set_mode_hook), 512);
	assert_int_equal(atomic_load(&hook_ret), -EDEADLK);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_wait_in_completion(void **state)
{
	enum folio_mem_mode modes[] = {FOLIO_MEM_SYNC, FOLIO_MEM_POLL,
				       FOLIO_MEM_THREAD};
	for (int m = 0; m < 3; m++) {
		struct folio_engine *e = mem_new(1 << 20);
		assert_int_equal(folio_engine_mem_set_mode(e, modes[m], 11), 0);
		check_wait_in_completion(e);
		assert_int_equal(folio_engine_free(e), 0);
	}
}

/* ---- threads -------------------------------------------------------- */

#define TH_N 4
#define TH_REGION (1u << 20)
#define TH_BURST 16

struct th_arg {
	struct folio_engine *e;
	int id;
	unsigned iters;
	uint64_t seed;
	int inversions;
	int errors;
};

static void *th_main(void *p)
{
	struct th_arg *a = p;
	uint64_t seed = a->seed;
	struct tio *t = calloc(TH_BURST, sizeof(*t));
	char (*buf)[4096] = calloc(TH_BURST, 4096);
	char chk[4096];
	if (!t || !buf) {
		a->errors++;
		goto out;
	}
	uint64_t base = (uint64_t)a->id * TH_REGION;
	for (unsigned i = 0; i < a->iters; i += TH_BURST) {
		size_t len[TH_BURST];
		uint64_t pos[TH_BURST];
		for (int k = 0; k < TH_BURST; k++) {
			len[k] = 1 + test_rand_below(&seed, 4096);
			pos[k] = base + ((i + (unsigned)k) % 256) * 4096;
			fill(buf[k], len[k], test_rand(&seed));
			tio_prep(&t[k], FOLIO_IO_WRITE, pos[k], buf[k], len[k],
				 1 + k % 3, 0);
			if (eng_submit(a->e, &t[k]))
				a->errors++;
		}
		for (int k = 0; k < TH_BURST; k++)
			while (!tio_done(&t[k]))
				if (eng_wait(a->e))
					a->errors++;
		for (int k = 1; k < TH_BURST; k++)
			a->inversions += atomic_load(&t[k].order) <
					 atomic_load(&t[k - 1].order);
		for (int k = 0; k < TH_BURST; k++) {
			if (atomic_load(&t[k].result) != (long)len[k])
				a->errors++;
			/* Read it back through the engine as well. */
			struct tio r;
			tio_prep(&r, FOLIO_IO_READ, pos[k], chk, len[k], 2, 0);
			if (eng_submit(a->e, &r))
				a->errors++;
			while (!tio_done(&r))
				eng_wait(a->e);
			if (atomic_load(&r.result) != (long)len[k] ||
			    memcmp(chk, buf[k], len[k]))
				a->errors++;
		}
	}
out:
	free(t);
	free(buf);
	return NULL;
}

static void run_threads(enum folio_mem_mode mode, const char *name)
{
	uint64_t seed = test_seed(name);
	struct folio_engine *e = mem_new((uint64_t)TH_N * TH_REGION);
	assert_int_equal(folio_engine_mem_set_mode(e, mode, seed), 0);
	pthread_t th[TH_N];
	struct th_arg a[TH_N];
	for (int i = 0; i < TH_N; i++) {
		a[i] = (struct th_arg){.e = e, .id = i,
				       .iters = test_iters(1024, 64),
				       .seed = seed + (uint64_t)i * 7919};
		assert_int_equal(pthread_create(&th[i], NULL, th_main, &a[i]),
				 0);
	}
	int inversions = 0;
	for (int i = 0; i < TH_N; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(a[i].errors, 0);
		inversions += a[i].inversions;
	}
	assert_true(inversions > 0);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.write_requests, st.read_requests);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_thread_mode_concurrent(void **state)
{
	run_threads(FOLIO_MEM_THREAD, "thread_mode_concurrent");
}

static void test_poll_mode_concurrent(void **state)
{
	run_threads(FOLIO_MEM_POLL, "poll_mode_concurrent");
}

/* Mode switches racing with submitters and waiters. */
struct sw_arg {
	struct folio_engine *e;
	atomic_bool stop;
};

static void *switcher(void *p)
{
	struct sw_arg *a = p;
	uint64_t s = 12345;
	while (!atomic_load(&a->stop)) {
		int ret = folio_engine_mem_set_mode(
			a->e, (enum folio_mem_mode)test_rand_below(&s, 3),
			test_rand(&s));
		if (ret && ret != -EBUSY)
			abort();
		usleep(200);
	}
	return NULL;
}

static void test_switch_under_load(void **state)
{
	uint64_t seed = test_seed("switch_under_load");
	struct folio_engine *e = mem_new((uint64_t)TH_N * TH_REGION);
	pthread_t th[TH_N], sw;
	struct th_arg a[TH_N];
	struct sw_arg sa = {.e = e};
	atomic_init(&sa.stop, false);
	assert_int_equal(pthread_create(&sw, NULL, switcher, &sa), 0);
	for (int i = 0; i < TH_N; i++) {
		a[i] = (struct th_arg){.e = e, .id = i,
				       .iters = test_iters(512, 32),
				       .seed = seed + (uint64_t)i};
		assert_int_equal(pthread_create(&th[i], NULL, th_main, &a[i]),
				 0);
	}
	for (int i = 0; i < TH_N; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(a[i].errors, 0);
	}
	atomic_store(&sa.stop, true);
	assert_int_equal(pthread_join(sw, NULL), 0);
	assert_int_equal(stats(e).inflight, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- volatile write cache and power cuts ---------------------------- */

static struct folio_engine *vol_new(uint64_t capacity)
{
	struct folio_engine *e = mem_new(capacity);
	assert_int_equal(folio_engine_mem_set_volatile(e, true), 0);
	return e;
}

static void check_durable(struct folio_engine *e, uint64_t pos,
			  const void *want, size_t len)
{
	char *got = xmalloc(len);
	assert_int_equal(folio_engine_mem_peek_durable(e, got, len, pos), 0);
	assert_memory_equal(got, want, len);
	free(got);
}

static void check_read(struct folio_engine *e, uint64_t pos,
		       const void *want, size_t len)
{
	char *got = xmalloc(len), *pk = xmalloc(len);
	memset(got, 0xee, len);
	assert_int_equal(rd(e, pos, got, len), (long)len);
	assert_memory_equal(got, want, len);
	assert_int_equal(folio_engine_mem_peek(e, pk, len, pos), 0);
	assert_memory_equal(pk, want, len);
	free(got);
	free(pk);
}

static void test_volatile_visible_not_durable(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[10000], zero[10000] = {0};
	fill(a, sizeof(a), 40);
	/* Straddles a chunk boundary; read back through the engine. */
	assert_int_equal(wr(e, 60000, a, sizeof(a)), (long)sizeof(a));
	check_read(e, 60000, a, sizeof(a));
	check_durable(e, 60000, zero, sizeof(zero));
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.size, 70000);
	assert_int_equal(st.durable_size, 0);
	assert_int_equal(st.volatile_bytes, sizeof(a));
	assert_int_equal(st.volatile_ops, 1);
	assert_int_equal(st.mem_bytes, 0);
	assert_int_equal(st.write_bytes, sizeof(a));
	/* A later write over part of it wins, in order. */
	char b[100];
	fill(b, sizeof(b), 41);
	assert_int_equal(wr(e, 60050, b, sizeof(b)), 100);
	memcpy(a + 50, b, sizeof(b));
	check_read(e, 60000, a, sizeof(a));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_volatile_flush_durable(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[5000], b[3000];
	fill(a, sizeof(a), 42);
	fill(b, sizeof(b), 43);
	assert_int_equal(wr(e, 0, a, sizeof(a)), (long)sizeof(a));
	assert_int_equal(wr(e, 4000, b, sizeof(b)), (long)sizeof(b));
	assert_int_equal(eng_flush(e), 0);
	char want[7000];
	memcpy(want, a, 4000);
	memcpy(want + 4000, b, 3000);
	check_durable(e, 0, want, sizeof(want));
	check_read(e, 0, want, sizeof(want));
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.volatile_bytes, 0);
	assert_int_equal(st.volatile_ops, 0);
	assert_int_equal(st.durable_size, 7000);
	assert_int_equal(st.size, 7000);
	assert_int_equal(st.flushes, 1);
	/* Turning the cache off makes what it holds durable. */
	assert_int_equal(wr(e, 0, b, 10), 10);
	assert_int_equal(folio_engine_mem_set_volatile(e, false), 0);
	memcpy(want, b, 10);
	check_durable(e, 0, want, sizeof(want));
	assert_int_equal(stats(e).flushes, 1);
	/* Off: a write is durable at once. */
	assert_int_equal(wr(e, 100, b, 10), 10);
	memcpy(want + 100, b, 10);
	check_durable(e, 0, want, sizeof(want));
	assert_int_equal(stats(e).volatile_ops, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_power_cut_drops(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[4096], b[8192];
	fill(a, sizeof(a), 44);
	fill(b, sizeof(b), 45);
	assert_int_equal(wr(e, 0, a, sizeof(a)), 4096);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(wr(e, 0, b, sizeof(b)), 8192);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	/* Rebooted: the durable content and size, usable at once. */
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.size, 4096);
	assert_int_equal(st.durable_size, 4096);
	assert_int_equal(st.power_cuts, 1);
	assert_int_equal(st.lost_ops, 1);
	assert_int_equal(st.lost_bytes, 8192);
	assert_int_equal(st.volatile_ops, 0);
	check_read(e, 0, a, sizeof(a));
	assert_int_equal(wr(e, 4096, b, 100), 100);
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 4096, b, 100);
	/* A cut with nothing cached loses nothing. */
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	check_durable(e, 0, a, sizeof(a));
	assert_int_equal(stats(e).size, 4196);
	assert_int_equal(stats(e).lost_ops, 1);
	assert_int_equal(folio_engine_free(e), 0);
}

/* 64 writes of 512 bytes to distinct places, then a KEEP_SOME cut; the
 * durable result into @out. */
static void cut_some(uint64_t seed, unsigned char *out, size_t len,
		     struct folio_mem_stats *st)
{
	struct folio_engine *e = vol_new(1 << 20);
	unsigned char buf[512];
	for (int i = 0; i < 64; i++) {
		memset(buf, i + 1, sizeof(buf));
		assert_int_equal(wr(e, (uint64_t)i * 512, buf, 512), 512);
	}
	assert_int_equal(folio_engine_mem_power_cut(e, FOLIO_MEM_CUT_KEEP_SOME,
						    seed), 0);
	assert_int_equal(folio_engine_mem_peek_durable(e, out, len, 0), 0);
	*st = stats(e);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_power_cut_keep_some(void **state)
{
	enum { LEN = 64 * 512 };
	static unsigned char x[LEN], y[LEN];
	struct folio_mem_stats sx, sy;
	cut_some(7, x, LEN, &sx);
	cut_some(7, y, LEN, &sy);
	assert_memory_equal(x, y, LEN); /* same seed, same survivors */
	assert_int_equal(sx.durable_size, sy.durable_size);
	int kept = 0;
	uint64_t end = 0;
	for (int i = 0; i < 64; i++) {
		unsigned char v = x[i * 512];
		/* Each write survives whole or not at all. */
		assert_true(v == 0 || v == i + 1);
		assert_true(all_bytes(x + i * 512, 512, v));
		kept += v != 0;
		if (v)
			end = (uint64_t)(i + 1) * 512;
	}
	assert_true(kept > 0 && kept < 64);
	assert_int_equal(sx.lost_ops, 64 - kept);
	assert_int_equal(sx.durable_size, end);
	assert_int_equal(sx.size, end);
	/* Some other seed keeps another subset. */
	bool differs = false;
	for (uint64_t s = 8; s < 16 && !differs; s++) {
		cut_some(s, y, LEN, &sy);
		differs = memcmp(x, y, LEN) != 0;
	}
	assert_true(differs);
}

static void test_volatile_truncate_order(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[8192], b[4096], c[100], want[8192];
	fill(a, sizeof(a), 46);
	fill(b, sizeof(b), 47);
	fill(c, sizeof(c), 48);
	assert_int_equal(wr(e, 0, a, sizeof(a)), 8192);
	assert_int_equal(eng_flush(e), 0);

	/* write, shrink, grow, write: applied in that order. */
	assert_int_equal(wr(e, 0, b, sizeof(b)), 4096);
	assert_int_equal(eng_truncate(e, 1000), 0);
	assert_int_equal(stats(e).size, 1000);
	assert_int_equal(eng_truncate(e, 8192), 0);
	assert_int_equal(wr(e, 6000, c, sizeof(c)), 100);
	memset(want, 0, sizeof(want));
	memcpy(want, b, 1000);
	memcpy(want + 6000, c, 100);
	check_read(e, 0, want, sizeof(want));
	check_durable(e, 0, a, sizeof(a)); /* the durable store is as it was */
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.volatile_ops, 4);
	assert_int_equal(st.volatile_bytes, 4096 + 100);
	assert_int_equal(st.durable_size, 8192);

	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, want, sizeof(want));
	assert_int_equal(stats(e).durable_size, 8192);

	/* Shrink, write past the new end, cut: the flushed state returns. */
	assert_int_equal(eng_truncate(e, 10), 0);
	assert_int_equal(wr(e, 9000, c, sizeof(c)), 100);
	assert_int_equal(stats(e).size, 9100);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	st = stats(e);
	assert_int_equal(st.size, 8192);
	assert_int_equal(st.lost_ops, 2);
	check_read(e, 0, want, sizeof(want));

	/* A surviving shrink frees and zeroes the durable tail. */
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(eng_flush(e), 0);
	st = stats(e);
	assert_int_equal(st.durable_size, 0);
	assert_int_equal(st.mem_bytes, 0);
	assert_int_equal(eng_truncate(e, 8192), 0);
	assert_int_equal(eng_flush(e), 0);
	memset(want, 0, sizeof(want));
	check_durable(e, 0, want, sizeof(want));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_volatile_scatter_map(void **state)
{
	/* The log keeps file positions; flush stores them through the map. */
	const uint64_t E = 4096;
	struct folio_engine *e = mem_new(4 * E);
	assert_int_equal(folio_engine_mem_set_map(e, E, true), 0);
	assert_int_equal(folio_engine_mem_set_volatile(e, true), 0);
	char a[4096], chk[4096];
	fill(a, sizeof(a), 49);
	assert_int_equal(io_at(e, FOLIO_IO_WRITE, 0, E, a, E, 2), (long)E);
	assert_int_equal(io_at(e, FOLIO_IO_READ, 0, E, chk, E, 3), (long)E);
	assert_memory_equal(chk, a, E);
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, a, E);
	memset(chk, 1, sizeof(chk));
	assert_int_equal(io_at(e, FOLIO_IO_READ, E, 0, chk, E, 1), (long)E);
	assert_true(all_bytes(chk, E, 0));
	/* The map cannot change while the cache holds data. */
	assert_int_equal(eng_truncate(e, 0), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 0, false), -EBUSY);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 0, false), 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_flush_fault_keep_lose(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[4096], b[4096];
	fill(a, sizeof(a), 50);
	fill(b, sizeof(b), 51);
	assert_int_equal(wr(e, 0, a, sizeof(a)), 4096);
	assert_int_equal(eng_flush(e), 0);

	/* Default: a failing flush changes nothing; a later one persists. */
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 0, b, sizeof(b)), 4096);
	assert_int_equal(eng_flush(e), -EIO);
	check_durable(e, 0, a, sizeof(a));
	check_read(e, 0, b, sizeof(b));
	assert_int_equal(stats(e).volatile_ops, 1);
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, b, sizeof(b));

	/* LOSE: the failing flush drops the cache; reads see the durable
	 * store again, and the next flush has nothing to persist. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_LOSE;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 0, a, 100), 100);
	assert_int_equal(eng_truncate(e, 50), 0);
	assert_int_equal(eng_flush(e), -EIO);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.volatile_ops, 0);
	assert_int_equal(st.lost_ops, 2);
	assert_int_equal(st.lost_bytes, 100);
	assert_int_equal(st.size, 4096);
	check_read(e, 0, b, sizeof(b));
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, b, sizeof(b));

	/* A rule of an older, smaller struct: no flags, whatever follows. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	struct folio_mem_fault old;
	memset(&old, 0xff, sizeof(old));
	old = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	old.flags = 0xffff; /* past sz: ignored */
	old.sz = offsetof(struct folio_mem_fault, flags);
	assert_int_equal(folio_engine_mem_inject(e, &old), 0);
	assert_int_equal(wr(e, 0, a, 100), 100);
	assert_int_equal(eng_flush(e), -EIO);
	assert_int_equal(stats(e).volatile_ops, 1); /* kept */
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, a, 100);
	assert_int_equal(folio_engine_free(e), 0);
}

/* A FOLIO_IO_DURABLE write of buf at pos; its request (held in POLL and
 * THREAD modes until waited for). */
static void durable_prep(struct tio *t, uint64_t pos, void *buf, size_t len)
{
	tio_prep(t, FOLIO_IO_WRITE, pos, buf, len, 2, 0);
	t->rq.io.flags = FOLIO_IO_DURABLE;
}

/* Its result, or the barrier's error when only the barrier failed
 * (tio_run_durable()). */
static long durable_wr(struct folio_engine *e, uint64_t pos, void *buf,
		       size_t len)
{
	struct tio t;
	durable_prep(&t, pos, buf, len);
	long r = tio_run_durable(e, &t, NULL);
	tio_free(&t);
	return r;
}

/*
 * Durable writes over the volatile cache, in each completion mode: a full
 * one is durable when it completes (a power cut keeps it and everything
 * completed before it), its barrier is judged like flush() (rules on
 * FOLIO_MEM_OP_FLUSH, LOSE), a failed or short write runs no barrier, and
 * a barrier runs when the write is performed, not when it was submitted.
 */
static void durable_case(enum folio_mem_mode mode)
{
	struct folio_engine *e = vol_new(1 << 20);
	assert_true(e->ops.caps & FOLIO_ENGINE_CAP_DURABLE);
	assert_int_equal(folio_engine_mem_set_mode(e, mode, 7), 0);
	char a[8192], b[8192], c[8192], zero[8192] = {0};
	fill(a, sizeof(a), 60);
	fill(b, sizeof(b), 61);
	fill(c, sizeof(c), 62);

	/* A plain write, then a durable one: both survive a cut. */
	assert_int_equal(wr(e, 0, a, sizeof(a)), 8192);
	assert_int_equal(durable_wr(e, 8192, b, sizeof(b)), 8192);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.volatile_ops, 0);
	assert_int_equal(st.flushes, 1);
	assert_int_equal(st.durable_writes, 1);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	check_durable(e, 0, a, sizeof(a));
	check_durable(e, 8192, b, sizeof(b));

	/* Its barrier fails (LOSE): the write fails and the cache it held,
	 * the earlier plain write included, is gone. */
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_LOSE;
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(wr(e, 0, c, sizeof(c)), 8192);
	assert_int_equal(durable_wr(e, 8192, c, sizeof(c)), -EIO);
	check_durable(e, 0, a, sizeof(a));
	check_read(e, 0, a, sizeof(a));
	check_read(e, 8192, b, sizeof(b));

	/* The write itself fails: no barrier (the flush count stays). */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(wr(e, 0, c, sizeof(c)), 8192);
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, -ENOSPC, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	uint64_t flushes = stats(e).flushes;
	assert_int_equal(durable_wr(e, 8192, c, sizeof(c)), -ENOSPC);
	assert_int_equal(stats(e).flushes, flushes);
	assert_int_equal(stats(e).volatile_ops, 1);

	/* Short: not durable, no barrier; a cut loses what it wrote. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, 0, 1000);
	assert_int_equal(folio_engine_mem_inject(e, &f), 0);
	assert_int_equal(durable_wr(e, 8192, c, sizeof(c)), 1000);
	assert_int_equal(stats(e).flushes, flushes);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	check_durable(e, 0, a, sizeof(a));
	check_durable(e, 8192, b, sizeof(b));

	/* Powered off: the write fails. */
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	assert_int_equal(folio_engine_mem_power_cut(e, FOLIO_MEM_CUT_STAY_OFF,
						    0), 0);
	assert_int_equal(durable_wr(e, 0, c, sizeof(c)), -EIO);
	assert_int_equal(folio_engine_mem_power_on(e), 0);
	check_durable(e, 16384, zero, sizeof(zero));

	if (mode != FOLIO_MEM_SYNC) {
		/* The barrier runs when the write lands, after writes
		 * that completed before it: held, then a plain write
		 * completes first and is covered too. */
		struct tio t;
		durable_prep(&t, 16384, c, sizeof(c));
		assert_int_equal(eng_submit(e, &t), 0);
		if (mode == FOLIO_MEM_POLL)
			assert_int_equal(tio_done(&t), 0);
		assert_int_equal(wr(e, 24576, a, sizeof(a)), 8192);
		wait_all(e, &t, 1);
		assert_int_equal(atomic_load(&t.result), 8192);
		tio_free(&t);
		check_durable(e, 16384, c, sizeof(c));
	}
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_durable_sync(void **state)
{
	durable_case(FOLIO_MEM_SYNC);
}

static void test_durable_poll(void **state)
{
	durable_case(FOLIO_MEM_POLL);
}

static void test_durable_thread(void **state)
{
	durable_case(FOLIO_MEM_THREAD);
}

/* Without the volatile cache a durable write is a write whose barrier is
 * counted; bad flags are refused. */
static void test_durable_plain(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char a[4096];
	fill(a, sizeof(a), 63);
	assert_int_equal(durable_wr(e, 0, a, sizeof(a)), 4096);
	check_durable(e, 0, a, sizeof(a));
	assert_int_equal(stats(e).flushes, 1);
	assert_int_equal(durable_wr(e, 0, a, 0), 0);
	assert_int_equal(stats(e).flushes, 2);
	struct tio t;
	tio_prep(&t, FOLIO_IO_READ, 0, a, 512, 1, 0);
	t.rq.io.flags = FOLIO_IO_DURABLE;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, a, 512, 1, 0);
	t.rq.io.flags = 0x4000u;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	assert_int_equal(tio_done(&t), 0);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.write_requests, 2);
	assert_int_equal(st.read_requests, 0);
	assert_int_equal(st.durable_writes, 2);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_power_cut_held_eio(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char a[512], zero[10 * 512] = {0}, rbuf[512];
	fill(a, sizeof(a), 52);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 3), 0);
	struct tio t[10], r;
	for (int i = 0; i < 10; i++) {
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * 512, a, 512, 2, 0);
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	tio_prep(&r, FOLIO_IO_READ, 0, rbuf, 512, 1, 0);
	assert_int_equal(eng_submit(e, &r), 0);
	assert_int_equal(stats(e).inflight, 11);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(tio_done(&t[i]), 1);
		assert_int_equal(atomic_load(&t[i].result), -EIO);
	}
	assert_int_equal(tio_done(&r), 1);
	assert_int_equal(atomic_load(&r.result), -EIO);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.size, 0);
	assert_int_equal(st.write_bytes, 0);
	check_durable(e, 0, zero, sizeof(zero));
	check_read(e, 0, zero, sizeof(zero));
	assert_int_equal(eng_wait(e), 0); /* nothing in flight */

	/* STAY_OFF: everything fails until the power comes back. */
	tio_prep(&t[0], FOLIO_IO_WRITE, 0, a, 512, 1, 0);
	assert_int_equal(eng_submit(e, &t[0]), 0);
	assert_int_equal(folio_engine_mem_power_cut(e, FOLIO_MEM_CUT_STAY_OFF,
						    0), 0);
	assert_int_equal(atomic_load(&t[0].result), -EIO);
	assert_int_equal(wr(e, 0, a, 512), -EIO);
	assert_int_equal(rd(e, 0, rbuf, 512), -EIO);
	assert_int_equal(eng_flush(e), -EIO);
	assert_int_equal(eng_truncate(e, 100), -EIO);
	st = stats(e);
	assert_int_equal(st.size, 0);
	assert_int_equal(st.power_cuts, 2);
	assert_int_equal(folio_engine_mem_power_on(e), 0);
	assert_int_equal(folio_engine_mem_power_on(e), 0);
	assert_int_equal(wr(e, 0, a, 512), 512);
	assert_int_equal(eng_flush(e), 0);
	check_durable(e, 0, a, 512);
	assert_int_equal(folio_engine_free(e), 0);
}

/* A cut from inside a completion (here the completion thread's). */
static atomic_int cut_hook_ret;

static void cut_hook(struct tio *t)
{
	struct folio_engine *e = t->arg;
	atomic_store(&cut_hook_ret, folio_engine_mem_power_cut(e, 0, 0));
}

static void test_power_cut_in_completion(void **state)
{
	enum folio_mem_mode modes[] = {FOLIO_MEM_SYNC, FOLIO_MEM_POLL,
				       FOLIO_MEM_THREAD};
	for (int m = 0; m < 3; m++) {
		struct folio_engine *e = vol_new(1 << 20);
		assert_int_equal(folio_engine_mem_set_mode(e, modes[m], 9), 0);
		atomic_store(&cut_hook_ret, 1);
		/* The write completed before the cut: 512, but lost. */
		assert_int_equal(run_hooked(e, cut_hook), 512);
		assert_int_equal(atomic_load(&cut_hook_ret), 0);
		struct folio_mem_stats st = stats(e);
		assert_int_equal(st.power_cuts, 1);
		assert_int_equal(st.size, 0);
		assert_int_equal(st.inflight, 0);
		assert_int_equal(folio_engine_free(e), 0);
	}
}

/* Writers with flushes on a THREAD-mode engine while another thread cuts
 * the power (TSan: suite 'threads'). */
#define CUT_WRITERS 3

struct cut_arg {
	struct folio_engine *e;
	int id;
	atomic_bool *stop;
	int bad; /* completions that were neither full nor -EIO */
};

static void *cut_writer(void *p)
{
	struct cut_arg *a = p;
	struct tio t[8];
	char buf[8][512];
	uint64_t seed = (uint64_t)a->id + 1;
	while (!atomic_load(a->stop)) {
		for (int k = 0; k < 8; k++) {
			uint64_t pos = ((uint64_t)a->id * 64 +
					test_rand_below(&seed, 64)) * 512;
			fill(buf[k], 512, test_rand(&seed));
			tio_prep(&t[k], FOLIO_IO_WRITE, pos, buf[k], 512,
				 1 + k % 3, 0);
			if (eng_submit(a->e, &t[k]))
				a->bad++;
		}
		wait_all(a->e, t, 8);
		for (int k = 0; k < 8; k++) {
			long r = atomic_load(&t[k].result);
			if ((r != 512 && r != -EIO) || tio_done(&t[k]) != 1)
				a->bad++;
		}
		int fr = eng_flush(a->e);
		if (fr && fr != -EIO)
			a->bad++;
		if (test_rand_below(&seed, 8) == 0) {
			int tr = eng_truncate(a->e, 3 * 64 * 512);
			if (tr && tr != -EIO)
				a->bad++;
		}
	}
	return NULL;
}

static void test_power_cut_from_thread(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_THREAD,
						   test_seed("power_cut_thread")),
			 0);
	atomic_bool stop;
	atomic_init(&stop, false);
	pthread_t th[CUT_WRITERS];
	struct cut_arg a[CUT_WRITERS];
	for (int i = 0; i < CUT_WRITERS; i++) {
		a[i] = (struct cut_arg){.e = e, .id = i, .stop = &stop};
		assert_int_equal(pthread_create(&th[i], NULL, cut_writer, &a[i]),
				 0);
	}
	unsigned cuts = test_iters(40, 8);
	for (unsigned i = 0; i < cuts; i++) {
		usleep(2000);
		unsigned flags = (i & 1 ? FOLIO_MEM_CUT_KEEP_SOME : 0) |
				 (i & 2 ? FOLIO_MEM_CUT_STAY_OFF : 0);
		assert_int_equal(folio_engine_mem_power_cut(e, flags, i), 0);
		if (flags & FOLIO_MEM_CUT_STAY_OFF) {
			usleep(500);
			assert_int_equal(folio_engine_mem_power_on(e), 0);
		}
	}
	atomic_store(&stop, true);
	for (int i = 0; i < CUT_WRITERS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(a[i].bad, 0);
	}
	/* A last cut: what reads see is the durable store. */
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), 0);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.volatile_ops, 0);
	assert_int_equal(st.size, st.durable_size);
	assert_int_equal(st.power_cuts, cuts + 1);
	static char x[3 * 64 * 512], y[3 * 64 * 512];
	assert_int_equal(folio_engine_mem_peek(e, x, sizeof(x), 0), 0);
	assert_int_equal(folio_engine_mem_peek_durable(e, y, sizeof(y), 0), 0);
	assert_memory_equal(x, y, sizeof(x));
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_volatile_bad_input(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char buf[16] = {0};
	assert_int_equal(folio_engine_mem_power_cut(e, 0x4, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_power_cut(e, ~0u, 0), -EINVAL);
	assert_int_equal(stats(e).power_cuts, 0);
	assert_int_equal(folio_engine_mem_peek_durable(e, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_peek_durable(e, NULL, 0, 0), 0);
	assert_int_equal(folio_engine_mem_peek_durable(e, buf, 16,
						       UINT64_MAX - 3),
			 -ERANGE);
	assert_int_equal(folio_engine_mem_peek_durable(e, buf, 2,
						       (1 << 20) - 1),
			 -ERANGE);
	/* poke under a pending cache is refused and changes nothing. */
	assert_int_equal(wr(e, 0, buf, 16), 16);
	assert_int_equal(folio_engine_mem_poke(e, buf, 4, 100), -EBUSY);
	assert_int_equal(stats(e).size, 16);
	assert_int_equal(eng_flush(e), 0);
	assert_int_equal(folio_engine_mem_poke(e, buf, 4, 100), 0);
	/* Fault flags: unknown bits, or without a flush op. */
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	f.flags = 0x2;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_WRITE, 0, 1, -EIO, 0);
	f.flags = FOLIO_MEM_FAULT_LOSE;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, -EIO, 0);
	f.sz = offsetof(struct folio_mem_fault, flags) - 1;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	assert_int_equal(eng_flush(e), 0); /* no rule was added */
	assert_int_equal(stats(e).faults, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

static void test_volatile_stats_sz(void **state)
{
	struct folio_engine *e = vol_new(1 << 20);
	char buf[100] = {0};
	assert_int_equal(wr(e, 0, buf, 100), 100);
	struct folio_mem_stats st;
	memset(&st, 0xff, sizeof(st));
	st.sz = offsetof(struct folio_mem_stats, volatile_bytes);
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	assert_int_equal(st.size, 100);
	assert_int_equal(st.volatile_bytes, UINT64_MAX); /* untouched */
	assert_int_equal(st.lost_bytes, UINT64_MAX);
	st = stats(e);
	assert_int_equal(st.volatile_bytes, 100);
	assert_int_equal(st.volatile_ops, 1);
	assert_int_equal(st.durable_size, 0);
	assert_int_equal(st.power_cuts, 0);
	assert_int_equal(st.lost_ops, 0);
	assert_int_equal(st.lost_bytes, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

/* ---- stats and bad input -------------------------------------------- */

static void test_stats_sz(void **state)
{
	struct folio_engine *e = mem_new(1 << 20);
	char buf[100] = {0};
	assert_int_equal(wr(e, 0, buf, 100), 100);
	/* An old caller knowing only the first counters. */
	struct folio_mem_stats st;
	memset(&st, 0xff, sizeof(st));
	st.sz = offsetof(struct folio_mem_stats, write_bytes);
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	assert_int_equal(st.sz, offsetof(struct folio_mem_stats, write_bytes));
	assert_int_equal(st.read_requests, 0);
	assert_int_equal(st.write_requests, 1);
	assert_int_equal(st.write_bytes, UINT64_MAX); /* untouched */
	assert_int_equal(st.size, UINT64_MAX);
	st.sz = sizeof(size_t);
	assert_int_equal(folio_engine_mem_stats(e, &st), 0);
	st.sz = 0;
	assert_int_equal(folio_engine_mem_stats(e, &st), -EINVAL);
	assert_int_equal(folio_engine_mem_stats(e, NULL), -EINVAL);
	assert_int_equal(folio_engine_free(e), 0);
}

static int dummy_submit(void *ctx, struct folio_io *io)
{
	return -EIO;
}

static int dummy_flush(void *ctx)
{
	return 0;
}

static int dummy_truncate(void *ctx, uint64_t size)
{
	return 0;
}

static void check_rejects(struct folio_engine *e)
{
	struct folio_mem_fault f = fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 0);
	struct folio_mem_stats st = {.sz = sizeof(st)};
	char buf[16] = {0};
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	assert_int_equal(folio_engine_mem_clear_faults(e), -EINVAL);
	assert_int_equal(folio_engine_mem_set_mode(e, FOLIO_MEM_POLL, 1),
			 -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, 4096, false), -EINVAL);
	assert_int_equal(folio_engine_mem_stats(e, &st), -EINVAL);
	assert_int_equal(folio_engine_mem_peek(e, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_poke(e, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_peek_durable(e, buf, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_set_volatile(e, true), -EINVAL);
	assert_int_equal(folio_engine_mem_power_cut(e, 0, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_power_on(e), -EINVAL);
}

static void test_bad_input(void **state)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_mem(NULL, 4096), -EINVAL);
	assert_int_equal(folio_engine_mem(&e, 0), -EINVAL);
	assert_int_equal(folio_engine_mem(&e, FOLIO_MEM_MAX_CAPACITY + 1),
			 -EINVAL);
	assert_null(e);
	assert_int_equal(folio_engine_free(NULL), 0);

	/* NULL and engines of other kinds. */
	check_rejects(NULL);
	struct folio_engine_ops ops = {
		.sz = sizeof(ops), .submit = dummy_submit,
		.flush = dummy_flush, .truncate = dummy_truncate,
	};
	assert_int_equal(folio_engine_new(&e, &ops, NULL), 0);
	check_rejects(e);
	assert_int_equal(folio_engine_free(e), 0);
	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	assert_int_equal(folio_engine_posix(&e, fileno(tmp), 0), 0);
	check_rejects(e);
	assert_int_equal(folio_engine_free(e), 0);
	fclose(tmp);

	e = mem_new(1 << 20);
	struct folio_mem_fault f;
	/* A newer caller's larger structs: fine with a zero tail, -E2BIG
	 * with anything in it (and nothing changes). */
	struct {
		struct folio_mem_fault f;
		uint64_t extra;
	} big_fault = {fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 0), 0};
	big_fault.f.sz = sizeof(big_fault);
	assert_int_equal(folio_engine_mem_inject(e, &big_fault.f), 0);
	big_fault.extra = 1;
	assert_int_equal(folio_engine_mem_inject(e, &big_fault.f), -E2BIG);
	assert_int_equal(folio_engine_mem_clear_faults(e), 0);
	struct {
		struct folio_mem_stats st;
		uint64_t extra;
	} big_stats = {{.sz = sizeof(big_stats)}, 0};
	assert_int_equal(folio_engine_mem_stats(e, &big_stats.st), 0);
	assert_int_equal(big_stats.extra, 0);
	big_stats.extra = 5;
	assert_int_equal(folio_engine_mem_stats(e, &big_stats.st), -E2BIG);
	assert_int_equal(big_stats.extra, 5);
	/* Rules that are malformed or would do nothing. */
	f = fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 0);
	f.sz = offsetof(struct folio_mem_fault, short_len);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	assert_int_equal(folio_engine_mem_inject(e, NULL), -EINVAL);
	f = fault(0, 0, 1, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(0x10, 0, 1, -EIO, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, 5, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, -5000, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, 0, 0);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 10);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_FLUSH, 0, 1, 0, 10);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_WRITE | FOLIO_MEM_OP_TRUNCATE, 0, 1, 0, 10);
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);
	f = fault(FOLIO_MEM_OP_READ, 0, 1, -EIO, 0);
	f.pos = UINT64_MAX - 5;
	f.len = 10;
	assert_int_equal(folio_engine_mem_inject(e, &f), -EINVAL);

	assert_int_equal(folio_engine_mem_set_mode(e, (enum folio_mem_mode)3, 0),
			 -EINVAL);
	assert_int_equal(folio_engine_mem_set_mode(e, (enum folio_mem_mode)-1,
						   0), -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, 1000, false), -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, 256, false), -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, FOLIO_MEM_MAX_EXTENT * 2,
						  false), -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, 0, true), -EINVAL);
	assert_int_equal(folio_engine_mem_set_map(e, FOLIO_MEM_MAX_EXTENT,
						  true), 0);
	assert_int_equal(folio_engine_mem_set_map(e, 0, false), 0);

	char buf[16] = {0};
	assert_int_equal(folio_engine_mem_peek(e, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_peek(e, NULL, 0, 0), 0);
	assert_int_equal(folio_engine_mem_peek(e, buf, 16, UINT64_MAX - 3),
			 -ERANGE);
	assert_int_equal(folio_engine_mem_poke(e, NULL, 1, 0), -EINVAL);
	assert_int_equal(folio_engine_mem_poke(e, buf, 16, UINT64_MAX - 3),
			 -ERANGE);
	assert_int_equal(folio_engine_mem_poke(e, buf, 0, 0), 0);
	assert_int_equal(stats(e).size, 0);

	/* Malformed requests are refused and leave no trace. */
	struct tio t;
	assert_int_equal(e->ops.submit(folio_engine_ctx(e), NULL), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 16, 2, 0);
	t.rq.io.op = (enum folio_io_op)7;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 16, 2, 0);
	t.rq.io.len = 17;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 16, 2, 0);
	t.rq.io.iovcnt = -1;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 16, 2, 0);
	t.rq.io.iov = NULL;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_WRITE, 0, buf, 16, 2, 0);
	t.iov[1].iov_base = NULL;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_READ, UINT64_MAX - 3, buf, 16, 2, 0);
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	tio_prep(&t, FOLIO_IO_READ, 0, buf, 16, 2, 0);
	t.rq.io.dev_pos = (UINT64_C(1) << 62) - 8;
	assert_int_equal(eng_submit(e, &t), -EINVAL);
	assert_int_equal(tio_done(&t), 0);
	struct folio_mem_stats st = stats(e);
	assert_int_equal(st.read_requests + st.write_requests, 0);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(folio_engine_free(e), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_zero_length),
		cmocka_unit_test(test_read_past_size),
		cmocka_unit_test(test_write_extends_with_zero_gap),
		cmocka_unit_test(test_capacity),
		cmocka_unit_test(test_sparse_huge),
		cmocka_unit_test(test_truncate_partial_chunk),
		cmocka_unit_test(test_flush_counts),
		cmocka_unit_test(test_fault_nth),
		cmocka_unit_test(test_fault_read_error_leaves_buffer),
		cmocka_unit_test(test_fault_applied_write),
		cmocka_unit_test(test_fault_range),
		cmocka_unit_test(test_fault_short),
		cmocka_unit_test(test_fault_flush_truncate),
		cmocka_unit_test(test_fault_order_and_limit),
		cmocka_unit_test(test_map_identity),
		cmocka_unit_test(test_map_scatter),
		cmocka_unit_test(test_map_scatter_random),
		cmocka_unit_test(test_poll_mode),
		cmocka_unit_test(test_inflight_writes),
		cmocka_unit_test(test_poll_data_at_completion),
		cmocka_unit_test(test_poll_faults_decided_at_submit),
		cmocka_unit_test(test_mode_switch_drains),
		cmocka_unit_test(test_destroy_held),
		cmocka_unit_test(test_reentrant_submit),
		cmocka_unit_test(test_set_mode_from_thread),
		cmocka_unit_test(test_wait_in_completion),
		cmocka_unit_test(test_thread_mode_concurrent),
		cmocka_unit_test(test_poll_mode_concurrent),
		cmocka_unit_test(test_switch_under_load),
		cmocka_unit_test(test_volatile_visible_not_durable),
		cmocka_unit_test(test_volatile_flush_durable),
		cmocka_unit_test(test_power_cut_drops),
		cmocka_unit_test(test_power_cut_keep_some),
		cmocka_unit_test(test_volatile_truncate_order),
		cmocka_unit_test(test_volatile_scatter_map),
		cmocka_unit_test(test_flush_fault_keep_lose),
		cmocka_unit_test(test_durable_sync),
		cmocka_unit_test(test_durable_poll),
		cmocka_unit_test(test_durable_thread),
		cmocka_unit_test(test_durable_plain),
		cmocka_unit_test(test_power_cut_held_eio),
		cmocka_unit_test(test_power_cut_in_completion),
		cmocka_unit_test(test_power_cut_from_thread),
		cmocka_unit_test(test_volatile_bad_input),
		cmocka_unit_test(test_volatile_stats_sz),
		cmocka_unit_test(test_stats_sz),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
