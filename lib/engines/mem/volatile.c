/* SPDX-License-Identifier: MIT */
/*
 * The mem engine's volatile write cache. With it on, a write or truncate
 * that the engine completes is appended to an ordered log instead of
 * changing the durable store: reads see the log laid over the durable
 * store (as a disk serves reads from its cache), flush() applies the log
 * to the durable store in order, and a power cut throws it away, or keeps
 * a pseudo-random subset of it, as a disk that persisted part of its
 * cache. Requests still held at a power cut never land.
 */
#include <stdlib.h>
#include <string.h>

#include "engines/mem/mem.h"

static void log_append(struct mem_ctx *c, struct mem_log *l)
{
	l->next = NULL;
	*c->log_tail = l;
	c->log_tail = &l->next;
	c->log_ops++;
	if (!l->truncate)
		c->log_bytes += l->len;
}

int mem_log_write_locked(struct mem_ctx *c, const struct folio_io *io, size_t n)
{
	struct mem_log *l = malloc(sizeof(*l) + n);
	if (!l)
		return -ENOMEM;
	l->truncate = false;
	l->pos = io->pos;
	l->len = n;
	size_t done = 0;
	for (int i = 0; i < io->iovcnt && done < n; i++) {
		size_t k = MIN(io->iov[i].iov_len, n - done);
		memcpy(l->data + done, io->iov[i].iov_base, k);
		done += k;
	}
	log_append(c, l);
	return 0;
}

int mem_log_truncate_locked(struct mem_ctx *c, uint64_t size)
{
	struct mem_log *l = malloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->truncate = true;
	l->pos = size;
	l->len = 0;
	log_append(c, l);
	return 0;
}

/* Copy @n bytes of @src into the iovecs at byte offset @off. */
static void iov_copy_in(const struct iovec *iov, int cnt, size_t off,
			const unsigned char *src, size_t n)
{
	size_t at = 0;
	for (int i = 0; i < cnt && n; i++) {
		size_t l = iov[i].iov_len;
		if (off < at + l) {
			size_t s = off - at, k = MIN(n, l - s);
			memcpy((char *)iov[i].iov_base + s, src, k);
			src += k;
			off += k;
			n -= k;
		}
		at += l;
	}
}

void mem_log_overlay_locked(struct mem_ctx *c, uint64_t pos,
			    const struct iovec *iov, int iovcnt, size_t len)
{
	uint64_t end = pos + len;
	for (const struct mem_log *l = c->log_head; l; l = l->next) {
		if (l->truncate) {
			if (l->pos < end)
				engine_iov_zero(iov, iovcnt,
						(size_t)(MAX(l->pos, pos) - pos),
						len);
			continue;
		}
		uint64_t s = MAX(l->pos, pos), e = MIN(l->pos + l->len, end);
		if (s < e)
			iov_copy_in(iov, iovcnt, (size_t)(s - pos),
				    l->data + (s - l->pos), (size_t)(e - s));
	}
}

static int log_apply_one(struct mem_ctx *c, const struct mem_log *l)
{
	if (l->truncate) {
		mem_durable_resize_locked(c, l->pos);
		return 0;
	}
	return mem_durable_write_locked(c, l->pos, l->data, l->len);
}

/* Unlink and free the first entry. */
static void log_pop(struct mem_ctx *c)
{
	struct mem_log *l = c->log_head;
	c->log_head = l->next;
	if (!c->log_head)
		c->log_tail = &c->log_head;
	c->log_ops--;
	if (!l->truncate)
		c->log_bytes -= l->len;
	free(l);
}

int mem_log_apply_locked(struct mem_ctx *c)
{
	while (c->log_head) {
		int ret = log_apply_one(c, c->log_head);
		if (ret)
			return ret;
		log_pop(c);
	}
	/* The durable object now is what reads saw. */
	c->size = c->dsize;
	return 0;
}

void mem_log_discard_locked(struct mem_ctx *c)
{
	c->st.lost_ops += c->log_ops;
	c->st.lost_bytes += c->log_bytes;
	mem_log_free(c);
	c->size = c->dsize;
}

void mem_log_free(struct mem_ctx *c)
{
	while (c->log_head)
		log_pop(c);
}

/* ---- public API ----------------------------------------------------- */

int folio_engine_mem_set_volatile(struct folio_engine *e, bool on)
{
	struct mem_ctx *c = mem_of(e);
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int ret = 0;
	if (!on)
		ret = mem_log_apply_locked(c);
	if (!ret)
		c->volatile_on = on;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* splitmix64: the survivors depend on the seed and the log only. */
static uint64_t cut_rand(uint64_t *s)
{
	uint64_t x = (*s += UINT64_C(0x9E3779B97F4A7C15));
	x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

int folio_engine_mem_power_cut(struct folio_engine *e, unsigned flags,
			       uint64_t seed)
{
	struct mem_ctx *c = mem_of(e);
	const unsigned all = FOLIO_MEM_CUT_KEEP_SOME | FOLIO_MEM_CUT_STAY_OFF;
	if (!c || (flags & ~all))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	if (c->closing) {
		pthread_mutex_unlock(&c->lock);
		return -ESHUTDOWN;
	}
	c->st.power_cuts++;
	/* Requests submitted before now and not yet performed never land:
	 * held ones are failed below, ones a mode switch has taken out
	 * see the new power generation in mem_perform_locked(). */
	c->power_gen++;
	int ret = 0;
	if (flags & FOLIO_MEM_CUT_KEEP_SOME) {
		/* Each entry survives with probability 1/2; survivors are
		 * applied in log order, the others dropped. */
		uint64_t s = seed;
		while (c->log_head) {
			struct mem_log *l = c->log_head;
			if (cut_rand(&s) & 1) {
				ret = log_apply_one(c, l);
				if (ret)
					break;
			} else {
				c->st.lost_ops++;
				if (!l->truncate)
					c->st.lost_bytes += l->len;
			}
			log_pop(c);
		}
	}
	/* What is left (all of it without KEEP_SOME; the rest after an
	 * allocation failure) is lost. */
	mem_log_discard_locked(c);
	if (flags & FOLIO_MEM_CUT_STAY_OFF)
		c->powered_off = true;
	mem_fail_held(c, -EIO);
	return ret;
}

int folio_engine_mem_power_on(struct folio_engine *e)
{
	struct mem_ctx *c = mem_of(e);
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->powered_off = false;
	pthread_mutex_unlock(&c->lock);
	return 0;
}
