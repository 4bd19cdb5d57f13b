/* SPDX-License-Identifier: MIT */
/*
 * folio_basics: the folio layer on its own, as a storage engine with its
 * own buffer pool would use it. One 64 KiB folio of 4 KiB blocks caches
 * bytes [128 KiB, 192 KiB) of a file; two small changes dirty two blocks,
 * and a hand-written flush writes exactly those blocks with pwrite(2).
 *
 * Part of the API guide (doc/api.md); built and run by `meson test
 * --suite doc`.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <folio_state.h>

#define KIB 1024u

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			exit(1);                                          \
		}                                                         \
	} while (0)

/* doc:begin flush */
/* Write the dirty blocks of @f to @fd, one pwrite() per dirty run. The
 * runs are taken (cleared) under one lock acquisition; a run that fails
 * is marked dirty again so nothing is lost. Returns bytes written or a
 * negative errno. */
static ssize_t flush_folio(struct folio *f, int fd)
{
	struct folio_range runs[16];
	ssize_t total = 0;
	int n, err = 0;

	if (folio_start_writeback(f) < 0)
		return -EBUSY; /* another flusher has it */
	while ((n = folio_take_dirty(f, runs, 16)) > 0) {
		for (int i = 0; i < n; i++) {
			const char *p = (const char *)folio_data(f) + runs[i].off;
			off_t at = (off_t)(folio_pos(f) + runs[i].off);
			ssize_t w = pwrite(fd, p, runs[i].len, at);
			if (w != (ssize_t)runs[i].len) {
				err = w < 0 ? -errno : -EIO;
				/* put the run back: it is still the only copy */
				folio_set_dirty(f, runs[i].off, runs[i].len);
				continue;
			}
			total += w;
		}
		if (err)
			break;
	}
	folio_end_writeback(f);
	return err ? err : total;
}
/* doc:end flush */

int main(void)
{
	char path[] = "/tmp/folio-basics-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);

	/* doc:begin state */
	struct folio *f;
	int r = folio_new(&f, 128 * KIB, 64 * KIB, 4 * KIB);
	CHECK(r == 0);
	CHECK(folio_size(f) == 64 * KIB && folio_block_size(f) == 4 * KIB);
	CHECK(folio_pos(f) == 128 * KIB);

	/* A 100-byte change at offset 5000 touches block 1 only. The block
	 * holds other bytes too, so a cache would read it first; here the
	 * (zero-filled) folio memory stands for the file's contents. */
	memcpy((char *)folio_data(f) + 5000, "first change", 12);
	r = folio_set_dirty_uptodate(f, 5000, 100);
	CHECK(r == FOLIO_BECAME_DIRTY); /* first dirty block; not all uptodate */
	CHECK(folio_is_dirty(f, 4096, 1) == 1);
	CHECK(folio_is_uptodate(f, 0, 4096) == 0);
	CHECK(folio_test_dirty(f) && !folio_test_uptodate(f));

	/* A second change in block 9: now two separate dirty runs. */
	memcpy((char *)folio_data(f) + 9 * 4096, "second change", 13);
	CHECK(folio_set_dirty_uptodate(f, 9 * 4096, 13) == 0);

	size_t off = 0;
	ssize_t len = folio_next_dirty(f, &off);
	CHECK(len == 4096 && off == 4096); /* block 1 */
	off += (size_t)len;
	len = folio_next_dirty(f, &off);
	CHECK(len == 4096 && off == 9 * 4096); /* block 9 */

	off = 0;
	len = folio_next_missing(f, &off);
	CHECK(len == 4096 && off == 0); /* block 0 is not uptodate */
	/* doc:end state */

	/* Clearing rounds inward: a range covering only part of block 9
	 * leaves it dirty. */
	CHECK(folio_clear_dirty(f, 9 * 4096 + 1, 4095) == 0);
	CHECK(folio_is_dirty(f, 9 * 4096, 4096) == 1);
	/* Bad ranges change nothing. */
	CHECK(folio_set_dirty(f, 60 * KIB, 8 * KIB) == -ERANGE);
	CHECK(folio_set_dirty(NULL, 0, 1) == -EINVAL);

	/* The content lock and another reference. */
	struct folio *extra = folio_get(f);
	CHECK(folio_lock(f) == 0);
	CHECK(folio_trylock(f) == 0 && folio_test_locked(f));
	CHECK(folio_unlock(f) == 0);
	CHECK(folio_unlock(f) == -EPERM);
	folio_put(extra);

	/* Flush: exactly the two dirty blocks reach the file. */
	ssize_t w = flush_folio(f, fd);
	CHECK(w == 2 * 4096);
	CHECK(!folio_test_dirty(f) && !folio_test_writeback(f));
	CHECK(folio_wait_writeback(f) == 0); /* returns at once now */

	char back[13];
	CHECK(pread(fd, back, 13, 128 * KIB + 9 * 4096) == 13);
	CHECK(memcmp(back, "second change", 13) == 0);
	CHECK(pread(fd, back, 12, 128 * KIB + 5000) == 12);
	CHECK(memcmp(back, "first change", 12) == 0);

	/* Clean blocks may be forgotten; folio_clear_uptodate() never drops
	 * a dirty block's contents. */
	CHECK(folio_clear_uptodate(f, 0, 64 * KIB) == 0);
	CHECK(folio_is_uptodate(f, 4096, 4096) == 0);

	folio_put(f); /* last reference: frees the folio */
	close(fd);
	printf("folio_basics: wrote %zd bytes for two small changes\n", w);
	return 0;
}
