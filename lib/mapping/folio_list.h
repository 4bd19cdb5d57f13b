/* SPDX-License-Identifier: MIT */
/*
 * A list of folios, each with a reference and where it sat in the index
 * when it was recorded (folio_list.c): what a sync's passes wrote, to
 * settle after the flush, and what was under writeback when a pass's
 * walk ended, to wait for. 16 entries live in the list itself (on the
 * caller's stack); more double on the heap.
 */
#ifndef FOLIO_MAPPING_FOLIO_LIST_H
#define FOLIO_MAPPING_FOLIO_LIST_H

#include "mapping/mapping.h"

struct folio_list_entry {
	struct folio *folio;
	struct index_place at; /* where it sits while it stays indexed */
};

#define FOLIO_LIST_LOCAL 16

struct folio_list {
	struct folio_list_entry *v;
	size_t n, cap;
	/* An entry could not be recorded (no memory): the list is not
	 * every folio it was to hold, and its user must fall back to a
	 * walk of the index. */
	bool incomplete;
	struct folio_list_entry local[FOLIO_LIST_LOCAL];
};

void folio_list_init(struct folio_list *l);

/* folio_list_add() with the list full: grow it, or mark it incomplete. */
void folio_list_add_grow(struct folio_list *l, struct folio *f,
			 struct index_place at);

/* Record f (a folio the caller holds), sitting at `at`, taking a
 * reference of the list's own. Inline: once per folio a sync writes. */
static inline void folio_list_add(struct folio_list *l, struct folio *f,
				  struct index_place at)
{
	if (l->n == l->cap) {
		folio_list_add_grow(l, f, at);
		return;
	}
	folio_ref(f);
	l->v[l->n++] = (struct folio_list_entry){f, at};
}

/* Drop the list's references and memory; the list is empty again. */
void folio_list_release(struct folio_list *l);

#endif
