/* SPDX-License-Identifier: MIT */
/*
 * The device model behind --device-model: a device with one queue that
 * serves write requests in arrival order, each taking lat + len / bw of
 * device time. Requests are stamped on one device clock under a mutex and
 * their submitters sleep until the stamped completion time, so under load
 * the throughput follows the modelled bandwidth whatever the sleep jitter
 * (a late wake-up delays one caller, not the device clock).
 *
 * The public engine API has no way to call another engine's callbacks, so
 * the wrapper cannot forward a request to the posix or uring engine: it
 * moves the data itself, with pwritev/preadv on the same file, or into a
 * mem engine's store with peek/poke.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"
#include "folio_state_mem.h"

struct devmodel {
	pthread_mutex_t lock;
	uint64_t clock; /* the device is busy until this time (ns) */
	uint64_t bw, lat_ns;
	int fd;
	struct folio_engine *mem;
	_Atomic uint64_t requests, bytes, flushes, busy_ns;
};

int devmodel_parse(const char *s, struct bench_devmodel_params *p)
{
	struct bench_devmodel_params r = {.on = true};
	char buf[128];
	if (!s || strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	bool any = false;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (!strncmp(t, "bw=", 3)) {
			if (bench_parse_size(t + 3, &r.bw) || !r.bw)
				return -EINVAL;
		} else if (!strncmp(t, "lat=", 4)) {
			char *end;
			errno = 0;
			double us = strtod(t + 4, &end);
			if (errno || end == t + 4 || *end || !(us >= 0) ||
			    us > 1e7)
				return -EINVAL;
			r.lat_ns = (uint64_t)(us * 1000 + 0.5);
		} else {
			return -EINVAL;
		}
		any = true;
	}
	if (!any)
		return -EINVAL;
	*p = r;
	return 0;
}

int devmodel_new(struct devmodel **out, const struct bench_devmodel_params *p)
{
	struct devmodel *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (pthread_mutex_init(&d->lock, NULL)) {
		free(d);
		return -ENOMEM;
	}
	d->bw = p->bw;
	d->lat_ns = p->lat_ns;
	d->fd = -1;
	*out = d;
	return 0;
}

void devmodel_free(struct devmodel *d)
{
	if (!d)
		return;
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void devmodel_charge(struct devmodel *d, uint64_t len)
{
	uint64_t cost = d->lat_ns;
	if (d->bw)
		cost += (uint64_t)((double)len * 1e9 / (double)d->bw);
	pthread_mutex_lock(&d->lock);
	uint64_t now = bench_now_ns();
	uint64_t start = d->clock > now ? d->clock : now;
	d->clock = start + cost;
	uint64_t done = d->clock;
	pthread_mutex_unlock(&d->lock);
	if (len) {
		atomic_fetch_add(&d->requests, 1);
		atomic_fetch_add(&d->bytes, len);
	} else {
		atomic_fetch_add(&d->flushes, 1);
	}
	atomic_fetch_add(&d->busy_ns, cost);
	bench_sleep_until(done);
}

void devmodel_stats(struct devmodel *d, struct devmodel_stats *st)
{
	st->requests = atomic_load(&d->requests);
	st->bytes = atomic_load(&d->bytes);
	st->flushes = atomic_load(&d->flushes);
	st->busy_ns = atomic_load(&d->busy_ns);
}

/* Positioned vectored I/O of the whole request, resuming after short
 * transfers; reads zero-fill past end of file as the library expects. */
static ssize_t fd_io(int fd, const struct folio_io *io)
{
	struct iovec local[64];
	struct iovec *iov = local;
	if (io->iovcnt > 64) {
		iov = malloc((size_t)io->iovcnt * sizeof(*iov));
		if (!iov)
			return -ENOMEM;
	}
	memcpy(iov, io->iov, (size_t)io->iovcnt * sizeof(*iov));
	struct iovec *cur = iov;
	int cnt = io->iovcnt;
	size_t done = 0;
	ssize_t ret = 0;
	while (done < io->len && cnt > 0) {
		off_t at = (off_t)(io->dev_pos + done);
		ssize_t r = io->op == FOLIO_IO_WRITE ? pwritev(fd, cur, cnt, at)
						     : preadv(fd, cur, cnt, at);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = done ? (ssize_t)done : -errno;
			break;
		}
		if (r == 0) {
			if (io->op == FOLIO_IO_WRITE) {
				ret = done ? (ssize_t)done : -EIO;
				break;
			}
			for (int i = 0; i < cnt; i++)
				memset(cur[i].iov_base, 0, cur[i].iov_len);
			done = io->len;
			break;
		}
		done += (size_t)r;
		while (cnt > 0 && (size_t)r >= cur->iov_len) {
			r -= (ssize_t)cur->iov_len;
			cur++;
			cnt--;
		}
		if (cnt > 0) {
			cur->iov_base = (char *)cur->iov_base + r;
			cur->iov_len -= (size_t)r;
		}
	}
	if (iov != local)
		free(iov);
	return ret < 0 ? ret : (ssize_t)done;
}

static ssize_t mem_io(struct folio_engine *mem, const struct folio_io *io)
{
	uint64_t at = io->pos;
	for (int i = 0; i < io->iovcnt; i++) {
		const struct iovec *v = &io->iov[i];
		int r = io->op == FOLIO_IO_WRITE
				? folio_engine_mem_poke(mem, v->iov_base,
							v->iov_len, at)
				: folio_engine_mem_peek(mem, v->iov_base,
							v->iov_len, at);
		if (r)
			return at > io->pos ? (ssize_t)(at - io->pos) : r;
		at += v->iov_len;
	}
	return (ssize_t)io->len;
}

static int dm_submit(void *ctx, struct folio_io *io)
{
	struct devmodel *d = ctx;
	if (io->op != FOLIO_IO_READ && io->op != FOLIO_IO_WRITE)
		return -EINVAL;
	ssize_t r = d->fd >= 0 ? fd_io(d->fd, io) : mem_io(d->mem, io);
	/* Reads are not modelled: the workloads time writes and syncs. */
	if (io->op == FOLIO_IO_WRITE)
		devmodel_charge(d, io->len);
	folio_io_complete(io, r);
	return 0;
}

static int dm_flush(void *ctx)
{
	struct devmodel *d = ctx;
	if (d->fd >= 0 && fdatasync(d->fd))
		return -errno;
	/* A cache flush command costs one latency on the device. */
	devmodel_charge(d, 0);
	return 0;
}

static int dm_truncate(void *ctx, uint64_t size)
{
	struct devmodel *d = ctx;
	if (d->fd < 0)
		return -EOPNOTSUPP; /* the mem store cannot shrink from here */
	return ftruncate(d->fd, (off_t)size) ? -errno : 0;
}

int devmodel_engine(struct devmodel *d, int fd, struct folio_engine *mem,
		    struct folio_engine **out)
{
	static const struct folio_engine_ops ops = {
		.sz = sizeof(struct folio_engine_ops),
		.submit = dm_submit,
		.flush = dm_flush,
		.truncate = dm_truncate,
	};
	if (fd < 0 && !mem)
		return -EINVAL;
	d->fd = fd;
	d->mem = mem;
	return folio_engine_new(out, &ops, d);
}
