/* SPDX-License-Identifier: MIT */
/*
 * Read-side sections that write no shared cache line, and memory freed
 * only after every section that might still see it has ended (an RCU of
 * the library's own; doc/design.md, "Lock-free lookups", says why not
 * liburcu; "Concurrency" has the rules of its sections).
 *
 * A reader counts itself in its thread's stripe (brlock_thread_stripe():
 * threads spread round robin over BRLOCK_STRIPES cache lines), in one of
 * two counters chosen by the parity of a global epoch, and checks that
 * the epoch did not move meanwhile. A grace period advances the epoch and
 * waits until the counters of the old parity drain in every stripe:
 * whoever counted itself under the old epoch has then left, and whoever
 * counts itself under the new one saw everything unlinked before the
 * advance. Readers thus write only their own stripe's line and read the
 * epoch's, which changes once per grace period.
 *
 * Rules: a section is short and never sleeps, takes no lock and frees
 * nothing (epoch_retire() may wait for a grace period, which would wait
 * for the caller's own section). Sections may nest.
 */
#ifndef FOLIO_EPOCH_H
#define FOLIO_EPOCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/brlock.h"

/* The counters, one cache line per stripe: stripe s counts parity p in
 * readers[EPOCH_SLOT(s, p)], the rest of its line unused. One flat array
 * rather than an array of per-stripe structs, so that a section's slot is
 * the counter's index and leaving one is a single decrement: no
 * re-splitting of the slot into stripe and parity on every exit. */
#define EPOCH_STRIDE (BRLOCK_LINE / sizeof(atomic_uint))
#define EPOCH_SLOT(s, p) ((s) * (unsigned)EPOCH_STRIDE + (p))

struct epoch_domain {
	_Alignas(BRLOCK_LINE) _Atomic uint64_t now;
	_Alignas(BRLOCK_LINE) atomic_uint readers[BRLOCK_STRIPES * EPOCH_STRIDE];
};

/* The library's one domain: sections are short, so one grace period for
 * every mapping costs no more than one per mapping would. */
extern HIDDEN struct epoch_domain epoch_global;

static inline void epoch_read_exit(unsigned slot)
{
	atomic_fetch_sub_explicit(&epoch_global.readers[slot], 1,
				  memory_order_release);
}

/* One try at entering a section counted in stripe s: true with *slot
 * set when it is entered. */
static inline bool epoch_read_try_enter(unsigned s, unsigned *slot)
{
	uint64_t e = atomic_load(&epoch_global.now);
	*slot = EPOCH_SLOT(s, (unsigned)(e & 1));
	atomic_fetch_add(&epoch_global.readers[*slot], 1);
	/* Counted under e only if e is still current: a grace period that
	 * advanced past it meanwhile may not have seen the count, so step
	 * back (the caller counts under the new one). */
	if (atomic_load(&epoch_global.now) == e)
		return true;
	epoch_read_exit(*slot);
	return false;
}

/* epoch_read_enter_at() once its first try met a grace period. */
unsigned epoch_read_enter_retry(unsigned s);

/* Enter a read-side section counted in stripe s (the caller's
 * brlock_thread_stripe(), when it has it already); pass the result to
 * epoch_read_exit(). Only the first try inline: a grace period in
 * between is rare, and a loop here costs the hot paths a jump. */
static inline unsigned epoch_read_enter_at(unsigned s)
{
	unsigned slot;
	if (__builtin_expect(epoch_read_try_enter(s, &slot), 1))
		return slot;
	return epoch_read_enter_retry(s);
}

/* Enter a read-side section; pass the result to epoch_read_exit(). */
static inline unsigned epoch_read_enter(void)
{
	return epoch_read_enter_at(brlock_thread_stripe());
}

/* Wait until every read-side section that began before the call has
 * ended. Never call it inside a section. */
void epoch_synchronize(void);

/* Memory to free after a grace period: embedded in the object, in bytes
 * no reader looks at once the object is unreachable. */
struct epoch_entry {
	struct epoch_entry *next;
	void (*free)(struct epoch_entry *e);
};

/*
 * Free e's object with e->free = fn once every section that could still
 * reach it has ended. The object must be unreachable for new sections
 * already. Entries are batched: a grace period per EPOCH_BATCH entries,
 * run by the thread whose retire fills the batch (outside any section).
 */
#define EPOCH_BATCH 64u
void epoch_retire(struct epoch_entry *e, void (*fn)(struct epoch_entry *e));

/* A grace period, then free everything retired so far (tests, and
 * callers that want the memory back now). */
void epoch_barrier(void);

#endif
