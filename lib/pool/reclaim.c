/* SPDX-License-Identifier: MIT */
/*
 * Charging and reclaim: S3-FIFO (Yang et al., "FIFO queues are all you
 * need for cache eviction", SOSP 2023) over folios of any size.
 *
 *  - A new folio enters the small queue, or the main queue when its key
 *    (mapping id, position) is in the ghost table: it was evicted from
 *    the small queue not long ago and is wanted again.
 *  - A hit only raises the folio's access count (0..3, a byte in the
 *    folio, see folio_note_access()): no list move, no lock.
 *  - Eviction takes from the small queue while it holds more than a
 *    tenth of the budget (or the main queue is empty), else from the
 *    main queue, always at the oldest end. A small-queue folio that was
 *    hit moves to the main queue (count reset); one that was not is
 *    evicted and its key goes to the ghost table. A main-queue folio that
 *    was hit goes round again with its count lowered by one; one at 0 is
 *    evicted. A one-pass scan therefore churns through the small queue
 *    and never reaches the main queue's hot folios.
 *  - Folios that cannot be reclaimed now (dirty, unstable, under
 *    writeback, locked, referenced, or of a mapping being freed) are
 *    moved to the young end of their queue, so a scan visits each one
 *    once and moves on.
 *
 * Sizes: the queues count bytes, so "a tenth of the budget" holds for
 * folios of mixed sizes; the ghost table remembers as many keys as the
 * queues hold folios (the paper's ghost queue is as long as the main
 * queue, which holds 90% of the objects).
 */
#include <stdlib.h>
#include <string.h>

#include "pool/pool.h"
#include "mapping/cache.h"
#include "mapping/remove.h"

/* ---- nodes and queues (caller holds p->lock) ------------------------ */

static void node_link_head(struct folio_pool *p, struct pool_queue *q,
			   uint32_t idx, size_t bytes)
{
	struct pool_node *head = &p->nodes[q->head], *n = &p->nodes[idx];
	n->next = head->next;
	n->prev = q->head;
	p->nodes[head->next].prev = idx;
	head->next = idx;
	q->bytes += bytes;
	q->count++;
}

static void node_unlink(struct folio_pool *p, struct pool_queue *q,
			uint32_t idx, size_t bytes)
{
	struct pool_node *n = &p->nodes[idx];
	p->nodes[n->prev].next = n->next;
	p->nodes[n->next].prev = n->prev;
	n->prev = n->next = NODE_NONE;
	q->bytes -= bytes;
	q->count--;
}

static void ghost_grow(struct folio_pool *p);

static uint32_t node_alloc(struct folio_pool *p)
{
	if (p->free_node != NODE_NONE) {
		uint32_t idx = p->free_node;
		p->free_node = p->nodes[idx].next;
		return idx;
	}
	if (p->nodes_used == p->nodes_cap) {
		if (p->nodes_cap >= UINT32_MAX / 2)
			return NODE_NONE;
		uint32_t cap = p->nodes_cap * 2;
		struct pool_node *n = realloc(p->nodes, cap * sizeof(*n));
		if (!n)
			return NODE_NONE;
		p->nodes = n;
		p->nodes_cap = cap;
		/* Once there are ghosts; see ghost_put(). */
		if (p->ghost.seq)
			ghost_grow(p);
	}
	return p->nodes_used++;
}

static void node_free(struct folio_pool *p, uint32_t idx)
{
	p->nodes[idx].folio = NULL;
	p->nodes[idx].prev = NODE_NONE;
	p->nodes[idx].next = p->free_node;
	p->free_node = idx;
}

static struct pool_queue *queue_of(struct folio_pool *p,
				   const struct folio *f)
{
	return folio_cache_flag(f) ? &p->main : &p->small;
}

/* ---- the ghost table (caller holds p->lock) ------------------------- */

static uint64_t ghost_hash(uint64_t id, uint64_t pos)
{
	/* splitmix64's finalizer over both halves of the key. */
	uint64_t h = id * UINT64_C(0x9E3779B97F4A7C15) ^ pos;
	h ^= h >> 30;
	h *= UINT64_C(0xBF58476D1CE4E5B9);
	h ^= h >> 27;
	h *= UINT64_C(0x94D049BB133111EB);
	h ^= h >> 31;
	return h ? h : 1;
}

static uint64_t ghost_capacity(const struct folio_pool *p)
{
	return MAX(p->small.count + p->main.count, (uint64_t)64);
}

static struct pool_ghost_slot *ghost_bucket(struct folio_pool *p, uint64_t h)
{
	return &p->ghost.slots[h & p->ghost.mask & ~(size_t)(GHOST_WAYS - 1)];
}

/* Is the key recently evicted? It is forgotten either way: a key sends
 * its folio to the main queue once. */
static bool ghost_take(struct folio_pool *p, uint64_t h)
{
	struct pool_ghost_slot *b = ghost_bucket(p, h);
	for (unsigned i = 0; i < GHOST_WAYS; i++) {
		if (b[i].hash != h)
			continue;
		b[i].hash = 0;
		return p->ghost.seq - b[i].seq < ghost_capacity(p);
	}
	return false;
}

static void ghost_put(struct folio_pool *p, uint64_t h)
{
	/* The first key sizes the table for the queues as they are: until
	 * the first eviction it holds nothing, and growing it with every
	 * doubling of the node array made each larger copy resident for no
	 * key (calloc() clears reused heap memory): 60 KiB for a pool of
	 * 512 folios. */
	if (!p->ghost.seq)
		ghost_grow(p);
	struct pool_ghost_slot *b = ghost_bucket(p, h), *victim = &b[0];
	uint64_t seq = ++p->ghost.seq;
	for (unsigned i = 0; i < GHOST_WAYS; i++) {
		if (b[i].hash == h || !b[i].hash) {
			victim = &b[i];
			break;
		}
		if (b[i].seq < victim->seq)
			victim = &b[i];
	}
	victim->hash = h;
	victim->seq = seq;
}

/*
 * The table's size. The keys it must remember are as many as the queues
 * hold folios, so it grows with the node array (two slots a node: at most
 * half full), up to two slots per 4 KiB of budget. Sized by the budget
 * alone, a pool of 64 KiB folios had 32 slots per folio, and every page
 * of the table becomes resident as evictions scatter keys over it: 512
 * bytes of RSS per cached 64 KiB folio, 16 KiB per 2 MiB folio.
 */
static size_t ghost_slots_for(uint64_t budget, uint32_t nodes)
{
	/* Twice as many slots as 4 KiB folios fit in the budget: at most
	 * half full when the folios are small, so few live keys are pushed
	 * out by collisions. */
	uint64_t want = MAX(budget / 2048, (uint64_t)256);
	want = MIN(want, MAX((uint64_t)nodes * 2, (uint64_t)256));
	want = MIN(want, (uint64_t)1 << 20);
	return (size_t)1 << (ilog2_u64(want - 1) + 1);
}

/* Keep a key in the grown table: an empty way, else over an older key. */
static void ghost_rehash(struct folio_pool *p, const struct pool_ghost_slot *s)
{
	struct pool_ghost_slot *b = ghost_bucket(p, s->hash), *victim = &b[0];
	for (unsigned i = 0; i < GHOST_WAYS; i++) {
		if (!b[i].hash) {
			victim = &b[i];
			break;
		}
		if (b[i].seq < victim->seq)
			victim = &b[i];
	}
	if (!victim->hash || victim->seq < s->seq)
		*victim = *s;
}

/* After the node array grew. Without memory the table keeps its size:
 * ghosts are a hint, fewer of them only make reclaim less clever. */
static void ghost_grow(struct folio_pool *p)
{
	size_t slots = ghost_slots_for(p->budget, p->nodes_cap);
	size_t old_n = p->ghost.mask + 1;
	if (slots <= old_n)
		return;
	struct pool_ghost_slot *old = p->ghost.slots;
	struct pool_ghost_slot *n = calloc(slots, sizeof(*n));
	if (!n)
		return;
	p->ghost.slots = n;
	p->ghost.mask = slots - 1;
	for (size_t i = 0; i < old_n; i++)
		if (old[i].hash)
			ghost_rehash(p, &old[i]);
	free(old);
}

/* ---- set-up ---------------------------------------------------------- */

int pool_queues_init(struct folio_pool *p)
{
	p->nodes_cap = 64;
	p->nodes = calloc(p->nodes_cap, sizeof(*p->nodes));
	size_t slots = ghost_slots_for(p->budget, p->nodes_cap);
	p->ghost.slots = calloc(slots, sizeof(*p->ghost.slots));
	if (!p->nodes || !p->ghost.slots) {
		free(p->nodes);
		free(p->ghost.slots);
		return -ENOMEM;
	}
	p->ghost.mask = slots - 1;
	p->ghost.seq = 0;
	p->nodes_used = NODE_FIRST_FREE;
	p->free_node = NODE_NONE;
	p->small.head = NODE_SMALL;
	p->main.head = NODE_MAIN;
	for (uint32_t h = NODE_SMALL; h <= NODE_MAIN; h++)
		p->nodes[h].prev = p->nodes[h].next = h;
	return 0;
}

void pool_queues_destroy(struct folio_pool *p)
{
	free(p->nodes);
	free(p->ghost.slots);
}

size_t pool_queue_meta_bytes_locked(struct folio_pool *p)
{
	return p->nodes_cap * sizeof(struct pool_node) +
	       (p->ghost.mask + 1) * sizeof(struct pool_ghost_slot);
}

/* ---- the mapping layer's hooks ------------------------------------- */

void pool_op_added(struct mapping_cache *c, struct folio_mapping *m,
		   struct folio *f)
{
	struct folio_pool *p = pool_of(c);
	atomic_fetch_add(&p->folio_meta, folio_metadata_bytes(f));
	uint64_t h = ghost_hash(m->id, f->pos);
	pthread_mutex_lock(&p->lock);
	uint32_t idx = node_alloc(p);
	/* Without a node the folio is charged but never reclaimed: it
	 * still leaves with its mapping's truncate or free. */
	if (idx != NODE_NONE) {
		bool wanted = ghost_take(p, h);
		if (wanted)
			atomic_fetch_add_explicit(&p->stats.ghost_hits, 1,
						  memory_order_relaxed);
		folio_set_cache_flag(f, wanted);
		p->nodes[idx].folio = f;
		f->cache_node = idx;
		node_link_head(p, wanted ? &p->main : &p->small, idx,
			       folio_size(f));
	}
	pthread_mutex_unlock(&p->lock);
}

void pool_op_removed(struct mapping_cache *c, struct folio_mapping *m,
		     struct folio *f)
{
	(void)m;
	struct folio_pool *p = pool_of(c);
	pthread_mutex_lock(&p->lock);
	uint32_t idx = f->cache_node;
	if (idx != NODE_NONE) {
		f->cache_node = NODE_NONE;
		struct pool_node *n = &p->nodes[idx];
		if (n->prev == NODE_CLAIMED) {
			n->folio = NULL; /* the reclaimer holding it frees it */
		} else {
			node_unlink(p, queue_of(p, f), idx, folio_size(f));
			node_free(p, idx);
		}
	}
	pthread_mutex_unlock(&p->lock);
	atomic_fetch_sub(&p->folio_meta, folio_metadata_bytes(f));
	pool_op_uncharge(c, folio_size(f));
}

/* ---- reclaim --------------------------------------------------------- */

unsigned pool_full_scan(struct folio_pool *p)
{
	pthread_mutex_lock(&p->lock);
	/* A main-queue folio may go round FOLIO_ACCESS_MAX times before its
	 * count reaches 0. */
	uint64_t n = p->small.count +
		     (FOLIO_ACCESS_MAX + 1) * p->main.count + 16;
	pthread_mutex_unlock(&p->lock);
	return (unsigned)MIN(n, (uint64_t)UINT32_MAX);
}

static void move_to_head(struct folio_pool *p, struct pool_queue *q,
			 uint32_t idx, size_t bytes)
{
	node_unlink(p, q, idx, bytes);
	node_link_head(p, q, idx, bytes);
}

/*
 * The next folio to try, by S3-FIFO's rules, taken off its queue
 * (claimed) with a folio reference and a member user; NODE_NONE when
 * `*left` examinations found none. Each queue is looked at no more
 * often than it takes to go round it (FOLIO_ACCESS_MAX + 1 times for the
 * main queue), so a queue whose folios are all busy hands over to the
 * other one instead of being scanned again.
 */
static uint32_t pick_locked(struct folio_pool *p, unsigned *left,
			    bool *from_small)
{
	uint64_t small_left = p->small.count;
	uint64_t main_left = (FOLIO_ACCESS_MAX + 1) * p->main.count;
	while (*left) {
		bool small = p->small.bytes > p->small_target || !p->main.count;
		if (small ? !small_left : !main_left)
			small = !small;
		if (small ? !small_left : !main_left)
			return NODE_NONE;
		(*left)--;
		struct pool_queue *q = small ? &p->small : &p->main;
		if (small)
			small_left--;
		else
			main_left--;
		uint32_t idx = p->nodes[q->head].prev; /* the oldest */
		struct folio *f = p->nodes[idx].folio;
		size_t bytes = folio_size(f);
		struct pool_member *mb = member_of(f->mapping);
		if (mb->quiesced) {
			move_to_head(p, q, idx, bytes);
			continue;
		}
		if (small && folio_access_reset(f)) {
			/* Hit while on probation: it joins the main queue. */
			node_unlink(p, q, idx, bytes);
			folio_set_cache_flag(f, true);
			node_link_head(p, &p->main, idx, bytes);
			main_left += FOLIO_ACCESS_MAX + 1;
			continue;
		}
		if (!small && folio_access_lower(f)) {
			move_to_head(p, q, idx, bytes);
			continue;
		}
		/* The index holds one reference; anything more is a user. */
		if (folio_test_busy(f) || folio_unpinned_refs(f) > 1) {
			move_to_head(p, q, idx, bytes);
			continue;
		}
		node_unlink(p, q, idx, bytes);
		p->nodes[idx].prev = p->nodes[idx].next = NODE_CLAIMED;
		folio_ref(f);
		pool_member_get_locked(p, mb);
		*from_small = small;
		return idx;
	}
	return NODE_NONE;
}

uint64_t pool_reclaim(struct folio_pool *p, uint64_t want, unsigned scan)
{
	uint64_t freed = 0;
	unsigned left = scan;
	while (freed < want && left) {
		bool from_small = false;
		pthread_mutex_lock(&p->lock);
		uint32_t idx = pick_locked(p, &left, &from_small);
		if (idx == NODE_NONE) {
			pthread_mutex_unlock(&p->lock);
			break;
		}
		struct folio *f = p->nodes[idx].folio;
		struct pool_member *mb = member_of(f->mapping);
		uint64_t key = ghost_hash(mb->m->id, f->pos);
		pthread_mutex_unlock(&p->lock);
		/* Read ahead and never used: nobody wanted it, so its key
		 * is no ghost (read again later it is not a re-reference). */
		bool unread = folio_test_ra_unread(f);

		/* The state seen under the pool lock may be stale: the
		 * mapping decides under the folio and index locks. */
		size_t got = mapping_reclaim_folio(mb->m, f);

		pthread_mutex_lock(&p->lock);
		struct pool_node *n = &p->nodes[idx];
		if (!n->folio) {
			node_free(p, idx); /* it left its mapping */
		} else {
			/* Kept: young again, so the next scan moves on. */
			n->prev = n->next = NODE_NONE;
			node_link_head(p, queue_of(p, f), idx, folio_size(f));
		}
		if (got && from_small && !unread)
			ghost_put(p, key);
		pool_member_put_locked(p, mb);
		pthread_mutex_unlock(&p->lock);
		if (got) {
			atomic_fetch_add(&p->stats.reclaimed_bytes, got);
			atomic_fetch_add(&p->stats.reclaimed_folios, 1);
			freed += got;
		}
		folio_unref(f); /* the last reference of a reclaimed folio */
	}
	return freed;
}

/* Take `bytes` of the budget if they are free. */
static bool take_room(struct folio_pool *p, uint64_t bytes)
{
	uint64_t cur = atomic_load(&p->charged);
	do {
		if (cur + bytes > p->budget)
			return false;
	} while (!atomic_compare_exchange_weak(&p->charged, &cur,
					       cur + bytes));
	return true;
}

/* Rounds of reclaim one charge tries while other threads take the room
 * it freed. */
#define CHARGE_ROUNDS 4

int pool_charge_scan(struct folio_pool *p, uint64_t bytes, unsigned scan)
{
	for (unsigned i = 0; i < CHARGE_ROUNDS; i++) {
		if (take_room(p, bytes))
			return 0;
		uint64_t cur = atomic_load(&p->charged);
		uint64_t want = cur + bytes > p->budget
					? cur + bytes - p->budget
					: 1;
		if (!pool_reclaim(p, want, scan))
			break;
	}
	return take_room(p, bytes) ? 0 : MAPPING_CACHE_FULL;
}

/* Folios a charge from a writer looks at before it gives up and lets the
 * writer wait (for writeback, a flush, room): bounded, so a pool full of
 * dirty data costs each allocation a short scan, not a walk of it all;
 * the rotation makes the next scan start where this one stopped. */
#define CHARGE_SCAN 256u

int pool_op_charge(struct mapping_cache *c, struct folio_mapping *m,
		   size_t bytes)
{
	(void)m;
	return pool_charge_scan(pool_of(c), bytes, CHARGE_SCAN);
}

void pool_op_uncharge(struct mapping_cache *c, size_t bytes)
{
	struct folio_pool *p = pool_of(c);
	atomic_fetch_sub(&p->charged, bytes);
	atomic_fetch_add(&p->events, 1);
	if (atomic_load(&c->waiters))
		pool_op_progress(c);
}
