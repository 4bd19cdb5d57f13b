/* SPDX-License-Identifier: MIT */
/*
 * The engine object itself (lib/engine.c): creating engines from user
 * callbacks, sized ops structs, destroy, and how the mapping treats an
 * engine that refuses requests or returns positive values.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "folio_state.h"
#include "test_util.h"

struct fake {
	int destroyed;
	int submits;
	int refuse;      /* what submit returns instead of accepting */
	int flush_ret;
	unsigned char store[65536];
};

static int fake_submit(void *ctx, struct folio_io *io)
{
	struct fake *f = ctx;
	f->submits++;
	if (f->refuse)
		return f->refuse;
	size_t at = (size_t)io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(f->store + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, f->store + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int fake_flush(void *ctx)
{
	return ((struct fake *)ctx)->flush_ret;
}

static int fake_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

static void fake_destroy(void *ctx)
{
	((struct fake *)ctx)->destroyed++;
}

static const struct folio_engine_ops fake_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = fake_submit,
	.flush = fake_flush,
	.truncate = fake_truncate,
	.destroy = fake_destroy,
};

static void test_new_bad_input(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e = (struct folio_engine *)(uintptr_t)1;
	struct folio_engine_ops ops = fake_ops;
	assert_int_equal(folio_engine_new(NULL, &ops, &f), -EINVAL);
	assert_int_equal(folio_engine_new(&e, NULL, &f), -EINVAL);
	ops.submit = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.flush = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.truncate = NULL;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops = fake_ops;
	ops.sz = offsetof(struct folio_engine_ops, truncate);
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	ops.sz = 0;
	assert_int_equal(folio_engine_new(&e, &ops, &f), -EINVAL);
	/* Nothing was created or written. */
	assert_ptr_equal(e, (struct folio_engine *)(uintptr_t)1);
	assert_int_equal(f.destroyed, 0);
	assert_null(folio_engine_ctx(NULL));
	assert_int_equal(folio_engine_free(NULL), 0);
	folio_io_complete(NULL, 0); /* ignored */
}

static void test_lifecycle(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &fake_ops, &f), 0);
	assert_ptr_equal(folio_engine_ctx(e), &f);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(f.destroyed, 1);
}

/* An older caller's smaller ops struct: fields past its sz are unset,
 * whatever the memory after it holds. */
static void test_sized_ops(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine_ops ops = fake_ops;
	ops.sz = offsetof(struct folio_engine_ops, map);
	ops.destroy = fake_destroy; /* past sz: must be ignored */
	struct folio_engine *e;
	assert_int_equal(folio_engine_new(&e, &ops, &f), 0);
	assert_int_equal(folio_engine_free(e), 0);
	assert_int_equal(f.destroyed, 0);
}

/* A refused request fails the operation with the engine's errno, a
 * positive return counts as -EIO, and nothing is lost. */
static void test_refused_requests(void **state)
{
	(void)state;
	struct fake f = {0};
	struct folio_engine *e;
	struct folio_mapping *m;
	assert_int_equal(folio_engine_new(&e, &fake_ops, &f), 0);
	struct folio_mapping_opts o = {.sz = sizeof(o), .engine = e,
				       .size = 8192};
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	unsigned char buf[100];
	memset(buf, 7, sizeof(buf));

	f.refuse = -EAGAIN;
	assert_int_equal(folio_mapping_read(m, buf, 10, 0), -EAGAIN);
	f.refuse = 0;
	assert_int_equal(folio_mapping_write(m, buf, sizeof(buf), 10), 100);
	f.refuse = 5; /* not a valid return: treated as -EIO */
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	assert_int_equal(test_mapping_stats(m).dirty_bytes, 4096);
	f.refuse = 0;
	f.flush_ret = 3;
	assert_int_equal(folio_mapping_sync(m, NULL), -EIO);
	f.flush_ret = 0;
	assert_int_equal(folio_mapping_sync(m, NULL), 0);
	assert_memory_equal(f.store + 10, buf, sizeof(buf));
	test_close(m, e);
	assert_int_equal(f.destroyed, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_bad_input),
		cmocka_unit_test(test_lifecycle),
		cmocka_unit_test(test_sized_ops),
		cmocka_unit_test(test_refused_requests),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
