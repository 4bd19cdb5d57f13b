/* SPDX-License-Identifier: MIT */
/*
 * Filling folios from the store (fill.c): queueing the blocks a read
 * lacks, and settling finished read requests, for reads, writes that
 * read their edge blocks, and readahead.
 */
#ifndef FOLIO_MAPPING_FILL_H
#define FOLIO_MAPPING_FILL_H

#include "mapping/request.h"

/* The outcome of a read request as a mapping counts it: 0, or the error
 * (a short read is -EIO); io->result is set and the stats counted. */
int mapping_read_result(struct mapping_io *io, ssize_t result);

/* The end_io of the read requests mapping_start_reads() builds. */
void mapping_read_end_io(struct engine_io *rq, ssize_t result);

/*
 * Reads of a list are done (io->result set): for each that succeeded zero
 * what lies past `eof` and, with `mark`, set its blocks uptodate (when
 * `err` says some read of the batch failed, only the blocks successful
 * reads wholly cover). Frees the requests.
 */
void mapping_settle_reads(struct folio_mapping *m, struct mapping_io *list,
			  uint64_t eof, bool mark, int err);

/* Queue the not-uptodate blocks touched by [off, off+len) of f. */
int mapping_queue_missing(struct rq_builder *b, struct folio *f, size_t off,
			  size_t len);

/* Zero the bytes of [off, off+len) of f that lie at or past EOF. */
void mapping_zero_past_eof(struct folio_mapping *m, struct folio *f,
			   size_t off, size_t len, uint64_t eof);

/* Start a builder of reads that @g waits for and mapping_finish_reads()
 * walks afterwards (so it keeps them). Inline, as both are: they bracket
 * every read batch and every write that reads its edge blocks. */
static inline void mapping_start_reads(struct folio_mapping *m,
				       struct rq_builder *b,
				       struct io_group *g)
{
	io_group_init(g);
	rqb_init(b, m, FOLIO_IO_READ, g, mapping_read_end_io);
	b->keep = true;
	rqb_set_waited(b);
}

/*
 * Wait for the reads a builder submitted and settle them (see
 * mapping_settle_reads()). Returns the first error.
 */
static inline int mapping_finish_reads(struct folio_mapping *m,
				       struct rq_builder *b,
				       struct io_group *g, uint64_t eof,
				       bool mark)
{
	int err = io_group_wait(g, m->engine);
	if (b->error && !err)
		err = b->error;
	mapping_settle_reads(m, b->submitted, eof, mark, err);
	b->submitted = NULL;
	return err;
}

#endif
