/* SPDX-License-Identifier: MIT */
/*
 * errors: what the library does when the backing store fails, shown with
 * the mem engine's fault injection. Default policy (failed data stays
 * dirty and goes out again), error cursors (each cursor sees each error
 * once), background writeback (errors wait for sync), the drop policy,
 * flush errors, short writes and read errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state.h>
#include <folio_state_mem.h>

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			exit(1);                                          \
		}                                                         \
	} while (0)

static struct folio_mapping *open_mapping(struct folio_engine *e,
					  unsigned flags)
{
	struct folio_mapping *m;
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts), .flags = flags, .engine = e};
	CHECK(folio_mapping_new(&m, &opts) == 0);
	return m;
}

static uint64_t dirty_bytes(struct folio_mapping *m)
{
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(m, &st) == 0);
	return st.dirty_bytes;
}

/* Fail the next @count writes with @error. */
static void fail_writes(struct folio_engine *e, int error, uint64_t count)
{
	struct folio_mem_fault fault = {
		.sz = sizeof(fault),
		.ops = FOLIO_MEM_OP_WRITE,
		.count = count,
		.error = error,
	};
	CHECK(folio_engine_mem_inject(e, &fault) == 0);
}

int main(void)
{
	struct folio_engine *e;
	CHECK(folio_engine_mem(&e, 1 << 20) == 0);
	static char buf[3 * 4096];
	memset(buf, 0x42, sizeof(buf));

	/* doc:begin redirty */
	/* Default policy. Two observers: checkpoints and, say, a replica. */
	struct folio_mapping *m = open_mapping(e, 0);
	folio_errseq_t ckpt = folio_mapping_err_cursor(m);
	folio_errseq_t replica = folio_mapping_err_cursor(m);

	CHECK(folio_mapping_write(m, buf, sizeof(buf), 0) == sizeof(buf));
	fail_writes(e, -EIO, 1);
	CHECK(folio_mapping_sync(m, &ckpt) == -EIO);  /* reported ... */
	CHECK(dirty_bytes(m) == sizeof(buf));         /* ... nothing lost */
	CHECK(folio_mapping_sync(m, &ckpt) == 0);     /* retried: durable */
	CHECK(folio_mapping_sync(m, &replica) == -EIO); /* its first look */
	CHECK(folio_mapping_sync(m, &replica) == 0);
	/* doc:end redirty */
	char back[sizeof(buf)];
	CHECK(folio_engine_mem_peek(e, back, sizeof(back), 0) == 0);
	CHECK(memcmp(back, buf, sizeof(buf)) == 0);

	/* doc:begin background */
	/* Background writeback never returns write errors: it records them
	 * for the next sync of every cursor. */
	CHECK(folio_mapping_write(m, buf, 4096, 0) == 4096);
	fail_writes(e, -ENOSPC, 1);
	struct folio_writeback_opts wb = {.sz = sizeof(wb), .budget = 1 << 20};
	CHECK(folio_mapping_writeback(m, &wb) == 4096); /* bytes submitted */
	CHECK(dirty_bytes(m) == 4096);                  /* put back */
	CHECK(folio_mapping_sync(m, &ckpt) == -ENOSPC);
	CHECK(folio_mapping_sync(m, &ckpt) == 0);
	/* doc:end background */
	CHECK(folio_mapping_sync(m, &replica) == -ENOSPC);

	/* Flush errors are reported like write errors. */
	struct folio_mem_fault flush_fault = {
		.sz = sizeof(flush_fault),
		.ops = FOLIO_MEM_OP_FLUSH,
		.count = 1,
		.error = -EROFS,
	};
	CHECK(folio_engine_mem_inject(e, &flush_fault) == 0);
	CHECK(folio_mapping_sync(m, &ckpt) == -EROFS);
	CHECK(folio_mapping_sync(m, &ckpt) == 0);

	/* Short writes are finished within the same sync. */
	struct folio_mem_fault short_fault = {
		.sz = sizeof(short_fault),
		.ops = FOLIO_MEM_OP_WRITE,
		.count = 2,
		.short_len = 1000,
	};
	CHECK(folio_engine_mem_inject(e, &short_fault) == 0);
	CHECK(folio_mapping_write(m, buf, sizeof(buf), 8192) == sizeof(buf));
	CHECK(folio_mapping_sync(m, &ckpt) == 0);
	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(m, &st) == 0);
	CHECK(st.retries == 2 && st.dirty_bytes == 0);

	/* Read errors come back from the call itself. A partial-block write
	 * over uncached data has to read that block first. */
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == 0);
	struct folio_mem_fault read_fault = {
		.sz = sizeof(read_fault),
		.ops = FOLIO_MEM_OP_READ,
		.error = -EIO, /* count 0: every read fails */
	};
	CHECK(folio_engine_mem_inject(e, &read_fault) == 0);
	CHECK(folio_mapping_read(m, back, 100, 0) == -EIO);
	CHECK(folio_mapping_write(m, "x", 1, 10) == -EIO); /* nothing marked */
	CHECK(folio_mapping_write(m, buf, 4096, 0) == 4096); /* whole block */
	CHECK(folio_engine_mem_clear_faults(e) == 0);
	CHECK(folio_mapping_sync(m, &ckpt) == 0);
	/* The mapping's own cursor (NULL) is one more observer: it has not
	 * looked yet, so it reports the latest error once. */
	CHECK(folio_mapping_sync(m, NULL) == -EROFS);
	CHECK(folio_mapping_sync(m, NULL) == 0);
	CHECK(folio_mapping_free(m) == 0);

	/* doc:begin drop */
	/* Drop policy: a failed write is cleaned and reported once. The
	 * store never got the data and the cache no longer means to write
	 * it, so the caller must redo it (from its own log, say). */
	struct folio_mapping *dm = open_mapping(e, FOLIO_MAPPING_DROP_ON_ERROR);
	folio_errseq_t c = folio_mapping_err_cursor(dm);
	CHECK(folio_mapping_write(dm, "lost", 4, 0) == 4);
	fail_writes(e, -EIO, 1);
	CHECK(folio_mapping_sync(dm, &c) == -EIO);
	CHECK(dirty_bytes(dm) == 0);
	CHECK(folio_mapping_sync(dm, &c) == 0);
	/* doc:end drop */
	/* Until the clean folio is dropped, reads still see the new bytes
	 * that the store does not have. */
	CHECK(folio_mapping_read(dm, back, 4, 0) == 4);
	CHECK(memcmp(back, "lost", 4) == 0);
	CHECK(folio_engine_mem_peek(e, back, 4, 0) == 0);
	CHECK(memcmp(back, "lost", 4) != 0);
	CHECK(folio_mapping_free(dm) == 0);

	/* Giving up on dirty data has to be explicit. */
	struct folio_mapping *gm = open_mapping(e, 0);
	CHECK(folio_mapping_write(gm, "unsaved", 7, 0) == 7);
	CHECK(folio_mapping_free(gm) == -EBUSY);
	CHECK(folio_mapping_invalidate(gm, 0, 0, FOLIO_INVALIDATE_DISCARD) == 0);
	CHECK(folio_mapping_free(gm) == 0);

	CHECK(folio_engine_free(e) == 0);
	printf("errors: ok\n");
	return 0;
}
