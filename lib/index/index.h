/* SPDX-License-Identifier: MIT */
/*
 * Ordered index of entries keyed by uint64_t: a radix tree with 64-way
 * nodes and per-node tag bits. The mapping keys folios by
 * (pos >> min_folio_shift); a folio of size S covers S >> min_folio_shift
 * consecutive keys, so every entry covers a naturally aligned power-of-two
 * range [first, first + 2^order).
 *
 * Layout. A node holds 64 slots; a node at level `shift` has slots that
 * each cover 2^shift keys (shift is a multiple of 6). An entry of order o
 * lives in the highest level whose slot span fits, shift = 6 * (o / 6),
 * where it fills 2^(o - shift) consecutive slots (1..32) of one node: the
 * first holds the entry, the others the entry tagged INDEX_SLOT_SIB (and
 * their bits in the node's `sibs` word say which slots those are, so the
 * writers find an entry's head and size without comparing pointers).
 * A lookup of any key
 * the entry covers therefore stops at that level: at most 11 steps for
 * 64-bit keys, 4 for keys below 2^24, 9 for keys below 2^54 (file
 * positions up to 2^62 with 512-byte blocks).
 *
 * Tags. Each node has, per tag, a 64-bit word with bit i set when slot i
 * holds a tagged entry (every slot of a multi-slot entry carries the bit)
 * or a child with any tagged entry. find_tagged() skips a whole subtree on
 * a clear bit, so a pass costs in proportion to the tagged entries, not
 * to all entries.
 *
 * Memory: a node is INDEX_NODE_BYTES = 560 bytes on LP64 (64 slot
 * pointers, a presence word, three tag words, the sibling word, the `up`
 * flags; the level is
 * implied by the depth, never stored). Dense single-key entries fill
 * leaves completely: 10^6 of them take 15,875 nodes = 8.9 MB, about 8.9
 * bytes per entry.
 * Sparse keys cost more: a lone key costs a chain of nodes down to the
 * leaf.
 *
 * Locking (the mapping wraps every call in a pthread rwlock):
 *  - readers, which may run concurrently with each other: index_lookup,
 *    index_find, index_find_tagged, index_find_tagged_batch,
 *    index_tag_get, index_any_tagged, index_count, index_node_count, and
 *    also index_tag_set;
 *  - writers, which need exclusive access: index_insert, index_remove,
 *    index_tag_clear, index_tag_prune, index_init, index_init_alloc,
 *    index_destroy;
 *  - no lock at all: index_tag_set_fast and index_tag_drop, given a node
 *    an entry is known to stay in (see index_tag_set_fast()), and
 *    index_lookup of a lockless index (index_set_lockless()).
 * Slot pointers change only under the exclusive side, with release stores
 * that index_lookup() reads with acquire loads, so that a lockless index
 * can serve lookups with no lock at all; tag words are atomics because
 * index_tag_set and the lock-free calls change them beside other threads,
 * so even exclusive writers change them with RMWs. See index_tag_set() for
 * the memory ordering.
 *
 * Stale tag bits. index_tag_drop() clears an entry's own bits only, so a
 * node's bit may stay set above a subtree that no longer holds a tagged
 * entry ("stale"). Finds step into such a subtree and find nothing: it
 * costs time, never an entry. index_tag_prune() clears stale bits of a
 * key range under the exclusive lock, so a writeback pass takes that lock
 * once, not once per folio. What always holds: a node whose tag word is
 * not zero has its bit set in its parent, and so on up.
 */
#ifndef FOLIO_INDEX_H
#define FOLIO_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/epoch.h"

#define INDEX_TAG_DIRTY 0u
#define INDEX_TAG_WRITEBACK 1u
#define INDEX_TAG_UNSTABLE 2u
#define INDEX_TAG_COUNT 3u

/* Largest entry: 2^20 keys (a 512 MiB folio at a 512-byte min size). */
#define INDEX_MAX_ORDER 20u

#define INDEX_NODE_SHIFT 6u
#define INDEX_NODE_SLOTS (1u << INDEX_NODE_SHIFT)
/* Levels a 64-bit key needs: shifts 0, 6, ..., 60. */
#define INDEX_MAX_LEVELS 11u

struct index_node {
	/* Encoded: entry pointer (the first slot of an entry), node pointer
	 * | INDEX_SLOT_NODE, or entry pointer | INDEX_SLOT_SIB (its other
	 * slots). First in the node, so that a walk addresses a slot as
	 * node + 8 * i, with no offset to add. */
	uintptr_t slots[INDEX_NODE_SLOTS];
	union {
		struct {
			uint64_t present; /* bit i: slot i is not empty */
			_Atomic uint64_t tags[INDEX_TAG_COUNT];
		};
		/* An unlinked node of a lock-free index waits here for
		 * its grace period: lock-free lookups read only slots,
		 * and the lock-free tag calls never reach an unlinked
		 * node (only a node holding no entry is ever unlinked,
		 * and they write only into the node of an entry that
		 * stays: see index_tag_set_fast()). */
		struct epoch_entry retire;
	};
	/* Bit t: this node's bit of tag t is set in its parent (always all
	 * set at the root), hence in every ancestor: a tag set on an entry
	 * of this node needs no walk from the root (index_tag_set_fast()).
	 * Set only after the parent's bit, cleared (under the exclusive
	 * lock) before it. */
	_Atomic unsigned up;
	/* Bit i: slot i is a multi-slot entry's slot other than its first
	 * (exclusive writers only; lock-free lookups need not read it). */
	uint64_t sibs;
};

#define INDEX_NODE_BYTES sizeof(struct index_node)

/* The slots (as bits of its node's words) of the entry [first,
 * first + 2^order): 2^(order % 6) of them from slot (first >> level) % 64,
 * level being order rounded down to a multiple of 6. */
static inline uint64_t index_entry_mask(uint64_t first, unsigned order)
{
	unsigned level = order / INDEX_NODE_SHIFT * INDEX_NODE_SHIFT;
	unsigned slot = (unsigned)(first >> level) & (INDEX_NODE_SLOTS - 1);
	return ((UINT64_C(1) << (1u << (order - level))) - 1) << slot;
}

/* Node alignment: the root's shift (at most 60) fits below its pointer
 * in index_tree.top. */
#define INDEX_NODE_ALIGN 64u

/*
 * Where an index gets its nodes (INDEX_NODE_BYTES each, aligned to
 * INDEX_NODE_ALIGN: a node that is not is refused) and returns them. alloc returns NULL on failure, which
 * index_insert() reports as -ENOMEM with nothing changed. Tests pass one
 * that fails on purpose; the library uses malloc and free.
 */
struct index_allocator {
	void *(*alloc)(void *arg);
	void (*free)(void *node, void *arg);
	void *arg;
};

/* Embeddable; all-zero is not a valid state: call index_init(). */
struct index_tree {
	struct index_node *root; /* NULL when empty */
	unsigned shift;          /* level of the root node */
	/* root | shift, published with a release store whenever either
	 * changes: the one word a lock-free lookup starts from (nodes are
	 * INDEX_NODE_ALIGN-aligned, so the shift fits below the pointer). */
	uintptr_t top;
	/* Lookups run lock-free (index_set_lockless()): unlinked nodes are
	 * freed after a grace period. */
	bool lockless;
	size_t count;            /* entries */
	size_t nodes;            /* nodes allocated */
	const struct index_allocator *alloc; /* NULL: malloc and free */
};

/* Prepare an empty index whose nodes come from malloc. Exclusive. */
void index_init(struct index_tree *idx);

/* Prepare an empty index whose nodes come from `alloc` (NULL: malloc),
 * which must outlive it. Exclusive. */
void index_init_alloc(struct index_tree *idx,
		      const struct index_allocator *alloc);

/* Free every node; the entries belong to the caller and are not touched.
 * The index is empty (and reusable, with the same allocator) afterwards.
 * Exclusive. */
void index_destroy(struct index_tree *idx);

/*
 * Store `entry` over keys [first, first + 2^order). Exclusive.
 * Returns 0; -EINVAL if order > INDEX_MAX_ORDER, first is not a multiple
 * of 2^order, first + 2^order does not fit in 64 bits (so the key
 * UINT64_MAX is never covered, and `first + (1 << order)` never wraps in an
 * iteration), or entry is NULL or not 4-byte aligned; -EEXIST if any key
 * of the range is already covered; -ENOMEM. On error nothing changed: all
 * nodes are allocated before any is linked.
 */
int index_insert(struct index_tree *idx, uint64_t first, unsigned order,
		 void *entry);

/* The entry covering `key`, or NULL. Reader; in a lockless index also
 * safe with no lock at all inside an epoch section (epoch.h), against
 * any writer: it then returns NULL or an entry that was in the index at
 * some instant during the call, which the caller checks covers `key`
 * (racing a remove and an insert of a smaller entry in the same node,
 * a lookup may reach the newer entry through the older one's slots). */
void *index_lookup(const struct index_tree *idx, uint64_t key);

/* index_lookup() that also returns (when it returns an entry) the slot
 * it found it in, for index_slot_holds(): whether that slot still holds
 * the entry, i.e. whether the entry is still in the index, at the cost
 * of one load instead of a second walk (a lock-free lookup's recheck
 * after taking its reference). */
void *index_lookup_slot(const struct index_tree *idx, uint64_t key,
			const uintptr_t **slot);

/*
 * The walk of index_lookup_slot(), here so that the cached read and
 * write paths (mapping/read.c, lookup.c) walk without a call, whose
 * saves and restores of what they keep live cost about what the walk
 * does. A slot holds an entry pointer (4-byte aligned), a node pointer
 * | INDEX_SLOT_NODE, or an entry pointer | INDEX_SLOT_SIB in the other
 * slots of a multi-slot entry: the walk ends on any slot of an entry
 * with the entry in hand, no second load. Never both bits.
 */
#define INDEX_SLOT_NODE 1u
#define INDEX_SLOT_SIB 2u
#define INDEX_SLOT_KIND 3u
#define INDEX_SLOT_MASK (INDEX_NODE_SLOTS - 1u)
/* idx->top: the root | its shift. */
#define INDEX_TOP_SHIFT_MASK ((uintptr_t)INDEX_NODE_ALIGN - 1)

/* Whether key lies past everything a node at `shift` (at most 60) spans.
 * Two shifts rather than one by shift + 6: a node at shift 60 spans the
 * whole key space, and a shift by 66 would be undefined; this way needs
 * no test for that, and the first shift is the walk's own. */
static inline bool index_beyond_node(uint64_t key, unsigned shift)
{
	return ((key >> shift) >> INDEX_NODE_SHIFT) != 0;
}

static inline void *index_walk(const struct index_tree *idx, uint64_t key,
			       const uintptr_t **slot)
{
	/* Root and level from one word: a lookup racing a growth or a
	 * lowering of the root walks one consistent tree, the old or the
	 * new, and an old node stays valid until its grace period ends. */
	uintptr_t top = __atomic_load_n(&idx->top, __ATOMIC_ACQUIRE);
	const struct index_node *n =
		(const struct index_node *)(top & ~INDEX_TOP_SHIFT_MASK);
	unsigned shift = (unsigned)(top & INDEX_TOP_SHIFT_MASK);

	if (!n || index_beyond_node(key, shift))
		return NULL;
	for (;;) {
		unsigned i = (unsigned)(key >> shift) & INDEX_SLOT_MASK;
		uintptr_t v = __atomic_load_n(&n->slots[i], __ATOMIC_ACQUIRE);
		if (v & INDEX_SLOT_NODE) {
			n = (const struct index_node *)(v - INDEX_SLOT_NODE);
			shift -= INDEX_NODE_SHIFT;
			continue;
		}
		/* An entry's other slots are published after its first and
		 * cleared before it: one read here names an entry that was
		 * wholly in the index at that instant. */
		*slot = &n->slots[i];
		return (void *)(v & ~(uintptr_t)INDEX_SLOT_SIB);
	}
}

/* index_lookup() inline, for the hot paths (see index_walk()). */
static inline void *index_lookup_inline(const struct index_tree *idx,
					uint64_t key)
{
	const uintptr_t *slot;
	return index_walk(idx, key, &slot);
}

static inline bool index_slot_holds(const uintptr_t *slot, const void *entry)
{
	/* Only an empty node leaves the tree, and a lowered root holds no
	 * entry: a slot that still holds the entry (as its first slot or
	 * another, which goes before the first) is still in the index. */
	return (__atomic_load_n(slot, __ATOMIC_ACQUIRE) &
		~(uintptr_t)INDEX_SLOT_SIB) == (uintptr_t)entry;
}

/*
 * Let lookups run without the lock: from now on every store a
 * index_lookup() may see is a release store of a fully built node or
 * entry, and unlinked nodes are freed only after a grace period
 * (epoch_retire()). Only for an index whose nodes come from malloc (a
 * retired node cannot keep its allocator alive): -EINVAL otherwise, 0.
 * Exclusive, before the index is shared.
 */
int index_set_lockless(struct index_tree *idx);

/*
 * Remove the entry stored at exactly [first, first + 2^order) and return
 * it; NULL (nothing changed) if no entry has that exact range, including
 * when a larger entry covers it or a smaller one starts there. Clears the
 * entry's tags, frees nodes left empty, and lowers the tree when the root
 * keeps a single child at slot 0. Exclusive.
 */
void *index_remove(struct index_tree *idx, uint64_t first, unsigned order);

/*
 * The first entry, in key order, covering any key of [*key, last]. Sets
 * *key to the entry's first key (below the input when the entry covers
 * the input key) and, when order is not NULL, *order to its order.
 * Returns NULL, with *key and *order unchanged, if there is none.
 * Iterate with `*key = found_first + ((uint64_t)1 << order)`, which never
 * wraps, until it exceeds last or NULL comes back. Reader.
 */
void *index_find(const struct index_tree *idx, uint64_t *key, uint64_t last,
		 unsigned *order);

/*
 * index_find() restricted to entries carrying `tag`. Subtrees whose tag
 * bit is clear are skipped without being visited. NULL for tag >=
 * INDEX_TAG_COUNT. Reader; an entry tagged concurrently may or may not be
 * seen, one tagged before the call (in happens-before order) is seen.
 */
void *index_find_tagged(const struct index_tree *idx, uint64_t *key,
			uint64_t last, unsigned tag, unsigned *order);

/*
 * Set `tag` on the entry stored at exactly [first, first + 2^order).
 * Returns 0, -ENOENT if there is no such entry, -EINVAL for a bad tag or
 * range. Runs as a reader: concurrent with lookups, finds and other
 * tag_set calls (tag words change only with atomic fetch_or), but not
 * with insert, remove or tag_clear.
 *
 * Ordering: bits are set from the root down, so at every instant a set
 * bit in a node has its ancestors' bits set and a concurrent find_tagged
 * never misses a tag that was completely set before it started. The bit of
 * the entry itself is set with a release RMW and read with acquire loads,
 * so a thread that finds the entry through its tag also sees what the
 * tagging thread wrote before index_tag_set() (e.g. a folio's dirty bits).
 * Free on x86; one ordered load per level elsewhere.
 */
int index_tag_set(struct index_tree *idx, uint64_t first, unsigned order,
		  unsigned tag);

/* Clear `tag` on the entry stored at exactly [first, first + 2^order),
 * clearing ancestors' bits that no longer cover anything tagged. Same
 * returns as index_tag_set(). Exclusive. */
int index_tag_clear(struct index_tree *idx, uint64_t first, unsigned order,
		    unsigned tag);

/*
 * Where an entry sits: the node holding it and the entry's bits in that
 * node's tag words (index_entry_mask()), worked out once when the entry is
 * found, for the lock-free tag changes below (a folio written back
 * changes four tags through it).
 */
struct index_place {
	struct index_node *node;
	uint64_t mask;
};

/* One entry found by index_find_tagged_batch(). */
struct index_hit {
	void *entry;
	struct index_place at;
	uint64_t first; /* its first key */
	unsigned order;
};

/*
 * Up to `max` entries carrying `tag` (every entry for a negative tag)
 * from [*key, last], in key order, as repeated index_find_tagged() or
 * index_find() calls would return them, with the node holding each; *key
 * moves past the last one returned. Entries of the node the first one
 * lies in come without a walk from the root. Returns the number found
 * (0 at the end, for max 0 or a tag >= INDEX_TAG_COUNT). Reader.
 */
unsigned index_find_tagged_batch(const struct index_tree *idx, uint64_t *key,
				 uint64_t last, int tag,
				 struct index_hit *hits, unsigned max);

/*
 * Set or clear `tag` on the entry [first, first + 2^order) that `node`
 * holds (from index_find_tagged_batch()), taking no lock: the caller only
 * guarantees that the entry stays in the index meanwhile (it cannot be
 * removed, so its node cannot be freed), which the mapping has from the
 * folio lock or the folio's writeback. Entries never move between nodes.
 * In a lockless index that also keeps the node linked, so these calls
 * never write into a node whose presence and tag words have become its
 * retire link (struct index_node): a node is unlinked only when it holds
 * no entry (an emptied node, or a root lowered onto its one child, whose
 * only slot is a node), and growth and lowering move no entry.
 *
 * index_tag_set_fast() returns true when done; false when the node's
 * ancestors may lack the tag, and then the caller must call
 * index_tag_set() for the entry under the read lock (the entry's bit is
 * already set: a find may see it once that call returns). Ordering as
 * index_tag_set(). The bit is set before `up` is read and the exclusive
 * side clears `up` before it reads the word (both sequentially
 * consistent), so either this call sees `up` clear or index_tag_prune()
 * and the remove path see the bit and keep the ancestors' bits.
 *
 * index_tag_drop() clears the entry's bits only (an acquire-release RMW:
 * a caller that re-checks the state the tag stands for after it sees what
 * a racing setter wrote before its index_tag_set()); bits above may stay
 * set until index_tag_prune().
 */
static inline bool index_tag_set_fast(struct index_place at, unsigned tag)
{
	/* Sequentially consistent: see child_untagged() in index.c. It is
	 * also the release a finder's acquire pairs with. */
	atomic_fetch_or(&at.node->tags[tag], at.mask);
	return atomic_load(&at.node->up) & (1u << tag);
}

static inline void index_tag_drop(struct index_place at, unsigned tag)
{
	/* A bit read clear here was never set or was set by a setter this
	 * call then leaves alone: either way nothing a re-check needs. */
	if (atomic_load_explicit(&at.node->tags[tag], memory_order_relaxed) &
	    at.mask)
		atomic_fetch_and_explicit(&at.node->tags[tag], ~at.mask,
					  memory_order_acq_rel);
}

/*
 * Clear the stale bits (see the top of this file) of the tags in mask
 * (bit t: tag t) in the nodes covering keys [first, last]: afterwards a
 * bit is set there only above a tagged entry. Costs in proportion to the
 * nodes of the range whose bit is set. Exclusive.
 */
void index_tag_prune(struct index_tree *idx, uint64_t first, uint64_t last,
		     unsigned mask);

/* Whether the entry covering `key` carries `tag` (false if none). Reader. */
bool index_tag_get(const struct index_tree *idx, uint64_t key, unsigned tag);

/* Whether any entry may carry `tag`: one load. Reads true while stale
 * bits are left (see the top of this file), and for an instant while a
 * concurrent index_tag_set() is halfway down the tree. Reader. */
bool index_any_tagged(const struct index_tree *idx, unsigned tag);

/* Number of entries. Reader. */
size_t index_count(const struct index_tree *idx);

/* Number of nodes (memory = nodes * INDEX_NODE_BYTES). Reader. */
size_t index_node_count(const struct index_tree *idx);

/*
 * Check every structural invariant (presence words match slots, tags only
 * on occupied slots, a parent's tag bit set above every child with a
 * tagged entry and wherever the child's `up` says so, no empty non-root
 * node, a root that cannot be lowered, entry and node counts).
 * index_verify_pruned() also requires parent bits to summarise children
 * exactly (no stale bits). Return 0 or a negative line-specific code; for
 * tests. Exclusive.
 */
int index_verify(const struct index_tree *idx);
int index_verify_pruned(const struct index_tree *idx);

#endif
