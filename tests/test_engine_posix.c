/* SPDX-License-Identifier: MIT */
/*
 * Tests of the posix engine on real files. What it shares with the io_uring
 * engine is tested by engine_test_util.c; here are only what is its own: a
 * its constructor's arguments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <unistd.h>

#include "engine_test_util.h"

static struct folio_engine *posix_new(int fd, unsigned flags)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_posix(&e, fd, flags), 0);
	assert_non_null(e);
	return e;
}

static int posix_try(struct folio_engine **out, int fd, unsigned flags)
{
	return folio_engine_posix(out, fd, flags);
}

static const struct file_engine posix_engine = {
	.name = "posix",
	.create = posix_new,
	.try_create = posix_try,
	.completes_in_submit = true,
};

static void test_bad_input(void **state)
{
	struct folio_engine *e = NULL;
	assert_int_equal(folio_engine_posix(NULL, 0, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, -1, 0), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0, 0x100), -EINVAL);
	assert_int_equal(folio_engine_posix(&e, 0,
					    FOLIO_URING_COMPLETION_THREAD),
			 -EINVAL);
	int fd = dup(STDERR_FILENO);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(folio_engine_posix(&e, fd, 0), -EBADF);
	assert_null(e);
}

int main(void)
{
	fe_engine = &posix_engine;
	const struct CMUnitTest tests[] = {
		FE_ON_BOTH(round_trip),
		FE_ON_BOTH(dev_pos),
		FE_ON_BOTH(read_past_eof),
		FE_ON_BOTH(many_segments),
		FE_ON_BOTH(short_write),
		FE_ON_BOTH(flush_truncate),
		FE_ON_BOTH(truncate_eintr),
		FE_ON_BOTH(direct),
		FE_ON_BOTH(direct_tail),
		FE_TEST(errors),
		FE_TEST(bad_requests),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, fe_group_setup, fe_group_teardown);
}
