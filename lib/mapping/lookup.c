/* SPDX-License-Identifier: MIT */
/*
 * Finding the folio at a position: lock-free lookups, the per-thread
 * hint, and creating folios charged to the mapping's cache.
 */
#include "base/tls.h"
#include "mapping/cache.h"
#include "mapping/lookup.h"
#include "mapping/wait.h"

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
	folio_unref(got);
	pthread_rwlock_rdlock(&m->index_lock);
	f = index_lookup(&m->index, key);
	folio_ref(f);
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

/* The size create_folio_locked() tries first for a folio holding pos:
 * at most what it will allocate, so the cache is charged for it up front. */
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
 * cannot take it before its creator has used it. Needs index_lock
 * exclusive, and a check that no folio holds pos first, so the min size
 * always fits.
 */
static struct folio *create_folio_locked(struct folio_mapping *m,
					 uint64_t pos, size_t len_hint,
					 int *err)
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
		folio_unref(f);
		if (r != -EEXIST || size == min) {
			*err = r == -EEXIST ? -EIO : r;
			return NULL;
		}
	}
}

_Thread_local struct mapping_hint mapping_hint TLS_FAST;

/* Take the hint out; the caller lets its reference go (outside any
 * index lock: it may be the last one). */
static struct folio *hint_take(bool *pinned)
{
	struct folio *f = mapping_hint.folio;
	*pinned = mapping_hint.pinned;
	mapping_hint.folio = NULL;
	mapping_hint.id = 0;
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

static struct tls_exit hint_exit = TLS_EXIT_INIT(hint_destructor);

/* Make f the hint, pinning the reference the caller took for it when
 * `adopt`, else a new one (the caller holds index_lock or f's lock, so
 * no reclaim can be freezing f: see folio_ref_freeze()); returns the old
 * one for the caller to release. */
static struct folio *hint_set(struct folio_mapping *m, struct folio *f,
			      bool adopt, bool *old_pinned)
{
	struct folio *old = hint_take(old_pinned);
	/* Without the hook a thread that exits leaks its last folio's
	 * memory; everything still works. */
	if (!mapping_hint.registered)
		mapping_hint.registered =
			!tls_exit_arm(&hint_exit, &mapping_hint);
	mapping_hint.pinned = adopt ? folio_hint_adopt(f) : folio_hint_get(f);
	mapping_hint.folio = f;
	mapping_hint.pos = f->pos;
	mapping_hint.size = folio_bytes(f);
	mapping_hint.id = m->id;
	return old;
}

void mapping_drop_hint(struct folio_mapping *m)
{
	if (mapping_hint.folio && mapping_hint.id == m->id) {
		bool pinned;
		struct folio *f = hint_take(&pinned);
		hint_release(f, pinned);
	}
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
		f = create_folio_locked(m, pos, len_hint, err);
	}
	if (f && quiet)
		folio_ref(f);
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
				mapping_count_lookup(m, false);
		}
	}
	return f;
}

struct folio *mapping_grab(struct folio_mapping *m, uint64_t pos,
			   size_t len_hint,
			   struct mapping_cache_credit *credit, int *err)
{
	for (;;) {
		struct folio *f;
		size_t off;
		if (!mapping_hint_holding(m, pos, &f, &off) ||
		    folio_test_removed(f)) {
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
			mapping_count_lookup(m, true);
		mapping_lock_folio(m, f);
		if (!folio_test_removed(f))
			return f;
		/* Reclaimed between the lookup and the lock: the hint no
		 * longer matches, the next round looks again. */
		folio_unlock(f);
	}
}

struct folio *mapping_trylock_cached(struct folio_mapping *m, uint64_t pos,
				     bool sequential, unsigned stripe)
{
	/* Locked inside an epoch section, the folio's header cannot go
	 * away before the lock is ours, and once it is, the folio cannot
	 * leave the index without it: REMOVED says whether it did before.
	 * No reference and no hint change is needed, so a hot random reader
	 * writes nothing but the folio's lock word. */
	bool old_pinned = false;
	struct folio *old = NULL;
	unsigned ep = epoch_read_enter_at(stripe);
	struct folio *f = index_lookup_inline(&m->index, mapping_key(m, pos));
	if (f && !(folio_holds(f, pos) && folio_lock_nowait(f)))
		f = NULL;
	if (f && folio_test_removed(f)) {
		folio_unlock_held(f);
		f = NULL;
	}
	epoch_read_exit(ep);
	/* The first use of a folio read ahead is its creator's use
	 * (mapping_grab()): no access, and it becomes the
	 * hint, as a folio the reader created would, so that the reader's
	 * next small steps through it are no accesses either (a sequential
	 * pass must not look hot). Once per folio: random hits still change
	 * no hint. */
	bool first = f && folio_test_ra_unread(f);
	if (f && (first || sequential))
		old = hint_set(m, f, false, &old_pinned);
	hint_release(old, old_pinned);
	if (!f)
		return NULL;
	if (m->cache && !first)
		folio_note_access(f);
	if (m->cache)
		mapping_count_lookup_at(m, true, stripe);
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
