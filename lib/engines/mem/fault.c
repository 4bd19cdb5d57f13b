/* SPDX-License-Identifier: MIT */
/*
 * The mem engine's fault rules: deterministic "fail the Nth matching
 * call" rules for reads, writes, flushes and truncates.
 */
#include <string.h>

#include "engines/mem/mem.h"

/* Every matching rule counts the call, so each rule's skip/count window
 * is independent; the first rule added that fires decides. */
const struct folio_mem_fault *mem_fault_check_locked(struct mem_ctx *c,
						     unsigned opbit,
						     const struct folio_io *io)
{
	const struct folio_mem_fault *fired = NULL;
	for (unsigned i = 0; i < c->nrules; i++) {
		struct mem_rule *r = &c->rules[i];
		if (!(r->f.ops & opbit))
			continue;
		if (io && r->f.len) {
			uint64_t end = io->pos + MAX(io->len, (size_t)1);
			if (io->pos >= r->f.pos + r->f.len || end <= r->f.pos)
				continue;
		}
		r->seen++;
		if (r->seen > r->f.skip &&
		    (!r->f.count || r->seen - r->f.skip <= r->f.count) &&
		    !fired)
			fired = &r->f;
	}
	if (fired)
		c->st.faults++;
	return fired;
}

int folio_engine_mem_inject(struct folio_engine *e,
			    const struct folio_mem_fault *fault)
{
	struct mem_ctx *c = mem_of(e);
	const unsigned all = FOLIO_MEM_OP_READ | FOLIO_MEM_OP_WRITE |
			     FOLIO_MEM_OP_FLUSH | FOLIO_MEM_OP_TRUNCATE;
	if (!c || !fault)
		return -EINVAL;
	int bad = sized_check(fault, fault->sz, MEM_FAULT_SZ_V0,
			      sizeof(*fault));
	if (bad)
		return bad;
	/* A caller's struct may predate the later fields: they are 0. */
	struct folio_mem_fault f = {0};
	memcpy(&f, fault, MIN(fault->sz, sizeof(f)));
	if (!OPTS_HAS(fault, flags))
		f.flags = 0;
	fault = &f;
	if (!fault->ops ||
	    (fault->ops & ~all) || fault->error > 0 ||
	    fault->error < -MEM_MAX_ERRNO ||
	    !fault->error == !fault->short_len ||
	    (!fault->error &&
	     (fault->ops & (FOLIO_MEM_OP_FLUSH | FOLIO_MEM_OP_TRUNCATE))) ||
	    fault->len > UINT64_MAX - fault->pos ||
	    (fault->flags & ~(unsigned)(FOLIO_MEM_FAULT_LOSE |
					 FOLIO_MEM_FAULT_APPLIED)) ||
	    ((fault->flags & FOLIO_MEM_FAULT_LOSE) &&
	     !(fault->ops & FOLIO_MEM_OP_FLUSH)) ||
	    ((fault->flags & FOLIO_MEM_FAULT_APPLIED) &&
	     (!fault->error || fault->ops != FOLIO_MEM_OP_WRITE)))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int ret = 0;
	if (c->nrules == MEM_MAX_RULES) {
		ret = -ENOSPC;
	} else {
		struct mem_rule *r = &c->rules[c->nrules++];
		r->f = *fault;
		r->f.sz = sizeof(r->f);
		r->seen = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int folio_engine_mem_clear_faults(struct folio_engine *e)
{
	struct mem_ctx *c = mem_of(e);
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->nrules = 0;
	pthread_mutex_unlock(&c->lock);
	return 0;
}
