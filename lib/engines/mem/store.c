/* SPDX-License-Identifier: MIT */
/*
 * The mem engine's durable store: sparse 64 KiB chunks indexed by device
 * position, and the map's geometry (file position <-> device position).
 * Bytes past the durable size are always zero in the store, which lets a
 * later write or truncate grow the object with zeros.
 */
#include <stdlib.h>
#include <string.h>

#include "engines/mem/mem.h"

#define LEAF_SPAN (UINT64_C(1) << MEM_LEAF_SPAN_SHIFT)

/* With scatter the last, possibly partial, extent pair may put file bytes
 * below the capacity at device places above it. */
uint64_t mem_dev_limit(uint64_t capacity, uint64_t extent_size, bool scatter)
{
	if (!scatter)
		return capacity;
	uint64_t pair = extent_size * 2;
	return (capacity + pair - 1) & ~(pair - 1);
}

int mem_store_reserve(struct mem_ctx *c, uint64_t limit)
{
	size_t need = (size_t)((limit + (LEAF_SPAN - 1)) >> MEM_LEAF_SPAN_SHIFT);
	if (need <= c->ntop)
		return 0;
	struct mem_leaf **t = realloc(c->top, need * sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t + c->ntop, 0, (need - c->ntop) * sizeof(*t));
	c->top = t;
	c->ntop = need;
	return 0;
}

static unsigned char *store_chunk(struct mem_ctx *c, uint64_t dev, bool alloc)
{
	uint64_t ci = dev >> MEM_CHUNK_SHIFT;
	size_t ti = (size_t)(ci >> MEM_LEAF_SHIFT),
	       li = ci & (MEM_LEAF_ENTRIES - 1);
	if (ti >= c->ntop)
		return NULL;
	struct mem_leaf *leaf = c->top[ti];
	if (!leaf) {
		if (!alloc)
			return NULL;
		leaf = calloc(1, sizeof(*leaf));
		if (!leaf)
			return NULL;
		c->top[ti] = leaf;
	}
	if (!leaf->chunk[li] && alloc) {
		leaf->chunk[li] = calloc(1, MEM_CHUNK_SIZE);
		if (leaf->chunk[li]) {
			leaf->used++;
			c->mem_bytes += MEM_CHUNK_SIZE;
		}
	}
	return leaf->chunk[li];
}

void mem_store_read(struct mem_ctx *c, uint64_t dev, void *buf, size_t len)
{
	unsigned char *out = buf;
	while (len) {
		size_t off = dev & (MEM_CHUNK_SIZE - 1),
		       n = MIN(len, MEM_CHUNK_SIZE - off);
		unsigned char *ch = store_chunk(c, dev, false);
		if (ch)
			memcpy(out, ch + off, n);
		else
			memset(out, 0, n);
		out += n;
		dev += n;
		len -= n;
	}
}

size_t mem_store_write(struct mem_ctx *c, uint64_t dev, const void *buf,
		       size_t len)
{
	const unsigned char *in = buf;
	size_t done = 0;
	while (done < len) {
		size_t off = dev & (MEM_CHUNK_SIZE - 1),
		       n = MIN(len - done, MEM_CHUNK_SIZE - off);
		unsigned char *ch = store_chunk(c, dev, true);
		if (!ch)
			break;
		memcpy(ch + off, in + done, n);
		done += n;
		dev += n;
	}
	return done;
}

/* Zero device bytes [dev, dev+len); chunks wholly inside are freed. */
static void store_zero(struct mem_ctx *c, uint64_t dev, uint64_t len)
{
	while (len) {
		uint64_t off = dev & (MEM_CHUNK_SIZE - 1),
			 n = MIN(len, MEM_CHUNK_SIZE - off);
		uint64_t ci = dev >> MEM_CHUNK_SHIFT;
		size_t ti = (size_t)(ci >> MEM_LEAF_SHIFT),
		       li = ci & (MEM_LEAF_ENTRIES - 1);
		if (ti >= c->ntop)
			return;
		struct mem_leaf *leaf = c->top[ti];
		if (!leaf) {
			/* Skip the rest of this absent leaf in one step. */
			uint64_t span = LEAF_SPAN - (dev & (LEAF_SPAN - 1));
			span = MIN(span, len);
			dev += span;
			len -= span;
			continue;
		}
		unsigned char *ch = leaf->chunk[li];
		if (ch) {
			if (n == MEM_CHUNK_SIZE) {
				free(ch);
				leaf->chunk[li] = NULL;
				c->mem_bytes -= MEM_CHUNK_SIZE;
				if (!--leaf->used) {
					free(leaf);
					c->top[ti] = NULL;
				}
			} else {
				memset(ch + off, 0, (size_t)n);
			}
		}
		dev += n;
		len -= n;
	}
}

void mem_store_free(struct mem_ctx *c)
{
	for (size_t t = 0; t < c->ntop; t++) {
		struct mem_leaf *leaf = c->top[t];
		if (!leaf)
			continue;
		for (size_t i = 0; i < MEM_LEAF_ENTRIES; i++)
			free(leaf->chunk[i]);
		free(leaf);
	}
	free(c->top);
	c->top = NULL;
	c->ntop = 0;
}

/* ---- the map's geometry --------------------------------------------- */

uint64_t mem_map_dev(const struct mem_ctx *c, uint64_t pos)
{
	if (!c->extent_size || !c->scatter)
		return pos;
	return pos ^ c->extent_size; /* extent k <-> extent k ^ 1 */
}

bool mem_directed(const struct mem_ctx *c, const struct folio_io *io)
{
	if (io->dev_pos != mem_map_dev(c, io->pos))
		return false;
	if (c->extent_size && c->scatter) {
		/* Neighbouring extents are never device-contiguous here. */
		uint64_t in_ext = c->extent_size - (io->pos & (c->extent_size - 1));
		if (io->len > in_ext)
			return false;
	}
	return true;
}

/*
 * Split file range [pos, pos+len) into device pieces and call fn on each
 * with the piece's offset inside the range. With @any_order the caller
 * does not care which file byte lands where (zeroing): whole extent pairs
 * then go as one piece, since a pair maps onto itself as a whole, and a
 * truncate of a huge range costs what the store holds, not what the range
 * spans.
 */
static void for_each_piece(struct mem_ctx *c, uint64_t pos, uint64_t len,
			   bool any_order,
			   void (*fn)(struct mem_ctx *c, uint64_t dev,
				      uint64_t file_off, uint64_t n, void *arg),
			   void *arg)
{
	uint64_t off = 0;
	if (!c->extent_size || !c->scatter) {
		if (len)
			fn(c, pos, 0, len, arg);
		return;
	}
	uint64_t e = c->extent_size, pair = 2 * e;
	while (off < len) {
		uint64_t p = pos + off, n;
		if (any_order && !(p & (pair - 1)) && len - off >= pair) {
			n = (len - off) & ~(pair - 1);
			fn(c, p, off, n, arg);
		} else {
			n = MIN(len - off, e - (p & (e - 1)));
			fn(c, mem_map_dev(c, p), off, n, arg);
		}
		off += n;
	}
}

static void piece_read(struct mem_ctx *c, uint64_t dev, uint64_t off,
		       uint64_t n, void *arg)
{
	mem_store_read(c, dev, (unsigned char *)arg + off, (size_t)n);
}

struct piece_write_arg {
	const unsigned char *buf;
	bool failed;
};

static void piece_write(struct mem_ctx *c, uint64_t dev, uint64_t off,
			uint64_t n, void *arg)
{
	struct piece_write_arg *a = arg;
	if (mem_store_write(c, dev, a->buf + off, (size_t)n) < n)
		a->failed = true;
}

static void piece_zero(struct mem_ctx *c, uint64_t dev, uint64_t off,
		       uint64_t n, void *arg)
{
	store_zero(c, dev, n);
}

/* ---- the durable object, in file positions -------------------------- */

void mem_durable_read_locked(struct mem_ctx *c, uint64_t pos, void *buf,
			     size_t len)
{
	for_each_piece(c, pos, len, false, piece_read, buf);
	if (pos + len > c->dsize) {
		uint64_t from = MAX(pos, c->dsize);
		memset((char *)buf + (from - pos), 0, (size_t)(pos + len - from));
	}
}

int mem_durable_write_locked(struct mem_ctx *c, uint64_t pos, const void *buf,
			     size_t len)
{
	if (!len)
		return 0;
	struct piece_write_arg a = {buf, false};
	for_each_piece(c, pos, len, false, piece_write, &a);
	if (a.failed) {
		/* Leave no stray bytes past the size behind. */
		if (pos + len > c->dsize)
			for_each_piece(c, MAX(pos, c->dsize),
				       pos + len - MAX(pos, c->dsize), true,
				       piece_zero, NULL);
		return -ENOMEM;
	}
	if (pos + len > c->dsize)
		c->dsize = pos + len;
	return 0;
}

void mem_durable_resize_locked(struct mem_ctx *c, uint64_t size)
{
	if (size < c->dsize) {
		/* Bytes past the old size are zero already, so zeroing up to
		 * the end of its chunk lets that chunk be freed too. */
		uint64_t end = (c->dsize + MEM_CHUNK_SIZE - 1) &
			       ~(uint64_t)(MEM_CHUNK_SIZE - 1);
		for_each_piece(c, size, end - size, true, piece_zero, NULL);
	}
	c->dsize = size;
}
