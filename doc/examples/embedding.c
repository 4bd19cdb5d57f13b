/* SPDX-License-Identifier: MIT */
/*
 * embedding: how a storage engine typically embeds the library. A store
 * over one file: records are written and read through a mapping, a
 * background thread writes dirty blocks back a little at a time, and
 * checkpoints make everything durable with sync and an error cursor.
 *
 * usage: embedding [FILE]   (default: a temporary file, removed at exit)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <folio_state.h>

/* doc:begin open */
struct store {
	int fd;
	struct folio_engine *engine;
	struct folio_mapping *map;
	folio_errseq_t cursor; /* errors this store has not reported yet */
	pthread_t flusher;
	atomic_bool stop;
};

static int store_open(struct store *s, const char *path)
{
	struct stat st;
	int r;

	memset(s, 0, sizeof(*s));
	s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->fd < 0)
		return -errno;
	if (fstat(s->fd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	r = folio_engine_posix(&s->engine, s->fd, 0);
	if (r < 0)
		goto fail;
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.block_size = 4096,           /* the unit of dirty tracking */
		.max_folio_size = 64 * 1024,
		.size = (uint64_t)st.st_size, /* the file as it is now */
		.engine = s->engine,
	};
	r = folio_mapping_new(&s->map, &opts);
	if (r < 0)
		goto fail;
	/* Taken before the first write: every later error will be seen. */
	s->cursor = folio_mapping_err_cursor(s->map);
	return 0;
fail:
	folio_engine_free(s->engine); /* NULL is fine */
	close(s->fd);
	return r;
}
/* doc:end open */

/* doc:begin flusher */
/* Background writeback: a bounded amount of dirty data per tick, so a
 * checkpoint finds little left to do and foreground writes never wait
 * for a big burst. Write errors are not returned here: the data stays
 * dirty and the next checkpoint reports them. */
static void *flusher_main(void *arg)
{
	struct store *s = arg;
	const struct timespec tick = {0, 1000 * 1000}; /* 1 ms */
	while (!atomic_load(&s->stop)) {
		struct folio_mapping_stats st = {.sz = sizeof(st)};
		folio_mapping_stats(s->map, &st);
		if (st.dirty_bytes >= 64 * 1024) {
			struct folio_writeback_opts wb = {
				.sz = sizeof(wb),
				.budget = 256 * 1024, /* bytes per pass */
			};
			folio_mapping_writeback(s->map, &wb);
		}
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static int store_start_flusher(struct store *s)
{
	return -pthread_create(&s->flusher, NULL, flusher_main, s);
}
/* doc:end flusher */

/* doc:begin checkpoint */
/* 0: every record put before the call is in the file and flushed. */
static int store_checkpoint(struct store *s)
{
	int r = folio_mapping_sync(s->map, &s->cursor);
	if (r < 0)
		fprintf(stderr, "checkpoint: %s (data kept, will retry)\n",
			strerror(-r));
	return r;
}
/* doc:end checkpoint */

/* doc:begin close */
/* Stop the flusher, make everything durable, free. On failure the store
 * stays usable (call again later) unless @give_up is set, in which case
 * the unsaved data is thrown away. */
static int store_close(struct store *s, bool give_up)
{
	if (!atomic_exchange(&s->stop, true))
		pthread_join(s->flusher, NULL);
	int r = store_checkpoint(s);
	if (r < 0 && !give_up)
		return r;
	if (r < 0)
		folio_mapping_invalidate(s->map, 0, 0, FOLIO_INVALIDATE_DISCARD);
	folio_mapping_free(s->map);   /* -EBUSY only while dirty */
	folio_engine_free(s->engine); /* -EBUSY only while a mapping uses it */
	if (close(s->fd) < 0 && r == 0)
		r = -errno;
	return r;
}
/* doc:end close */

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			exit(1);                                          \
		}                                                         \
	} while (0)

#define RECORD 100
#define NRECORDS 20000 /* about 2 MB of records */

int main(int argc, char **argv)
{
	char tmp[] = "/tmp/folio-embedding-XXXXXX";
	const char *path = argc > 1 ? argv[1] : tmp;
	if (argc <= 1) {
		int fd = mkstemp(tmp);
		CHECK(fd >= 0);
		close(fd);
	}

	static unsigned char shadow[(size_t)NRECORDS * RECORD];
	struct store s;
	CHECK(store_open(&s, path) == 0);
	CHECK(store_start_flusher(&s) == 0);

	/* doc:begin use */
	unsigned char rec[RECORD];
	uint64_t rng = 1;
	for (int i = 1; i <= 3000; i++) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		uint64_t id = (rng >> 33) % NRECORDS;
		memset(rec, (int)(rng >> 56), sizeof(rec));
		ssize_t n = folio_mapping_write(s.map, rec, sizeof(rec),
						id * RECORD);
		if (n != (ssize_t)sizeof(rec)) {
			/* An edge block could not be read (n < 0), or a
			 * later folio failed (short count): no durability
			 * was promised for this record; report it. */
			fprintf(stderr, "put %llu: %zd\n",
				(unsigned long long)id, n);
			break;
		}
		memcpy(shadow + id * RECORD, rec, sizeof(rec));
		if (i % 1000 == 0 && store_checkpoint(&s) < 0)
			break; /* keep running, or stop taking writes */
	}
	/* doc:end use */

	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(s.map, &st) == 0);
	printf("embedding: app wrote %llu bytes, %llu bytes went to the file "
	       "in %llu requests (%llu merged runs)\n",
	       (unsigned long long)st.bytes_written,
	       (unsigned long long)st.wb_bytes,
	       (unsigned long long)st.wb_requests,
	       (unsigned long long)st.wb_merges);

	unsigned char back[RECORD];
	CHECK(folio_mapping_read(s.map, back, RECORD, 0) >= 0);
	CHECK(store_close(&s, false) == 0);

	/* Everything reached the file. */
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	static unsigned char file[sizeof(shadow)];
	ssize_t got = pread(fd, file, sizeof(file), 0);
	CHECK(got > 0 && memcmp(file, shadow, (size_t)got) == 0);
	close(fd);
	if (argc <= 1)
		unlink(tmp);
	return 0;
}
