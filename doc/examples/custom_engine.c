/* SPDX-License-Identifier: MIT */
/*
 * custom_engine: a complete synchronous engine over a memory buffer,
 * written only against the public engine boundary, and a mapping on it.
 * doc/api.md shows this file in full.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state.h>

/* The backing object: a buffer of fixed capacity with a current size. */
struct membuf {
	pthread_mutex_t lock; /* submit() may run in many threads at once */
	unsigned char *bytes;
	uint64_t capacity, size;
	unsigned flushes;
};

static int membuf_submit(void *ctx, struct folio_io *io)
{
	struct membuf *mb = ctx;
	if (io->op != FOLIO_IO_READ && io->op != FOLIO_IO_WRITE)
		return -EINVAL; /* refused: we will not complete it */

	ssize_t result = (ssize_t)io->len;
	pthread_mutex_lock(&mb->lock);
	if (io->op == FOLIO_IO_WRITE &&
	    (io->dev_pos > mb->capacity ||
	     io->len > mb->capacity - io->dev_pos)) {
		result = -ENOSPC; /* accepted, then failed */
	} else {
		uint64_t at = io->dev_pos;
		for (int i = 0; i < io->iovcnt; i++) {
			unsigned char *p = io->iov[i].iov_base;
			size_t n = io->iov[i].iov_len;
			if (io->op == FOLIO_IO_WRITE) {
				memcpy(mb->bytes + at, p, n);
			} else {
				/* Reads always deliver the full length:
				 * bytes past the size read as zeros. */
				size_t have = 0;
				if (at < mb->size)
					have = mb->size - at < n
						       ? (size_t)(mb->size - at)
						       : n;
				memcpy(p, mb->bytes + at, have);
				memset(p + have, 0, n - have);
			}
			at += n;
		}
		if (io->op == FOLIO_IO_WRITE && at > mb->size)
			mb->size = at;
	}
	pthread_mutex_unlock(&mb->lock);

	/* Complete outside our lock; after this, io is not ours any more. */
	folio_io_complete(io, result);
	return 0;
}

static int membuf_flush(void *ctx)
{
	struct membuf *mb = ctx;
	pthread_mutex_lock(&mb->lock);
	mb->flushes++; /* memory is as durable as it gets */
	pthread_mutex_unlock(&mb->lock);
	return 0;
}

static int membuf_truncate(void *ctx, uint64_t size)
{
	struct membuf *mb = ctx;
	if (size > mb->capacity)
		return -EFBIG;
	pthread_mutex_lock(&mb->lock);
	if (size < mb->size) /* a later grow must read zeros here */
		memset(mb->bytes + size, 0, (size_t)(mb->size - size));
	mb->size = size;
	pthread_mutex_unlock(&mb->lock);
	return 0;
}

static void membuf_destroy(void *ctx)
{
	struct membuf *mb = ctx;
	pthread_mutex_destroy(&mb->lock);
	free(mb->bytes);
	free(mb);
}

static const struct folio_engine_ops membuf_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = membuf_submit,
	.flush = membuf_flush,
	.truncate = membuf_truncate,
	.destroy = membuf_destroy, /* no map, wait or unplug: all optional */
};

static int membuf_engine(struct folio_engine **out, uint64_t capacity)
{
	struct membuf *mb = calloc(1, sizeof(*mb));
	if (!mb || !(mb->bytes = calloc(1, (size_t)capacity))) {
		free(mb);
		return -ENOMEM;
	}
	pthread_mutex_init(&mb->lock, NULL);
	mb->capacity = capacity;
	int r = folio_engine_new(out, &membuf_ops, mb);
	if (r < 0)
		membuf_destroy(mb); /* *out is untouched on failure */
	return r;
}

#define CHECK(cond)                                                       \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n",      \
				__FILE__, __LINE__, #cond);               \
			return 1;                                         \
		}                                                         \
	} while (0)

int main(void)
{
	struct folio_engine *e;
	struct folio_mapping *m;
	CHECK(membuf_engine(&e, 1 << 20) == 0);
	struct membuf *mb = folio_engine_ctx(e);

	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.block_size = 4096,
		.max_folio_size = 64 * 1024,
		.engine = e, /* size 0: the buffer starts empty */
	};
	CHECK(folio_mapping_new(&m, &opts) == 0);
	folio_errseq_t cursor = folio_mapping_err_cursor(m);

	char msg[3000];
	memset(msg, 'x', sizeof(msg));
	CHECK(folio_mapping_write(m, "hello", 5, 10000) == 5);
	CHECK(folio_mapping_write(m, msg, sizeof(msg), 70000) == sizeof(msg));
	CHECK(folio_mapping_sync(m, &cursor) == 0);
	CHECK(mb->size == 73000 && mb->flushes == 1);
	CHECK(memcmp(mb->bytes + 10000, "hello", 5) == 0);

	/* Drop the (now clean) cache and read through the engine again. */
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == 0);
	char back[5];
	CHECK(folio_mapping_read(m, back, 5, 10000) == 5);
	CHECK(memcmp(back, "hello", 5) == 0);

	/* Writing past the capacity fails in the engine: sync reports it,
	 * and the data stays dirty in the cache. */
	CHECK(folio_mapping_write(m, "!", 1, 2 << 20) == 1);
	CHECK(folio_mapping_sync(m, &cursor) == -ENOSPC);
	CHECK(folio_mapping_sync(m, &cursor) == -ENOSPC); /* a new failure */

	/* Give up on it: cut the object back and the dirty block with it. */
	CHECK(folio_mapping_truncate(m, 5000) == 0);
	CHECK(mb->size == 5000);
	CHECK(folio_mapping_sync(m, &cursor) == 0);

	CHECK(folio_mapping_free(m) == 0);
	CHECK(folio_engine_free(e) == 0); /* calls membuf_destroy() */
	printf("custom_engine: ok\n");
	return 0;
}
