/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a folio's lock or writeback, driving a polled engine.
 */
#include "mapping/tags.h"
#include "mapping/wait.h"

/* engine_wait_until() asks done() again after it said yes once. */
struct lock_wait {
	struct folio *folio;
	bool taken;
};

static bool lock_taken(void *arg)
{
	struct lock_wait *w = arg;
	if (!w->taken)
		w->taken = folio_trylock(w->folio) == 1;
	return w->taken;
}

static void lock_sleep(void *arg, const struct timespec *t)
{
	struct lock_wait *w = arg;
	(void)folio_wait_unlocked_for(w->folio, t);
}

void mapping_lock_folio_slow(struct folio_mapping *m, struct folio *f)
{
	/* Only readahead leaves a folio locked with nobody to complete its
	 * read, and it counts itself in ra_inflight before it locks any:
	 * a holder seen while that is 0 unlocks on its own. */
	while (!folio_lock_nowait(f)) {
		if (m->engine->ops.wait && atomic_load(&m->ra.inflight)) {
			struct lock_wait w = {f, false};
			(void)engine_wait_until(m->engine, lock_taken,
						lock_sleep, &w);
			return;
		}
		(void)folio_wait_unlocked_for(f, NULL);
	}
}

static bool writeback_done(void *arg)
{
	return !folio_test_writeback(arg);
}

static void writeback_sleep(void *arg, const struct timespec *t)
{
	folio_wait_writeback_for(arg, t);
}

int mapping_wait_writeback(struct folio_mapping *m, struct folio *f)
{
	return engine_wait_until(m->engine, writeback_done, writeback_sleep,
				 f);
}

int mapping_wait_range_writeback(struct folio_mapping *m, uint64_t start,
				 uint64_t end)
{
	if (start >= end)
		return 0;
	uint64_t key = mapping_key(m, start);
	uint64_t last = mapping_key(m, end - 1);
	struct folio *f;
	int err = 0;
	while ((f = mapping_next_folio(m, &key, last, INDEX_TAG_WRITEBACK))) {
		int r = mapping_wait_writeback(m, f);
		if (!err)
			err = r;
		folio_unref(f);
	}
	return err;
}
