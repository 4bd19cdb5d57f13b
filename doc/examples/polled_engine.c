/* SPDX-License-Identifier: MIT */
/*
 * polled_engine: an asynchronous engine that uses the optional callbacks.
 * submit() only queues; unplug() notes that a batch is complete; wait()
 * completes what is queued (the library calls it whenever it has to wait
 * for I/O); map() places the object at a 4 KiB offset on the "device" (a
 * header lives before it), one 64 KiB extent at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <folio_state.h>

#define DEV_SIZE (1u << 20)
#define HEADER 4096u      /* device bytes before the object's byte 0 */
#define EXTENT 65536u

struct queued {
	struct folio_io *io;
	struct queued *next;
};

struct dev {
	pthread_mutex_t lock;
	struct queued *queue; /* accepted, not yet completed */
	unsigned char bytes[DEV_SIZE];
	unsigned submits, unplugs, waits, maps;
};

static int dev_submit(void *ctx, struct folio_io *io)
{
	struct dev *d = ctx;
	if (io->dev_pos < HEADER || io->dev_pos > DEV_SIZE ||
	    io->len > DEV_SIZE - io->dev_pos)
		return -EINVAL; /* refused: never completed */
	struct queued *q = malloc(sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->io = io;
	pthread_mutex_lock(&d->lock);
	q->next = d->queue;
	d->queue = q;
	d->submits++;
	pthread_mutex_unlock(&d->lock);
	return 0; /* accepted: wait() will complete it */
}

static int dev_unplug(void *ctx)
{
	struct dev *d = ctx;
	pthread_mutex_lock(&d->lock);
	d->unplugs++; /* a real engine would start the batch now */
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/* Move the data of one request (newest first: order is ours to pick). */
static void dev_do(struct dev *d, struct folio_io *io)
{
	uint64_t at = io->dev_pos;
	for (int i = 0; i < io->iovcnt; i++) {
		if (io->op == FOLIO_IO_WRITE)
			memcpy(d->bytes + at, io->iov[i].iov_base,
			       io->iov[i].iov_len);
		else
			memcpy(io->iov[i].iov_base, d->bytes + at,
			       io->iov[i].iov_len);
		at += io->iov[i].iov_len;
	}
}

/* doc:begin wait */
static int dev_wait(void *ctx)
{
	struct dev *d = ctx;
	pthread_mutex_lock(&d->lock);
	struct queued *q = d->queue; /* take them all */
	d->queue = NULL;
	d->waits++;
	for (struct queued *p = q; p; p = p->next)
		dev_do(d, p->io);
	pthread_mutex_unlock(&d->lock);
	/* Nothing queued: return at once, as the contract asks. Otherwise
	 * complete outside the lock (a completion may submit again). */
	while (q) {
		struct queued *next = q->next;
		folio_io_complete(q->io, (ssize_t)q->io->len);
		free(q);
		q = next;
	}
	return 0;
}
/* doc:end wait */

/* doc:begin map */
static int dev_map(void *ctx, uint64_t pos, uint64_t len,
		   struct folio_extent *ext)
{
	struct dev *d = ctx;
	(void)len; /* the extent may be longer or shorter than asked */
	pthread_mutex_lock(&d->lock);
	d->maps++;
	pthread_mutex_unlock(&d->lock);
	ext->pos = pos - pos % EXTENT;
	ext->len = EXTENT;
	ext->dev_pos = ext->pos + HEADER;
	ext->flags = 0;
	return 0;
}
/* doc:end map */

static int dev_flush(void *ctx)
{
	(void)ctx; /* wait() has completed every write before sync flushes */
	return 0;
}

static int dev_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	return size + HEADER <= DEV_SIZE ? 0 : -EFBIG;
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
	static struct dev d = {.lock = PTHREAD_MUTEX_INITIALIZER};
	const struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = dev_submit,
		.flush = dev_flush,
		.truncate = dev_truncate,
		.map = dev_map,
		.wait = dev_wait,
		.unplug = dev_unplug,
	};
	struct folio_engine *e;
	struct folio_mapping *m;
	CHECK(folio_engine_new(&e, &ops, &d) == 0);
	struct folio_mapping_opts opts = {
		.sz = sizeof(opts),
		.max_folio_size = 16384, /* small folios: requests span them */
		.engine = e,
	};
	CHECK(folio_mapping_new(&m, &opts) == 0);

	/* 200 KiB in 16 KiB folios: writeback merges the dirty runs of
	 * consecutive folios into few requests (cut at 64 KiB extents only
	 * when the device places stop being contiguous, which they never
	 * are here, and at max_request). */
	static unsigned char data[200 * 1024];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 31 + 7);
	CHECK(folio_mapping_write(m, data, sizeof(data), 0) == sizeof(data));

	struct folio_writeback_opts wb = {
		.sz = sizeof(wb),
		.flags = FOLIO_WB_WAIT, /* returns after wait() completed all */
		.max_request = 128 * 1024,
	};
	CHECK(folio_mapping_writeback(m, &wb) == (int64_t)sizeof(data));
	CHECK(memcmp(d.bytes + HEADER, data, sizeof(data)) == 0);

	struct folio_mapping_stats st = {.sz = sizeof(st)};
	CHECK(folio_mapping_stats(m, &st) == 0);
	CHECK(st.wb_requests == 2); /* 128 KiB + 72 KiB, across 13 folios */
	CHECK(d.submits == 2 && d.unplugs >= 1 && d.waits >= 1);
	CHECK(st.map_calls == d.maps && d.maps >= 4); /* one per extent */

	/* Reads go through map() and wait() as well. Written data stays
	 * cached (unstable) until a flush made it durable: sync, then drop
	 * the cache. */
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == -EBUSY);
	CHECK(folio_mapping_sync(m, NULL) == 0);
	CHECK(folio_mapping_invalidate(m, 0, 0, 0) == 0);
	unsigned char back[5000];
	CHECK(folio_mapping_read(m, back, sizeof(back), 99000) ==
	      (ssize_t)sizeof(back));
	CHECK(memcmp(back, data + 99000, sizeof(back)) == 0);

	CHECK(folio_mapping_sync(m, NULL) == 0);
	CHECK(folio_mapping_free(m) == 0);
	CHECK(folio_engine_free(e) == 0);
	printf("polled_engine: %u requests, %u unplugs, %u waits, %u maps\n",
	       d.submits, d.unplugs, d.waits, d.maps);
	return 0;
}
