/* SPDX-License-Identifier: MIT */
/*
 * Compiled with only include/ on the include path, as strict C99 and
 * without _GNU_SOURCE: the public header must bring everything it uses.
 * The function makes the types complete enough to be used, so that a
 * header that merely parses but names undeclared types still fails.
 */
#include "folio_state.h"
#include "folio_state_mem.h"
#include "folio_state_nbd.h"
#include "folio_state_rados.h"

size_t header_c99_use(struct folio *f, struct folio_range *r);
uint64_t header_c99_use_mem(struct folio_mem_stats *st,
			    struct folio_mem_fault *fault);

uint64_t header_c99_use_mem(struct folio_mem_stats *st,
			    struct folio_mem_fault *fault)
{
	enum folio_mem_mode mode = FOLIO_MEM_POLL;
	return st->size + fault->pos + (uint64_t)mode + FOLIO_MEM_OP_FLUSH +
	       FOLIO_MEM_MAX_CAPACITY;
}

size_t header_c99_use(struct folio *f, struct folio_range *r)
{
	struct folio_io io = {.op = FOLIO_IO_WRITE, .iov = NULL};
	struct folio_extent ext = {.flags = FOLIO_EXTENT_HOLE};
	ssize_t len = folio_next_dirty(f, &r->off);
	bool up = folio_test_uptodate(f);
	return (size_t)len + io.len + (size_t)ext.len + (up ? 1u : 0u) +
	       FOLIO_MAX_SIZE;
}

/* The NBD engine's sized structs. */
unsigned header_c99_use_nbd(struct folio_nbd_opts *o, struct folio_nbd_info *i);
unsigned header_c99_use_nbd(struct folio_nbd_opts *o, struct folio_nbd_info *i)
{
	return o->connections + o->depth + i->connections;
}
