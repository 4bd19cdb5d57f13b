/* SPDX-License-Identifier: MIT */
/*
 * Filling folios from the store: the outcome of read requests, the
 * blocks a finished batch makes uptodate, the blocks a range lacks.
 */
#include <stdlib.h>
#include <string.h>

#include "mapping/fill.h"
#include "mapping/request.h"

int mapping_read_result(struct mapping_io *io, ssize_t result)
{
	int err = 0;
	if (result < 0)
		err = (int)result;
	else if ((size_t)result != io->base.io.len)
		err = -EIO; /* engines zero-fill past EOF: short is broken */
	io->result = err ? err : result;
	if (err) {
		stat_add(&io->m->stats.errors, 1);
	} else {
		stat_add(&io->m->stats.read_requests, 1);
		stat_add(&io->m->stats.read_bytes, (uint64_t)result);
	}
	return err;
}

void mapping_read_end_io(struct engine_io *rq, ssize_t result)
{
	struct mapping_io *io = container_of(rq, struct mapping_io, base);
	io_group_done(io->group, mapping_read_result(io, result));
}

/* One piece of folio a finished read filled. */
struct read_piece {
	struct folio *folio;
	size_t off, len;
};

static int piece_order(const void *a, const void *b)
{
	const struct read_piece *x = a, *y = b;
	if (x->folio->pos != y->folio->pos)
		return x->folio->pos < y->folio->pos ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * Some request of the batch failed. A block may have been read in several
 * pieces (map() extents smaller than a block, or a run cut short by a map
 * error), so a piece that succeeded proves nothing about the rest of its
 * block: mark only the blocks that successful pieces cover wholly. Every
 * run a read queues starts and ends on block boundaries, so with no
 * failure this marks exactly what was read.
 */
static void mark_read_blocks(struct mapping_io *list)
{
	size_t n = 0;
	for (struct mapping_io *io = list; io; io = io->next)
		if (io->result >= 0)
			n += io->nsegs;
	if (!n)
		return;
	struct read_piece *p = malloc(n * sizeof(*p));
	if (!p)
		return; /* marking nothing only costs a later re-read */
	size_t k = 0;
	for (struct mapping_io *io = list; io; io = io->next)
		for (unsigned i = 0; io->result >= 0 && i < io->nsegs; i++)
			p[k++] = (struct read_piece){io->segs[i].folio,
						     io->segs[i].off,
						     io->segs[i].len};
	qsort(p, n, sizeof(*p), piece_order);
	for (size_t i = 0; i < n;) {
		struct read_piece run = p[i++];
		while (i < n && p[i].folio == run.folio &&
		       p[i].off == run.off + run.len)
			run.len += p[i++].len;
		size_t mask = folio_block_size(run.folio) - 1;
		size_t a = (run.off + mask) & ~mask;
		size_t z = (run.off + run.len) & ~mask;
		if (a < z)
			folio_set_uptodate(run.folio, a, z - a);
	}
	free(p);
}

void mapping_settle_reads(struct folio_mapping *m, struct mapping_io *list,
			  uint64_t eof, bool mark, int err)
{
	for (struct mapping_io *io = list; io; io = io->next) {
		for (unsigned i = 0; io->result >= 0 && i < io->nsegs; i++) {
			struct rq_seg *s = &io->segs[i];
			mapping_zero_past_eof(m, s->folio, s->off, s->len, eof);
			/* A folio this read completed and nothing dirtied
			 * keeps no per-block map (the reader holds its
			 * lock, as compaction needs). */
			if (mark && !err &&
			    folio_set_uptodate(s->folio, s->off, s->len) ==
				    FOLIO_BECAME_UPTODATE)
				folio_compact_state(s->folio);
		}
	}
	if (mark && err)
		mark_read_blocks(list);
	while (list) {
		struct mapping_io *next = list->next;
		mapping_io_free(list);
		list = next;
	}
}

int mapping_queue_missing(struct rq_builder *b, struct folio *f, size_t off,
			  size_t len)
{
	if (folio_test_uptodate(f))
		return 0;
	size_t mask = folio_block_size(f) - 1;
	size_t at = off & ~mask;
	size_t end = (off + len + mask) & ~mask;
	while (at < end) {
		size_t run_off = at;
		ssize_t run = folio_next_missing(f, &run_off);
		if (run <= 0 || run_off >= end)
			break;
		size_t run_len = MIN((size_t)run, end - run_off);
		int r = rqb_add(b, f, run_off, run_len);
		if (r)
			return r;
		at = run_off + run_len;
	}
	return 0;
}

void mapping_zero_past_eof(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len, uint64_t eof)
{
	(void)m;
	uint64_t start = f->pos + off, end = start + len;
	if (end <= eof)
		return;
	uint64_t from = MAX(start, eof);
	memset(f->data + (from - f->pos), 0, (size_t)(end - from));
}
