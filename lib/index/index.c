/* SPDX-License-Identifier: MIT */
/*
 * Radix tree index; see index.h for the layout, tags and locking.
 *
 * Slot encoding (low two bits of the word):
 *   0            empty
 *   ptr | 00     an entry (insert refuses entries not 4-byte aligned)
 *   ptr | 01     a child node
 *   ptr | 10     a multi-slot entry's other slots (the entry itself, so
 *                a lookup landing there needs no second load)
 * An entry's order follows from the level and, for a multi-slot entry,
 * the run of bits after its first slot in the node's `sibs` word, which
 * also gives any other slot's first slot.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"

#define SLOT_NODE INDEX_SLOT_NODE
#define SLOT_SIB INDEX_SLOT_SIB
#define SLOT_KIND INDEX_SLOT_KIND
#define SLOT_MASK INDEX_SLOT_MASK
#define ALL_BITS (~UINT64_C(0))

static inline bool slot_is_node(uintptr_t v)
{
	return (v & SLOT_KIND) == SLOT_NODE;
}

static inline bool slot_is_sib(uintptr_t v)
{
	return (v & SLOT_KIND) == SLOT_SIB;
}

static inline struct index_node *slot_node(uintptr_t v)
{
	return (struct index_node *)(v - SLOT_NODE);
}

static inline uintptr_t make_node(struct index_node *n)
{
	return (uintptr_t)n | SLOT_NODE;
}

/* What an entry's slots other than its first hold. */
static inline uintptr_t make_sib(uintptr_t entry)
{
	return entry | SLOT_SIB;
}

/* n consecutive bits from bit i; entries fill at most 32 slots. */
static inline uint64_t bits(unsigned i, unsigned n)
{
	return ((UINT64_C(1) << n) - 1) << i;
}

/* The first slot of the entry whose other slot j is (n->sibs bit j):
 * the nearest slot at or below j that is not another slot. */
static inline unsigned sib_head(const struct index_node *n, unsigned j)
{
	uint64_t below = j == INDEX_NODE_SLOTS - 1 ? ALL_BITS
						   : bits(0, j + 1);
	return 63u - (unsigned)__builtin_clzll(~n->sibs & below);
}

static inline unsigned level_of(unsigned order)
{
	return order / INDEX_NODE_SHIFT * INDEX_NODE_SHIFT;
}

static inline unsigned slot_of(uint64_t key, unsigned shift)
{
	return (unsigned)(key >> shift) & SLOT_MASK;
}

/* log2 of the number of slots the entry whose first slot is i fills:
 * its other slots are the run of sibling bits right after i (a power of
 * two less one, at most 31). */
static inline unsigned entry_log_slots(const struct index_node *n, unsigned i)
{
	if (i + 1 >= INDEX_NODE_SLOTS)
		return 0;
	/* Never zero: the shift brings in a clear top bit. */
	unsigned run = (unsigned)__builtin_ctzll(~(n->sibs >> (i + 1)));
	return (unsigned)__builtin_ctz(run + 1);
}

static bool valid_range(uint64_t first, unsigned order)
{
	if (order > INDEX_MAX_ORDER)
		return false;
	uint64_t span = UINT64_C(1) << order;
	return (first & (span - 1)) == 0 && first <= UINT64_MAX - span;
}

static inline uint64_t tag_load(const struct index_node *n, unsigned tag)
{
	return atomic_load_explicit(&n->tags[tag], memory_order_acquire);
}

#define UP_ALL ((1u << INDEX_TAG_COUNT) - 1u)

/*
 * Clear bits of a tag word under the exclusive lock. Lock-free tag calls
 * may change other bits of the word meanwhile, so it is an RMW; the load
 * first skips it when no bit is set (most words on a remove).
 */
static inline void tag_clear_bits(struct index_node *n, unsigned tag,
				  uint64_t mask)
{
	if (atomic_load_explicit(&n->tags[tag], memory_order_relaxed) & mask)
		atomic_fetch_and_explicit(&n->tags[tag], ~mask,
					  memory_order_relaxed);
}

/*
 * Under the exclusive lock: may the parent's tag bit for `child` go?
 * Clears the child's `up` bit first and reads its word after, so a
 * lock-free setter, which sets its bit first and reads `up` after, is
 * either seen here (the parent's bit stays) or sees `up` clear and
 * completes its set under the read lock once this writer is done.
 */
static bool child_untagged(struct index_node *child, unsigned tag)
{
	unsigned tb = 1u << tag;
	atomic_fetch_and(&child->up, ~tb);
	if (!atomic_load(&child->tags[tag]))
		return true;
	atomic_fetch_or(&child->up, tb);
	return false;
}

/* Store a slot a lock-free lookup may read: whatever the new value
 * points to was built before it, and the release makes that visible to
 * the lookup's acquire load. */
static inline void slot_publish(struct index_node *n, unsigned i, uintptr_t v)
{
	__atomic_store_n(&n->slots[i], v, __ATOMIC_RELEASE);
}


/* The root and its level change together for a lock-free lookup. */
static void set_root(struct index_tree *idx, struct index_node *root,
		     unsigned shift)
{
	idx->root = root;
	idx->shift = shift;
	__atomic_store_n(&idx->top,
			 (uintptr_t)root | (uintptr_t)shift,
			 __ATOMIC_RELEASE);
}

static struct index_node *node_alloc(const struct index_tree *idx)
{
	void *p = NULL;
	if (idx->alloc)
		p = idx->alloc->alloc(idx->alloc->arg);
	else if (posix_memalign(&p, INDEX_NODE_ALIGN, sizeof(struct index_node)))
		p = NULL;
	struct index_node *n = p;
	if (!n)
		return NULL;
	/* The root's shift shares its word (set_root()): an allocator that
	 * breaks its contract is refused rather than trusted. */
	if (idx->alloc && ((uintptr_t)n & INDEX_TOP_SHIFT_MASK)) {
		idx->alloc->free(n, idx->alloc->arg);
		return NULL;
	}
	n->present = 0;
	for (unsigned t = 0; t < INDEX_TAG_COUNT; t++)
		atomic_init(&n->tags[t], 0);
	atomic_init(&n->up, 0);
	n->sibs = 0;
	memset(n->slots, 0, sizeof(n->slots));
	return n;
}

static void node_free_now(struct epoch_entry *e)
{
	free(container_of(e, struct index_node, retire));
}

/* A node being freed may have been unlinked just now: in a lockless
 * index a lookup may still be inside it. */
static void node_free(const struct index_tree *idx, struct index_node *n)
{
	if (idx->lockless)
		epoch_retire(&n->retire, node_free_now);
	else if (idx->alloc)
		idx->alloc->free(n, idx->alloc->arg);
	else
		free(n);
}

void index_init_alloc(struct index_tree *idx,
		      const struct index_allocator *alloc)
{
	set_root(idx, NULL, 0);
	idx->count = 0;
	idx->nodes = 0;
	idx->alloc = alloc;
	idx->lockless = false;
}

int index_set_lockless(struct index_tree *idx)
{
	if (idx->alloc)
		return -EINVAL;
	idx->lockless = true;
	return 0;
}

void index_init(struct index_tree *idx)
{
	index_init_alloc(idx, NULL);
}

static void free_subtree(const struct index_tree *idx, struct index_node *n)
{
	uint64_t m = n->present;
	while (m) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		m &= m - 1;
		if (slot_is_node(n->slots[i]))
			free_subtree(idx, slot_node(n->slots[i]));
	}
	node_free(idx, n);
}

void index_destroy(struct index_tree *idx)
{
	bool lockless = idx->lockless;
	if (idx->root)
		free_subtree(idx, idx->root);
	index_init_alloc(idx, idx->alloc);
	idx->lockless = lockless;
}

/*
 * The path from the root to the node at level `level` on the way to
 * `key`, recorded so writers can walk back up without parent pointers
 * (which would cost 8 bytes a node and a store per relink).
 */
struct path {
	struct index_node *node[INDEX_MAX_LEVELS];
	unsigned slot[INDEX_MAX_LEVELS];
	unsigned depth; /* node[depth - 1] is the last node reached */
};

/*
 * Find the node and first slot of the entry stored at exactly
 * [first, first + 2^order). Returns the slot, or -1.
 */
static int locate_exact(const struct index_tree *idx, uint64_t first,
			unsigned order, struct path *p)
{
	unsigned level = level_of(order);
	unsigned shift = idx->shift;
	struct index_node *n = idx->root;

	p->depth = 0;
	if (!n || shift < level || index_beyond_node(first, shift))
		return -1;
	for (;;) {
		unsigned i = slot_of(first, shift);
		uintptr_t v = n->slots[i];
		p->node[p->depth] = n;
		p->slot[p->depth] = i;
		p->depth++;
		if (shift == level) {
			if (!v || (v & SLOT_KIND) != 0)
				return -1;
			if (shift + entry_log_slots(n, i) != order)
				return -1;
			return (int)i;
		}
		if (!slot_is_node(v))
			return -1;
		n = slot_node(v);
		shift -= INDEX_NODE_SHIFT;
	}
}

/*
 * After a writer cleared bits or emptied a node at the end of path p,
 * make the ancestors agree again: free empty nodes bottom-up and clear
 * parent tag bits whose child word became zero.
 */
static void fixup_up(struct index_tree *idx, const struct path *p)
{
	for (unsigned d = p->depth; d-- > 1;) {
		struct index_node *child = p->node[d];
		struct index_node *parent = p->node[d - 1];
		uint64_t bit = UINT64_C(1) << p->slot[d - 1];
		bool changed = false;

		if (!child->present) {
			slot_publish(parent, p->slot[d - 1], 0);
			node_free(idx, child);
			idx->nodes--;
			parent->present &= ~bit;
			for (unsigned t = 0; t < INDEX_TAG_COUNT; t++)
				tag_clear_bits(parent, t, bit);
			continue;
		}
		for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
			uint64_t pw = atomic_load_explicit(&parent->tags[t],
							   memory_order_relaxed);
			if ((pw & bit) && child_untagged(child, t)) {
				tag_clear_bits(parent, t, bit);
				changed = true;
			}
		}
		/* Nothing above can change if this level did not. */
		if (!changed)
			break;
	}
	if (idx->root && !idx->root->present) {
		struct index_node *old = idx->root;
		set_root(idx, NULL, 0);
		node_free(idx, old);
		idx->nodes--;
	}
	/* Keys are absolute, so only a root whose sole child sits at slot 0
	 * can be dropped; lowering it keeps lookups as short as the largest
	 * key allows after a big entry or a high key goes away. */
	while (idx->root && idx->root->present == 1 &&
	       slot_is_node(idx->root->slots[0])) {
		struct index_node *old = idx->root;
		struct index_node *low = slot_node(old->slots[0]);
		/* Nothing above a root can lack a bit. */
		atomic_fetch_or(&low->up, UP_ALL);
		set_root(idx, low, idx->shift - INDEX_NODE_SHIFT);
		node_free(idx, old);
		idx->nodes--;
	}
}

/*
 * Count the nodes an insert needs and detect conflicts without changing
 * anything. `top` is the root level after growth; levels above the
 * current root exist only virtually, each with the old root chained
 * at slot 0.
 */
static int plan_insert(const struct index_tree *idx, uint64_t first,
		       unsigned level, unsigned nslots, unsigned top,
		       unsigned *missing)
{
	if (!idx->root) {
		*missing = (top - level) / INDEX_NODE_SHIFT + 1;
		return 0;
	}
	/* Growth adds every level above the old root, whatever the path. */
	unsigned grow = (top - idx->shift) / INDEX_NODE_SHIFT;
	unsigned shift = top;
	for (; shift > idx->shift; shift -= INDEX_NODE_SHIFT) {
		unsigned i = slot_of(first, shift);
		if (shift == level) {
			/* Slot 0 holds the old root; i is nslots-aligned. */
			if (i == 0)
				return -EEXIST;
			*missing = grow;
			return 0;
		}
		if (i != 0) {
			*missing = grow + (shift - level) / INDEX_NODE_SHIFT;
			return 0;
		}
	}
	const struct index_node *n = idx->root;
	for (;;) {
		unsigned i = slot_of(first, shift);
		if (shift == level) {
			if (n->present & bits(i, nslots))
				return -EEXIST;
			*missing = grow;
			return 0;
		}
		uintptr_t v = n->slots[i];
		if (!v) {
			*missing = grow + (shift - level) / INDEX_NODE_SHIFT;
			return 0;
		}
		if (!slot_is_node(v))
			return -EEXIST; /* a larger entry covers the range */
		n = slot_node(v);
		shift -= INDEX_NODE_SHIFT;
	}
}

int index_insert(struct index_tree *idx, uint64_t first, unsigned order,
		 void *entry)
{
	if (!entry || ((uintptr_t)entry & SLOT_KIND) || !valid_range(first, order))
		return -EINVAL;

	unsigned level = level_of(order);
	unsigned log_n = order - level;
	unsigned nslots = 1u << log_n;
	uint64_t last = first + ((UINT64_C(1) << order) - 1);

	unsigned top = level;
	while (index_beyond_node(last, top))
		top += INDEX_NODE_SHIFT;
	if (idx->root && top < idx->shift)
		top = idx->shift;

	unsigned missing;
	int err = plan_insert(idx, first, level, nslots, top, &missing);
	if (err)
		return err;

	/* At most 2 per level: growth adds the levels above the old root and
	 * a path that leaves the old root's chain high up needs a node at
	 * every level below, those of the old root included. */
	struct index_node *fresh[2 * INDEX_MAX_LEVELS];
	if (missing > sizeof(fresh) / sizeof(fresh[0]))
		return -EINVAL; /* cannot happen; keeps the stack safe */
	for (unsigned k = 0; k < missing; k++) {
		fresh[k] = node_alloc(idx);
		if (!fresh[k]) {
			while (k--)
				node_free(idx, fresh[k]);
			return -ENOMEM;
		}
	}
	idx->nodes += missing;
	unsigned used = 0;

	if (!idx->root) {
		atomic_store(&fresh[used]->up, UP_ALL);
		set_root(idx, fresh[used], top);
		used++;
	}
	while (idx->shift < top) {
		struct index_node *up = fresh[used++];
		struct index_node *old = idx->root;
		up->slots[0] = make_node(old);
		up->present = 1;
		atomic_store(&up->up, UP_ALL);
		/* The old root had nothing above it: its tags reach the new
		 * root's slot 0 (child_untagged() orders this against
		 * lock-free setters of the old root's entries). */
		for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
			if (!child_untagged(old, t))
				atomic_store_explicit(&up->tags[t], 1,
						      memory_order_relaxed);
		}
		set_root(idx, up, idx->shift + INDEX_NODE_SHIFT);
	}

	struct index_node *n = idx->root;
	unsigned shift = idx->shift;
	while (shift > level) {
		unsigned i = slot_of(first, shift);
		if (!n->slots[i]) {
			slot_publish(n, i, make_node(fresh[used++]));
			n->present |= UINT64_C(1) << i;
		}
		n = slot_node(n->slots[i]);
		shift -= INDEX_NODE_SHIFT;
	}
	unsigned i = slot_of(first, shift);
	/* The head before the back-references: a lookup that reads one
	 * goes on to the head. */
	slot_publish(n, i, (uintptr_t)entry);
	for (unsigned k = 1; k < nslots; k++)
		slot_publish(n, i + k, make_sib((uintptr_t)entry));
	n->present |= bits(i, nslots);
	/* Not bits(i + 1, nslots - 1): a one-slot entry in slot 63 would
	 * shift by 64. */
	n->sibs |= bits(i, nslots) & ~(UINT64_C(1) << i);
	idx->count++;
	return 0;
}

void *index_lookup_slot(const struct index_tree *idx, uint64_t key,
			const uintptr_t **slot)
{
	return index_walk(idx, key, slot);
}

void *index_lookup(const struct index_tree *idx, uint64_t key)
{
	const uintptr_t *slot;
	return index_lookup_slot(idx, key, &slot);
}

void *index_remove(struct index_tree *idx, uint64_t first, unsigned order)
{
	struct path p;

	if (!valid_range(first, order))
		return NULL;
	int i = locate_exact(idx, first, order, &p);
	if (i < 0)
		return NULL;
	struct index_node *n = p.node[p.depth - 1];
	void *entry = (void *)n->slots[i];
	unsigned nslots = 1u << (order - level_of(order));
	uint64_t mask = bits((unsigned)i, nslots);

	/* The other slots before the first: a lookup that reads one
	 * still finds the entry whole (index_walk()). */
	for (unsigned k = nslots; k-- > 0;)
		slot_publish(n, (unsigned)i + k, 0);
	n->present &= ~mask;
	n->sibs &= ~mask;
	for (unsigned t = 0; t < INDEX_TAG_COUNT; t++)
		tag_clear_bits(n, t, mask);
	idx->count--;
	fixup_up(idx, &p);
	return entry;
}

/*
 * Shared walk of index_find and index_find_tagged. Candidates in a node
 * come from its presence word, or from its tag word when filtering, so an
 * untagged subtree costs one bit test. The walk keeps its own stack of
 * (node, slot) to resume in the parent once a subtree is exhausted; slots
 * rather than keys are carried so nothing overflows at the top of the key
 * space.
 */
static void *find_common(const struct index_tree *idx, uint64_t *keyp,
			 uint64_t last, int tag, unsigned *order,
			 const struct index_node **nodep)
{
	struct {
		const struct index_node *node;
		uint64_t base;
		unsigned slot;
	} stack[INDEX_MAX_LEVELS];
	unsigned depth = 0;
	uint64_t key = *keyp;
	const struct index_node *n = idx->root;
	unsigned shift = idx->shift;
	uint64_t base = 0; /* first key of node n */
	bool on_path = true; /* still descending towards `key` */
	unsigned i;

	if (!n || key > last || index_beyond_node(key, shift))
		return NULL;
	i = slot_of(key, shift);
	for (;;) {
		uint64_t cand = tag < 0 ? n->present
					: tag_load(n, (unsigned)tag);
		cand &= ALL_BITS << i;
		if (cand) {
			unsigned j = (unsigned)__builtin_ctzll(cand);
			uint64_t slot_first = base + ((uint64_t)j << shift);
			uintptr_t v = n->slots[j];
			if (j != i)
				on_path = false;
			/* Slots and subtrees come in key order: once one
			 * starts past `last`, so does everything after. */
			if (slot_first > last)
				return NULL;
			if (slot_is_node(v)) {
				stack[depth].node = n;
				stack[depth].base = base;
				stack[depth].slot = j;
				depth++;
				n = slot_node(v);
				base = slot_first;
				shift -= INDEX_NODE_SHIFT;
				i = on_path ? slot_of(key, shift) : 0;
				continue;
			}
			unsigned head = j;
			if (slot_is_sib(v)) {
				/* Only reachable when `key` falls inside a
				 * multi-slot entry: report the whole entry. */
				head = sib_head(n, j);
				v -= SLOT_SIB;
			}
			*keyp = base + ((uint64_t)head << shift);
			if (order)
				*order = shift + entry_log_slots(n, head);
			if (nodep)
				*nodep = n;
			return (void *)v;
		}
		/* Exhausted this node: resume after it in its parent. */
		on_path = false;
		do {
			if (!depth)
				return NULL;
			depth--;
			n = stack[depth].node;
			base = stack[depth].base;
			i = stack[depth].slot + 1;
			shift += INDEX_NODE_SHIFT;
		} while (i == INDEX_NODE_SLOTS);
	}
}

void *index_find(const struct index_tree *idx, uint64_t *key, uint64_t last,
		 unsigned *order)
{
	return find_common(idx, key, last, -1, order, NULL);
}

void *index_find_tagged(const struct index_tree *idx, uint64_t *key,
			uint64_t last, unsigned tag, unsigned *order)
{
	if (tag >= INDEX_TAG_COUNT)
		return NULL;
	return find_common(idx, key, last, (int)tag, order, NULL);
}

unsigned index_find_tagged_batch(const struct index_tree *idx, uint64_t *key,
				 uint64_t last, int tag,
				 struct index_hit *hits, unsigned max)
{
	const struct index_node *n;
	uint64_t first = *key;
	unsigned order;
	if (tag >= (int)INDEX_TAG_COUNT || !max)
		return 0;
	void *e = find_common(idx, &first, last, tag < 0 ? -1 : tag, &order,
			      &n);
	if (!e)
		return 0;
	/* The rest of the first entry's node, in slot order: entries only
	 * (a child node or the node's end sends the next call through
	 * find_common() again). */
	unsigned shift = level_of(order);
	/* A node at level 60 spans every key (64 << 60 wraps to 0). */
	uint64_t base = first & ~((UINT64_C(64) << shift) - 1);
	unsigned got = 0;
	/* The next key, stored through `key` once at the end: the hits
	 * may alias it, so a store per hit would also reload it. */
	uint64_t after;
	for (;;) {
		unsigned slot = slot_of(first, shift);
		unsigned slots = 1u << (order - shift);
		hits[got].entry = e;
		hits[got].at.node = (struct index_node *)(uintptr_t)n;
		/* index_entry_mask(), from what the walk has at hand. */
		hits[got].at.mask = bits(slot, slots);
		hits[got].first = first;
		hits[got].order = order;
		got++;
		unsigned next = slot + slots;
		after = first + (UINT64_C(1) << order);
		if (got == max || next == INDEX_NODE_SLOTS)
			break;
		uint64_t cand = (tag < 0 ? n->present
					 : tag_load(n, (unsigned)tag)) &
				(ALL_BITS << next);
		if (!cand)
			break;
		unsigned j = (unsigned)__builtin_ctzll(cand);
		uintptr_t v = n->slots[j];
		first = base + ((uint64_t)j << shift);
		if (first > last || !v || (v & SLOT_KIND))
			break;
		e = (void *)v;
		order = shift + entry_log_slots(n, j);
	}
	*key = after;
	return got;
}

/* Set @mask (the entry's slots) in the leaf's @tag word at the end of
 * @p, and the path's bits above it. */
static void tag_set_path(struct index_tree *idx, struct path *p,
			 unsigned tag, uint64_t mask)
{
	(void)idx;
	/* Top-down, so a set bit always has its ancestors set (see index.h).
	 * A plain load first keeps hot upper words shared in caches when
	 * they are already set, which is the common case. */
	unsigned tb = 1u << tag;
	for (unsigned d = 0; d + 1 < p->depth; d++) {
		_Atomic uint64_t *w = &p->node[d]->tags[tag];
		uint64_t bit = UINT64_C(1) << p->slot[d];
		if (!(atomic_load_explicit(w, memory_order_relaxed) & bit))
			atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
		/* After the parent's bit: `up` promises it. */
		_Atomic unsigned *up = &p->node[d + 1]->up;
		if (!(atomic_load_explicit(up, memory_order_relaxed) & tb))
			atomic_fetch_or(up, tb);
	}
	struct index_node *n = p->node[p->depth - 1];
	/* Always an RMW here, even if already set: the release is what
	 * orders this caller's earlier writes before a finder's acquire. */
	atomic_fetch_or_explicit(&n->tags[tag], mask, memory_order_release);
}

static void tag_clear_path(struct index_tree *idx, struct path *p,
			   unsigned tag, uint64_t mask)
{
	struct index_node *n = p->node[p->depth - 1];
	if (!(atomic_load_explicit(&n->tags[tag], memory_order_relaxed) & mask))
		return; /* not tagged: nothing above changes either */
	tag_clear_bits(n, tag, mask);
	fixup_up(idx, p);
}

/* Apply a tag change to the entry stored at exactly
 * [first, first + 2^order). */
static int tag_change(struct index_tree *idx, uint64_t first, unsigned order,
		      unsigned tag,
		      void (*change)(struct index_tree *idx, struct path *p,
				     unsigned tag, uint64_t mask))
{
	struct path p;

	if (tag >= INDEX_TAG_COUNT || !valid_range(first, order))
		return -EINVAL;
	int i = locate_exact(idx, first, order, &p);
	if (i < 0)
		return -ENOENT;
	change(idx, &p, tag, index_entry_mask(first, order));
	return 0;
}

int index_tag_set(struct index_tree *idx, uint64_t first, unsigned order,
		  unsigned tag)
{
	return tag_change(idx, first, order, tag, tag_set_path);
}

int index_tag_clear(struct index_tree *idx, uint64_t first, unsigned order,
		    unsigned tag)
{
	return tag_change(idx, first, order, tag, tag_clear_path);
}

/* Clear the stale bits of the tags in mask from n (at level `shift`,
 * first key `base`) down, within [first, last]: children first, so a
 * child's bit goes once nothing below it is tagged. */
static void prune_node(struct index_node *n, unsigned shift, uint64_t base,
		       uint64_t first, uint64_t last, unsigned mask)
{
	uint64_t span = UINT64_C(1) << shift;
	unsigned lo = first > base ? slot_of(first, shift) : 0;
	unsigned hi = INDEX_NODE_SLOTS - 1;
	if (shift + INDEX_NODE_SHIFT < 64 &&
	    last - base < (UINT64_C(64) << shift))
		hi = slot_of(last, shift);
	uint64_t any = 0;
	for (unsigned t = 0; t < INDEX_TAG_COUNT; t++)
		if (mask & (1u << t))
			any |= atomic_load_explicit(&n->tags[t],
						    memory_order_relaxed);
	any &= (ALL_BITS << lo) & (ALL_BITS >> (63 - hi));
	while (any) {
		unsigned i = (unsigned)__builtin_ctzll(any);
		any &= any - 1;
		uintptr_t v = n->slots[i];
		if (!slot_is_node(v))
			continue;
		struct index_node *c = slot_node(v);
		prune_node(c, shift - INDEX_NODE_SHIFT, base + i * span,
			   first, last, mask);
		uint64_t bit = UINT64_C(1) << i;
		for (unsigned t = 0; t < INDEX_TAG_COUNT; t++)
			if ((mask & (1u << t)) &&
			    (atomic_load_explicit(&n->tags[t],
						  memory_order_relaxed) & bit) &&
			    child_untagged(c, t))
				tag_clear_bits(n, t, bit);
	}
}

void index_tag_prune(struct index_tree *idx, uint64_t first, uint64_t last,
		     unsigned mask)
{
	mask &= UP_ALL;
	if (!idx->root || first > last || !mask)
		return;
	if (index_beyond_node(first, idx->shift))
		return;
	prune_node(idx->root, idx->shift, 0, first, last, mask);
}

bool index_tag_get(const struct index_tree *idx, uint64_t key, unsigned tag)
{
	const struct index_node *n = idx->root;
	unsigned shift = idx->shift;

	if (!n || tag >= INDEX_TAG_COUNT || index_beyond_node(key, shift))
		return false;
	for (;;) {
		unsigned i = slot_of(key, shift);
		uintptr_t v = n->slots[i];
		if (slot_is_node(v)) {
			/* A clear bit here settles it without descending. */
			if (!(tag_load(n, tag) & (UINT64_C(1) << i)))
				return false;
			n = slot_node(v);
			shift -= INDEX_NODE_SHIFT;
			continue;
		}
		return v && (tag_load(n, tag) & (UINT64_C(1) << i));
	}
}

bool index_any_tagged(const struct index_tree *idx, unsigned tag)
{
	return idx->root && tag < INDEX_TAG_COUNT && tag_load(idx->root, tag);
}

size_t index_count(const struct index_tree *idx)
{
	return idx->count;
}

size_t index_node_count(const struct index_tree *idx)
{
	return idx->nodes;
}

/* ---- verification ----------------------------------------------------- */

struct verify_acc {
	size_t entries;
	size_t nodes;
	bool exact; /* no stale bits allowed */
};

#define VFAIL() (-__LINE__)

static int verify_node(const struct index_node *n, unsigned shift,
		       bool is_root, struct verify_acc *acc)
{
	acc->nodes++;
	if (!n->present)
		return VFAIL();
	if (is_root && atomic_load(&n->up) != UP_ALL)
		return VFAIL();
	for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
		if (atomic_load_explicit(&n->tags[t], memory_order_relaxed) &
		    ~n->present)
			return VFAIL();
	}
	for (unsigned i = 0; i < INDEX_NODE_SLOTS; i++) {
		uintptr_t v = n->slots[i];
		bool p = (n->present >> i) & 1;
		if (!v != !p)
			return VFAIL();
		if (!v)
			continue;
		if (slot_is_node(v)) {
			if (shift == 0)
				return VFAIL();
			const struct index_node *c = slot_node(v);
			int err = verify_node(c, shift - INDEX_NODE_SHIFT,
					      false, acc);
			if (err)
				return err;
			for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
				bool child = atomic_load_explicit(
					&c->tags[t], memory_order_relaxed) != 0;
				bool mine = (atomic_load_explicit(
					&n->tags[t], memory_order_relaxed) >> i) & 1;
				bool up = (atomic_load(&c->up) >> t) & 1;
				if ((child || up) && !mine)
					return VFAIL();
				if (acc->exact && mine && !child)
					return VFAIL();
			}
			continue;
		}
		bool sib_bit = (n->sibs >> i) & 1;
		if (slot_is_sib(v) != sib_bit)
			return VFAIL();
		if (slot_is_sib(v)) {
			/* Checked with its first slot, below; never the
			 * first slot of a node. */
			if (!i)
				return VFAIL();
			continue;
		}
		if (v & SLOT_KIND)
			return VFAIL();
		/* An entry's first slot: its other slots must follow, fill
		 * exactly 2^log slots, name it, and share its tags. */
		unsigned run = (unsigned)__builtin_ctzll(
			~(i + 1 < INDEX_NODE_SLOTS ? n->sibs >> (i + 1) : 0));
		unsigned cnt = run + 1;
		if (cnt & (cnt - 1))
			return VFAIL();
		unsigned ln = entry_log_slots(n, i);
		if (cnt != 1u << ln || ln > 5 || (i & (cnt - 1)) ||
		    i + cnt > INDEX_NODE_SLOTS)
			return VFAIL();
		for (unsigned k = 1; k < cnt; k++) {
			if (n->slots[i + k] != make_sib(v))
				return VFAIL();
		}
		if (shift + ln > INDEX_MAX_ORDER)
			return VFAIL();
		for (unsigned t = 0; t < INDEX_TAG_COUNT; t++) {
			uint64_t w = atomic_load_explicit(&n->tags[t],
							  memory_order_relaxed);
			uint64_t m = bits(i, cnt);
			if ((w & m) != 0 && (w & m) != m)
				return VFAIL();
		}
		acc->entries++;
	}
	if (is_root && n->present == 1 && slot_is_node(n->slots[0]))
		return VFAIL();
	return 0;
}

static int verify(const struct index_tree *idx, bool exact)
{
	struct verify_acc acc = { 0, 0, exact };

	if (!idx->root) {
		if (idx->count || idx->nodes || idx->shift)
			return VFAIL();
		return 0;
	}
	if (idx->shift % INDEX_NODE_SHIFT || idx->shift > 60)
		return VFAIL();
	int err = verify_node(idx->root, idx->shift, true, &acc);
	if (err)
		return err;
	if (acc.entries != idx->count || acc.nodes != idx->nodes)
		return VFAIL();
	return 0;
}

int index_verify(const struct index_tree *idx)
{
	return verify(idx, false);
}

int index_verify_pruned(const struct index_tree *idx)
{
	return verify(idx, true);
}
