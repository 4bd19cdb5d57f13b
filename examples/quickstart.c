/* SPDX-License-Identifier: MIT */
/*
 * quickstart: cache a file, change 200 bytes in two places, make them
 * durable, and see that only the two dirty 4 KiB blocks went to the file.
 *
 * usage: quickstart [FILE]   (FILE is modified; default: a temp file)
 */
/* mkstemp(), O_CLOEXEC and friends are POSIX, not C11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <folio_state.h>

/* Every library call returns a negative errno on failure. */
#define TRY(call)                                                        \
	do {                                                             \
		if ((r = (call)) < 0) {                                  \
			fprintf(stderr, "quickstart: %s: %s\n", #call,   \
				strerror((int)-r));                      \
			goto out;                                        \
		}                                                        \
	} while (0)

int main(int argc, char **argv)
{
	char tmp[] = "/var/tmp/quickstart-XXXXXX";
	int fd = argc > 1 ? open(argv[1], O_RDWR | O_CREAT, 0644) : mkstemp(tmp);
	if (fd < 0) {
		perror(argc > 1 ? argv[1] : tmp);
		return 1;
	}
	if (argc <= 1)
		unlink(tmp); /* the fd keeps it alive until close() */

	struct folio_engine *e = NULL;
	struct folio_mapping *m = NULL;
	struct folio_mapping_stats s = {.sz = sizeof(s)};
	struct stat st;
	long long r = 0;
	char rec[100], back[100];

	TRY(fstat(fd, &st) ? -errno : 0);
	TRY(folio_engine_posix(&e, fd, 0));
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.block_size = 4096,
		.size = (uint64_t)st.st_size,
		.engine = e,
	};
	TRY(folio_mapping_new(&m, &opts));
	/* Taken before the writes, so the sync below sees their errors. */
	folio_errseq_t cursor = folio_mapping_err_cursor(m);

	for (int i = 0; i < 2; i++) {
		uint64_t pos = (uint64_t)i << 20; /* 1 MiB apart */
		memset(rec, 'a' + i, sizeof(rec));
		TRY(folio_mapping_write(m, rec, sizeof(rec), pos));
		TRY(folio_mapping_read(m, back, sizeof(back), pos));
		TRY(r != (long long)sizeof(back) || memcmp(rec, back, sizeof(rec))
			    ? -EIO : 0);
	}
	TRY(folio_mapping_sync(m, &cursor));
	TRY(folio_mapping_stats(m, &s));
	printf("written by the app: %llu bytes; submitted to the engine: "
	       "%llu bytes in %llu requests\n",
	       (unsigned long long)s.bytes_written,
	       (unsigned long long)s.wb_bytes,
	       (unsigned long long)s.wb_requests);
out:
	/* free() refuses a mapping that still holds dirty data (a failed
	 * sync keeps it): giving up on it must be explicit. */
	if (m && folio_mapping_free(m) == -EBUSY) {
		folio_mapping_invalidate(m, 0, 0, FOLIO_INVALIDATE_DISCARD);
		if (folio_mapping_free(m) < 0)
			r = -EBUSY;
	}
	if (folio_engine_free(e) < 0 || close(fd) < 0)
		r = -EIO;
	return r < 0;
}
