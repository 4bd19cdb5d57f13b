/* SPDX-License-Identifier: MIT */
/*
 * Mapping life cycle, folio lookup and creation, index tags, statistics.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "mapping/mapping.h"

#define DEFAULT_BLOCK_SIZE 4096u
#define KNOWN_FLAGS \
	(FOLIO_MAPPING_STABLE_WRITES | FOLIO_MAPPING_DROP_ON_ERROR | \
	 FOLIO_MAPPING_FOLIO_DIRTY | FOLIO_MAPPING_NO_READAHEAD)

/* Mapping ids are never reused, so a thread's cached folio pointer can
 * never be mistaken for one of a later mapping at the same address. */
static _Atomic uint64_t next_mapping_id = 1;

/* Fields a caller's options struct must have (everything up to engine). */
#define OPTS_MIN_SZ \
	(offsetof(struct folio_mapping_opts, engine) + sizeof(void *))
#define OPTS_POOL_SZ SIZEOF_THROUGH(struct folio_mapping_opts, pool)
#define OPTS_RA_SZ SIZEOF_THROUGH(struct folio_mapping_opts, readahead_max)

static bool size_ok(size_t v, size_t lo, size_t hi)
{
	return is_pow2(v) && v >= lo && v <= hi;
}

int folio_mapping_new(struct folio_mapping **out,
		      const struct folio_mapping_opts *opts)
{
	if (!out || !opts)
		return -EINVAL;
	int r = sized_check(opts, opts->sz, OPTS_MIN_SZ, sizeof(*opts));
	if (r)
		return r;
	if (!opts->engine)
		return -EINVAL;
	size_t bs = opts->block_size ? opts->block_size : DEFAULT_BLOCK_SIZE;
	size_t min = opts->min_folio_size ? opts->min_folio_size : bs;
	size_t max = opts->max_folio_size ? opts->max_folio_size
					  : FOLIO_MAX_SIZE;
	if (!size_ok(bs, FOLIO_MIN_BLOCK_SIZE, FOLIO_MAX_BLOCK_SIZE) ||
	    !size_ok(min, bs, FOLIO_MAX_SIZE) ||
	    !size_ok(max, min, FOLIO_MAX_SIZE) ||
	    opts->size > FOLIO_MAX_POS || (opts->flags & ~KNOWN_FLAGS))
		return -EINVAL;
	size_t ra_max = opts->sz >= OPTS_RA_SZ ? opts->readahead_max : 0;
	if (ra_max % bs || ra_max > FOLIO_MAPPING_MAX_READAHEAD)
		return -EINVAL;
	/* A pool embeds its mapping_cache first (lib/pool/pool.h). */
	struct mapping_cache *cache =
		opts->sz >= OPTS_POOL_SZ && opts->pool
			? (struct mapping_cache *)(void *)opts->pool
			: NULL;

	/* The io_lock stripes are cache-line aligned, so the mapping is. */
	size_t bytes = (sizeof(struct folio_mapping) + BRLOCK_LINE - 1) &
		       ~(size_t)(BRLOCK_LINE - 1);
	struct folio_mapping *m = aligned_alloc(BRLOCK_LINE, bytes);
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	if (brlock_init(&m->io_lock)) {
		free(m);
		return -ENOMEM;
	}
	if (pthread_rwlock_init(&m->index_lock, NULL)) {
		brlock_destroy(&m->io_lock);
		free(m);
		return -ENOMEM;
	}
	if (mapping_commit_init(m)) {
		pthread_rwlock_destroy(&m->index_lock);
		brlock_destroy(&m->io_lock);
		free(m);
		return -ENOMEM;
	}
	index_init(&m->index);
	(void)index_set_lockless(&m->index); /* malloc's nodes: cannot fail */
	m->engine = opts->engine;
	m->block_shift = ilog2_u64(bs);
	m->min_shift = ilog2_u64(min);
	m->max_shift = ilog2_u64(max);
	m->flags = opts->flags;
	atomic_init(&m->size, opts->size);
	atomic_init(&m->stale_from, UINT64_MAX);
	atomic_init(&m->backing_size, opts->size);
	atomic_init(&m->flush_epoch, 1);
	m->failures_seen = atomic_load(&opts->engine->flush_failures);
	m->id = atomic_fetch_add(&next_mapping_id, 1);
	atomic_init(&m->dirty_since, 0);
	if (cache) {
		/* The geometry is known now, which is what the pool checks
		 * against its budget. */
		r = cache->ops->attach(cache, m);
		if (r) {
			mapping_commit_destroy(m);
			pthread_rwlock_destroy(&m->index_lock);
			brlock_destroy(&m->io_lock);
			free(m);
			return r;
		}
		m->cache = cache;
	}
	mapping_readahead_init(m, ra_max ? ra_max : MAPPING_RA_DEFAULT_MAX);
	atomic_fetch_add(&opts->engine->users, 1);
	*out = m;
	return 0;
}

/* Does any folio still hold data the store may lack (dirty, or written
 * but not flushed), or I/O, or a write_begin() without its write_end()? */
static bool mapping_busy(struct folio_mapping *m)
{
	bool busy = false;
	pthread_rwlock_rdlock(&m->index_lock);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while (!busy && (f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		busy = folio_test_busy(f);
		key += UINT64_C(1) << order;
		if (!key)
			break;
	}
	pthread_rwlock_unlock(&m->index_lock);
	if (busy)
		return true;
	/* No folio is under writeback, yet a completion may still be
	 * running: the last folio's writeback ends (waking a sync that may
	 * then call free) before the completion frees its request and drops
	 * wb_inflight. It touches the mapping until then and is about to
	 * finish, so wait rather than fail. */
	while (atomic_load(&m->wb_inflight))
		sched_yield();
	return false;
}

int folio_mapping_free(struct folio_mapping *m)
{
	if (!m)
		return 0;
	/* Readahead holds folios locked until its reads complete, which a
	 * polled engine needs someone to drive. */
	mapping_readahead_drain(m);
	struct mapping_cache *c = m->cache;
	/* The cache's reclaimers and flushers reach m without io_lock, and
	 * a flusher inside a writeback of m holds io_lock shared: they are
	 * sent away before io_lock is taken, and a folio they held locked
	 * cannot make m look busy. */
	if (c)
		c->ops->quiesce(c, m);
	brlock_write_lock(&m->io_lock);
	if (mapping_busy(m)) {
		brlock_write_unlock(&m->io_lock);
		if (c)
			c->ops->unquiesce(c, m);
		return -EBUSY;
	}
	mapping_drop_hint(m);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while ((f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		index_remove(&m->index, key, order);
		/* Another thread's hint may still pin it: it finds the
		 * folio gone, not a folio of a mapping that is gone. */
		folio_mark_removed(f);
		if (c)
			c->ops->removed(c, m, f);
		f->mapping = NULL;
		folio_put(f);
	}
	index_destroy(&m->index);
	brlock_write_unlock(&m->io_lock);
	if (c)
		c->ops->detach(c, m);
	brlock_destroy(&m->io_lock);
	pthread_rwlock_destroy(&m->index_lock);
	mapping_commit_destroy(m);
	atomic_fetch_sub(&m->engine->users, 1);
	free(m);
	/* Headers of the folios and nodes this mapping retired come back
	 * now rather than with some later batch: a program that frees its
	 * last mapping holds no memory of it (leak checkers included). */
	epoch_barrier();
	return 0;
}

int64_t folio_mapping_size(const struct folio_mapping *m)
{
	if (!m)
		return -EINVAL;
	return (int64_t)atomic_load(&((struct folio_mapping *)m)->size);
}

void mapping_grow_eof(struct folio_mapping *m, uint64_t end)
{
	uint64_t cur = atomic_load_explicit(&m->size, memory_order_relaxed);
	while (cur < end &&
	       !atomic_compare_exchange_weak_explicit(&m->size, &cur, end,
						      memory_order_release,
						      memory_order_relaxed))
		;
}

void (*_Atomic mapping_test_lookup_delay)(void);

/* Does f (found by a lock-free lookup, so perhaps racing a writer) hold
 * pos? Its position and size never change while its header lives. */
static inline bool folio_holds(const struct folio *f, uint64_t pos)
{
	return pos - f->pos < folio_bytes(f);
}

static inline void lookup_delay(void)
{
	void (*delay)(void) = atomic_load_explicit(&mapping_test_lookup_delay,
						   memory_order_relaxed);
	if (delay)
		delay();
}

/*
 * A referenced lookup writing nothing shared: inside an epoch section the
 * folio found keeps its header, a try-get takes a reference unless it is
 * dying or frozen, and a reload of the slot it was found in confirms it
 * did not leave the index before the reference was ours (as the kernel's
 * page cache does). A lookup that loses such a race takes index_lock
 * shared, which waits for the remover or reclaimer it raced.
 */
struct folio *mapping_lookup(struct folio_mapping *m, uint64_t pos)
{
	uint64_t key = mapping_key(m, pos);
	struct folio *got = NULL;
	const uintptr_t *slot;
	unsigned ep = epoch_read_enter();
	struct folio *f = index_lookup_slot(&m->index, key, &slot);
	if (f) {
		lookup_delay();
		if (folio_holds(f, pos) && folio_try_get(f))
			got = f;
		if (got && !index_slot_holds(slot, got))
			f = NULL; /* left meanwhile: a reference to let go */
	}
	epoch_read_exit(ep);
	if (f == got)
		return got; /* a hit, or nothing at key */
	/* Outside the section: the last reference frees. */
	folio_put(got);
	pthread_rwlock_rdlock(&m->index_lock);
	f = index_lookup(&m->index, key);
	folio_get(f);
	pthread_rwlock_unlock(&m->index_lock);
	return f;
}

int folio_mapping_lookup(struct folio_mapping *m, uint64_t pos,
			 struct folio **folio)
{
	if (!m || !folio)
		return -EINVAL;
	if (pos >= FOLIO_MAX_POS)
		return -ENOENT;
	struct folio *f = mapping_lookup(m, pos);
	if (!f)
		return -ENOENT;
	*folio = f;
	return 0;
}

/* Largest power of two <= x (x > 0). */
static uint64_t pow2_floor(uint64_t x)
{
	return UINT64_C(1) << ilog2_u64(x);
}

/* The size create_folio() tries first for a folio holding pos: at most
 * what it will allocate, so the cache is charged for it up front. */
static uint64_t planned_size(const struct folio_mapping *m, uint64_t pos,
			     size_t len_hint, uint64_t *startp)
{
	size_t min = (size_t)1 << m->min_shift;
	uint64_t start = pos & ~(uint64_t)(min - 1);
	uint64_t want = pos - start + (len_hint ? len_hint : 1);
	uint64_t size = MIN(pow2_floor(MAX(want, min)),
			    (uint64_t)1 << m->max_shift);
	if (start)
		size = MIN(size, start & -start); /* start's alignment */
	/* Never run past the largest position. */
	while (size > min && start + size > FOLIO_MAX_POS)
		size >>= 1;
	*startp = start;
	return size;
}

/*
 * Insert a new folio holding pos. It starts at pos rounded down to the
 * min folio size, and its size is the largest power of two that the
 * remaining length, that start's alignment and the max folio size allow;
 * it halves while it would overlap a neighbour. The folio goes in locked
 * (nobody can see it before, so the trylock cannot fail): a reclaimer
 * cannot take it before its creator has used it. Caller holds index_lock
 * exclusively and has checked that no folio holds pos, so the min size
 * always fits.
 */
static struct folio *create_folio(struct folio_mapping *m, uint64_t pos,
				  size_t len_hint, int *err)
{
	size_t min = (size_t)1 << m->min_shift;
	uint64_t start;
	uint64_t size = planned_size(m, pos, len_hint, &start);

	for (;; size >>= 1) {
		struct folio *f;
		int r = folio_alloc(&f, start, (size_t)size,
				    (size_t)1 << m->block_shift, false);
		if (r) {
			*err = r;
			return NULL;
		}
		f->mapping = m;
		(void)folio_trylock(f);
		r = index_insert(&m->index, mapping_key(m, start),
				 (unsigned)(ilog2_u64(size) - m->min_shift),
				 f);
		if (!r)
			return f;
		f->mapping = NULL;
		folio_put(f);
		if (r != -EEXIST || size == min) {
			*err = r == -EEXIST ? -EIO : r;
			return NULL;
		}
	}
}

/*
 * The last folio this thread found, with a pinned reference
 * (folio_hint_get()), and the id of its mapping. The reference keeps the
 * memory valid however the folio left its mapping meanwhile; the thread
 * drops it when it moves to another folio, frees the mapping, or exits
 * (hint_key's destructor).
 */
static _Thread_local struct {
	uint64_t id;
	struct folio *folio;
	bool pinned;
	bool registered; /* hint_key is set, so the destructor runs */
} folio_hint TLS_FAST;

static pthread_key_t hint_key;
static pthread_once_t hint_once = PTHREAD_ONCE_INIT;
static bool hint_key_ok;

/* Take the hint out; the caller lets its reference go (outside any
 * index lock: it may be the last one). */
static struct folio *hint_take(bool *pinned)
{
	struct folio *f = folio_hint.folio;
	*pinned = folio_hint.pinned;
	folio_hint.folio = NULL;
	folio_hint.id = 0;
	return f;
}

static void hint_release(struct folio *f, bool pinned)
{
	if (f)
		folio_hint_put(f, pinned);
}

static void hint_destructor(void *unused)
{
	(void)unused;
	bool pinned;
	struct folio *f = hint_take(&pinned);
	hint_release(f, pinned);
}

static void hint_key_create(void)
{
	hint_key_ok = !pthread_key_create(&hint_key, hint_destructor);
}

/* Make f the hint, pinning the reference the caller took for it when
 * `adopt`, else a new one (the caller holds index_lock or f's lock, so
 * no reclaim can be freezing f: see folio_ref_freeze()); returns the old
 * one for the caller to release. */
static struct folio *hint_set(struct folio_mapping *m, struct folio *f,
			      bool adopt, bool *old_pinned)
{
	struct folio *old = hint_take(old_pinned);
	if (!folio_hint.registered) {
		pthread_once(&hint_once, hint_key_create);
		/* Without the key a thread that exits leaks its last
		 * folio's memory; everything still works. */
		folio_hint.registered =
			hint_key_ok &&
			!pthread_setspecific(hint_key, &folio_hint);
	}
	folio_hint.pinned = adopt ? folio_hint_adopt(f) : folio_hint_get(f);
	folio_hint.folio = f;
	folio_hint.id = m->id;
	return old;
}

void mapping_drop_hint(struct folio_mapping *m)
{
	if (folio_hint.folio && folio_hint.id == m->id) {
		bool pinned;
		struct folio *f = hint_take(&pinned);
		hint_release(f, pinned);
	}
}

static void cache_count(struct folio_mapping *m, bool hit)
{
	struct mapping_cache_stripe *s =
		&m->cache->stripe[brlock_thread_stripe()];
	atomic_fetch_add_explicit(hit ? &s->hits : &s->misses, 1,
				  memory_order_relaxed);
}

/*
 * Create the folio holding pos, charged to m's cache first. Returns it
 * locked, or NULL with *err (MAPPING_CACHE_FULL: credit->need says how much).
 * *found is set when another thread created it meanwhile (returned
 * unlocked, with a hint reference like an index hit). `quiet` (readahead)
 * takes a plain reference instead of the hint and counts no miss.
 */
static struct folio *create_charged(struct folio_mapping *m, uint64_t pos,
				    size_t len_hint,
				    struct mapping_cache_credit *credit,
				    int *err, bool *found, bool quiet)
{
	struct mapping_cache *c = m->cache;
	uint64_t start, charged = 0;
	*found = false;
	if (c) {
		uint64_t need = planned_size(m, pos, len_hint, &start);
		/* The credit first: it was reserved for exactly this. */
		uint64_t from_credit = MIN(need, credit->bytes);
		if (need > from_credit &&
		    c->ops->charge(c, m, (size_t)(need - from_credit))) {
			credit->need = (size_t)need;
			*err = MAPPING_CACHE_FULL;
			return NULL;
		}
		credit->bytes -= from_credit;
		charged = need;
	}
	bool old_pinned = false;
	struct folio *old = NULL;
	pthread_rwlock_wrlock(&m->index_lock);
	/* Someone may have created it while we were unlocked. */
	struct folio *f = index_lookup(&m->index, mapping_key(m, pos));
	if (f) {
		*found = true;
	} else {
		f = create_folio(m, pos, len_hint, err);
	}
	if (f && quiet)
		folio_get(f);
	else if (f)
		old = hint_set(m, f, false, &old_pinned);
	pthread_rwlock_unlock(&m->index_lock);
	hint_release(old, old_pinned);
	if (c) {
		uint64_t used = f && !*found ? folio_size(f) : 0;
		if (charged > used)
			c->ops->uncharge(c, (size_t)(charged - used));
		if (used) {
			c->ops->added(c, m, f);
			if (!quiet)
				cache_count(m, false);
		}
	}
	return f;
}

/* The thread's hint when it is m's folio holding pos, else NULL. */
static struct folio *hint_holding(const struct folio_mapping *m, uint64_t pos)
{
	struct folio *f = folio_hint.folio;
	return f && folio_hint.id == m->id && pos - f->pos < folio_bytes(f)
		       ? f
		       : NULL;
}

struct folio *mapping_find_or_create_locked(
	struct folio_mapping *m, uint64_t pos, size_t len_hint,
	struct mapping_cache_credit *credit, int *err)
{
	for (;;) {
		struct folio *f = hint_holding(m, pos);
		if (!f || folio_test_removed(f)) {
			bool old_pinned = false;
			struct folio *old = NULL;
			f = mapping_lookup(m, pos);
			if (f)
				old = hint_set(m, f, true, &old_pinned);
			hint_release(old, old_pinned);
			if (!f) {
				bool found;
				f = create_charged(m, pos, len_hint, credit,
						   err, &found, false);
				if (!f)
					return NULL;
				if (!found)
					return f; /* new, inserted locked */
			}
			/* Found in the index: a real access (see
			 * mapping.h); hint hits are not, nor is the first
			 * use of a folio read ahead, which is the use its
			 * creation stood for (a sequential pass must not
			 * look hot). */
			if (m->cache && !folio_test_ra_unread(f))
				folio_note_access(f);
		}
		if (m->cache)
			cache_count(m, true);
		mapping_lock_folio(m, f);
		if (!folio_test_removed(f))
			return f;
		/* Reclaimed between the lookup and the lock: the hint no
		 * longer matches, the next round looks again. */
		folio_unlock(f);
	}
}

struct folio *mapping_trylock_cached(struct folio_mapping *m, uint64_t pos,
				     bool sequential)
{
	struct folio *f = hint_holding(m, pos);
	if (f) {
		if (!folio_lock_nowait(f))
			return NULL;
		if (folio_test_removed(f)) {
			folio_release(f);
			return NULL;
		}
	} else {
		/* Locked inside an epoch section, the folio's header cannot
		 * go away before the lock is ours, and once it is, the folio
		 * cannot leave the index without it: REMOVED says whether it
		 * did before. No reference and no hint change is needed, so
		 * a hot random reader writes nothing but the folio's lock
		 * word. */
		bool old_pinned = false;
		struct folio *old = NULL;
		unsigned ep = epoch_read_enter();
		f = index_lookup(&m->index, mapping_key(m, pos));
		if (f && !(folio_holds(f, pos) && folio_lock_nowait(f)))
			f = NULL;
		if (f && folio_test_removed(f)) {
			folio_release(f);
			f = NULL;
		}
		epoch_read_exit(ep);
		/* The first use of a folio read ahead is its creator's use
		 * (mapping_find_or_create_locked()): no access, and it
		 * becomes the hint, as a folio the reader created would,
		 * so that the reader's next small steps through it are no
		 * accesses either (a sequential pass must not look hot).
		 * Once per folio: random hits still change no hint. */
		bool first = f && folio_test_ra_unread(f);
		if (f && (first || sequential))
			old = hint_set(m, f, false, &old_pinned);
		hint_release(old, old_pinned);
		if (!f)
			return NULL;
		if (m->cache && !first)
			folio_note_access(f);
	}
	if (m->cache)
		cache_count(m, true);
	return f;
}

struct folio *mapping_grab_nowait(struct folio_mapping *m, uint64_t pos,
				  size_t len_hint, bool *locked,
				  bool *created, int *err)
{
	*created = false;
	struct folio *f = mapping_lookup(m, pos);
	if (!f) {
		struct mapping_cache_credit none = {0, 0};
		bool found;
		f = create_charged(m, pos, len_hint, &none, err, &found, true);
		if (!f)
			return NULL;
		if (!found) {
			*created = *locked = true;
			return f;
		}
	}
	*locked = folio_trylock(f) == 1;
	if (*locked && folio_test_removed(f)) {
		/* Reclaimed since the lookup: its place is free again,
		 * but a readahead may simply leave it. */
		folio_unlock(f);
		*locked = false;
	}
	return f;
}

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

void mapping_lock_folio(struct folio_mapping *m, struct folio *f)
{
	/* Only readahead leaves a folio locked with nobody to complete its
	 * read, and it counts itself in ra_inflight before it locks any:
	 * a holder seen while that is 0 unlocks on its own. */
	while (!folio_lock_nowait(f)) {
		if (m->engine->ops.wait && atomic_load(&m->ra_inflight)) {
			struct lock_wait w = {f, false};
			(void)engine_wait_until(m->engine, lock_taken,
						lock_sleep, &w);
			return;
		}
		(void)folio_wait_unlocked_for(f, NULL);
	}
}

int mapping_cache_reserve(struct folio_mapping *m,
			  struct mapping_cache_credit *credit)
{
	struct mapping_cache *c = m->cache;
	int r = c->ops->reserve(c, m, credit->need);
	if (!r)
		credit->bytes += credit->need;
	credit->need = 0;
	return r;
}

struct folio *mapping_next_folio(struct folio_mapping *m, uint64_t *key,
				 uint64_t last, int tag)
{
	/* The key wrapped past the top of the key space: nothing after. */
	if (*key > last || *key == UINT64_MAX)
		return NULL;
	unsigned order;
	pthread_rwlock_rdlock(&m->index_lock);
	struct folio *f =
		tag == INDEX_NO_TAG
			? index_find(&m->index, key, last, &order)
			: index_find_tagged(&m->index, key, last,
					    (unsigned)tag, &order);
	folio_get(f);
	pthread_rwlock_unlock(&m->index_lock);
	if (f) {
		uint64_t next = *key + (UINT64_C(1) << order);
		*key = next > *key ? next : UINT64_MAX;
	}
	return f;
}

unsigned mapping_next_tagged_batch(struct folio_mapping *m, uint64_t *key,
				   uint64_t last, unsigned tag,
				   struct index_hit *hits, unsigned max)
{
	if (*key > last || *key == UINT64_MAX)
		return 0;
	pthread_rwlock_rdlock(&m->index_lock);
	unsigned n = index_find_tagged_batch(&m->index, key, last, (int)tag,
					     hits, max);
	for (unsigned i = 0; i < n; i++)
		folio_get(hits[i].entry);
	pthread_rwlock_unlock(&m->index_lock);
	/* The last entry ended at the top of the key space. */
	if (n && !*key)
		*key = UINT64_MAX;
	return n;
}

/* Caller holds index_lock. REMOVED changes under the exclusive side, so
 * a folio seen in the index here is the one at its key: a tag change
 * never reaches a newer folio that took a removed one's place (completions
 * and flushes hold only a reference, not io_lock). */
static bool still_indexed(const struct folio *f)
{
	return !folio_test_removed(f);
}

void mapping_tag_set(struct folio_mapping *m, struct folio *f, unsigned tag)
{
	pthread_rwlock_rdlock(&m->index_lock);
	if (still_indexed(f))
		index_tag_set(&m->index, mapping_key(m, f->pos),
			      mapping_folio_order(m, f), tag);
	pthread_rwlock_unlock(&m->index_lock);
}

void mapping_tag_clear_unless(struct folio_mapping *m, struct folio *f,
			      unsigned tag, bool (*still)(const struct folio *))
{
	pthread_rwlock_wrlock(&m->index_lock);
	/* A folio that left the index has no tags to clear. */
	if (still_indexed(f) && (!still || !still(f))) {
		uint64_t key = mapping_key(m, f->pos);
		unsigned order = mapping_folio_order(m, f);
		index_tag_clear(&m->index, key, order, tag);
		/*
		 * A lock-free setter (mapping_tag_set_at(): a completion
		 * marking the folio unstable) does not wait for this lock.
		 * One that brought the state back after the look above and
		 * set its bit before the clear lost that bit to it: look
		 * again and put the tag back. Its state change came before
		 * its bit's release RMW, which the clear's RMW read, and the
		 * fence makes that read an acquire, so this look sees it;
		 * a bit set after the clear stays set.
		 */
		atomic_thread_fence(memory_order_acquire);
		if (still && still(f))
			index_tag_set(&m->index, key, order, tag);
	}
	pthread_rwlock_unlock(&m->index_lock);
}

void mapping_tags_prune(struct folio_mapping *m, uint64_t first,
			uint64_t last, unsigned mask)
{
	pthread_rwlock_wrlock(&m->index_lock);
	index_tag_prune(&m->index, first, last, mask);
	pthread_rwlock_unlock(&m->index_lock);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mapping_tag_dirty(struct folio_mapping *m, struct folio *f)
{
	mapping_tag_set(m, f, INDEX_TAG_DIRTY);
	/* The age of the mapping's dirty data, for the cache's expiry:
	 * only the clean-to-dirty transition of the mapping sets it. */
	if (m->cache && !atomic_load_explicit(&m->dirty_since,
					      memory_order_relaxed)) {
		uint64_t zero = 0;
		atomic_compare_exchange_strong(&m->dirty_since, &zero,
					       now_ns());
	}
}

/* Caller holds the folio lock and index_lock exclusively. */
static void remove_locked(struct folio_mapping *m, struct folio *f)
{
	folio_mark_removed(f);
	index_remove(&m->index, mapping_key(m, f->pos),
		     mapping_folio_order(m, f));
}

/* After f left the index: its state no longer counts, its charge goes
 * back, the index's reference goes. */
static void removed_from_index(struct folio_mapping *m, struct folio *f)
{
	mapping_readahead_forget(m, f);
	struct mapping_cache *c = m->cache;
	if (c)
		c->ops->removed(c, m, f);
	f->mapping = NULL;
	folio_put(f);
}

void mapping_remove_folio(struct folio_mapping *m, struct folio *f)
{
	if (m->cache && (folio_test_dirty(f) || folio_test_unstable(f))) {
		size_t dirty, unstable;
		folio_drain(f, &dirty, &unstable);
		mapping_cache_account(m, -mapping_block_bytes(f, dirty), 0,
			      -mapping_block_bytes(f, unstable));
	}
	pthread_rwlock_wrlock(&m->index_lock);
	remove_locked(m, f);
	pthread_rwlock_unlock(&m->index_lock);
	removed_from_index(m, f);
}

/* Clean, stable and idle: nothing but memory to give back. */
static bool reclaimable(const struct folio *f)
{
	return !folio_test_dirty(f) &&
	       !folio_test_unstable(f) && !folio_test_writeback(f) &&
	       !folio_test_removed(f);
}

size_t mapping_reclaim_folio(struct folio_mapping *m, struct folio *f)
{
	if (folio_trylock(f) != 1)
		return 0;
	size_t freed = 0;
	/* Under the folio lock nothing can dirty it or start writeback,
	 * and completions only touch folios under writeback. */
	if (reclaimable(f)) {
		pthread_rwlock_wrlock(&m->index_lock);
		/* The index's and the caller's references are expected.
		 * References under the shared side cannot be taken now, and
		 * lock-free lookups' try-gets fail while the count is frozen,
		 * so none can appear between the check and the removal. */
		if (folio_ref_freeze(f, 2)) {
			remove_locked(m, f);
			folio_ref_unfreeze(f);
			freed = folio_size(f);
		}
		pthread_rwlock_unlock(&m->index_lock);
	}
	if (freed)
		removed_from_index(m, f);
	folio_unlock(f);
	return freed;
}

bool mapping_any_tagged(struct folio_mapping *m, unsigned tag)
{
	pthread_rwlock_rdlock(&m->index_lock);
	bool root = index_any_tagged(&m->index, tag);
	uint64_t key = 0;
	/* The root's bit may be stale: only an entry found says yes. */
	bool any = root && index_find_tagged(&m->index, &key, UINT64_MAX, tag,
					     NULL);
	pthread_rwlock_unlock(&m->index_lock);
	/* Nothing tagged below a set root bit: clear the stale bits once,
	 * so that the next calls answer from the root again. */
	if (root && !any)
		mapping_tags_prune(m, 0, UINT64_MAX, 1u << tag);
	return any;
}

size_t mapping_index_bytes(struct folio_mapping *m)
{
	pthread_rwlock_rdlock(&m->index_lock);
	size_t n = index_node_count(&m->index);
	pthread_rwlock_unlock(&m->index_lock);
	return n * INDEX_NODE_BYTES;
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
		folio_put(f);
	}
	return err;
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

int folio_mapping_stats(struct folio_mapping *m,
			struct folio_mapping_stats *st)
{
	if (!m || !st)
		return -EINVAL;
	int r = sized_check(st, st->sz, sizeof(size_t), sizeof(*st));
	if (r)
		return r;
	struct folio_mapping_stats s;
	memset(&s, 0, sizeof(s));
	s.sz = st->sz;
#define LOAD(field) s.field = atomic_load(&m->stats.field)
	for (unsigned i = 0; i < BRLOCK_STRIPES; i++) {
		s.bytes_written += atomic_load(&m->io_bytes[i].written);
		s.bytes_read += atomic_load(&m->io_bytes[i].read);
	}
	LOAD(read_requests);
	LOAD(read_bytes);
	LOAD(wb_requests);
	LOAD(wb_bytes);
	LOAD(wb_merges);
	LOAD(map_calls);
	LOAD(retries);
	LOAD(errors);
	LOAD(flushes);
	LOAD(readahead_bytes);
	LOAD(readahead_hits);
	LOAD(readahead_wasted);
#undef LOAD
	pthread_rwlock_rdlock(&m->index_lock);
	uint64_t key = 0;
	unsigned order;
	struct folio *f;
	while ((f = index_find(&m->index, &key, UINT64_MAX, &order))) {
		size_t up, dirty, unstable;
		folio_count_blocks(f, &up, &dirty, &unstable);
		s.cached_bytes += (uint64_t)up << f->block_shift;
		s.dirty_bytes += (uint64_t)dirty << f->block_shift;
		s.unstable_bytes += (uint64_t)unstable << f->block_shift;
		s.folios++;
		unsigned shift = f->size_shift - 9;
		if (shift < FOLIO_STATS_SHIFTS)
			s.folios_by_shift[shift]++;
		key += UINT64_C(1) << order;
		if (!key)
			break;
	}
	pthread_rwlock_unlock(&m->index_lock);
	memcpy(st, &s, MIN(st->sz, sizeof(s)));
	st->sz = s.sz;
	return 0;
}
