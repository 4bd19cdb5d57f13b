/* SPDX-License-Identifier: MIT */
/*
 * Lists of referenced folios (folio_list.h).
 */
#include <stdlib.h>
#include <string.h>

#include "mapping/folio_list.h"

void folio_list_init(struct folio_list *l)
{
	l->v = l->local;
	l->n = 0;
	l->cap = FOLIO_LIST_LOCAL;
	l->incomplete = false;
}

void folio_list_add_grow(struct folio_list *l, struct folio *f,
			 struct index_place at)
{
	if (l->incomplete)
		return;
	size_t cap = 2 * l->cap;
	struct folio_list_entry *v = l->v == l->local
					     ? malloc(cap * sizeof(*v))
					     : realloc(l->v, cap * sizeof(*v));
	if (!v) {
		/* What is recorded keeps its references until the
		 * release; the user's walk covers the rest. */
		l->incomplete = true;
		return;
	}
	if (l->v == l->local)
		memcpy(v, l->local, sizeof(l->local));
	l->v = v;
	l->cap = cap;
	folio_list_add(l, f, at);
}

void folio_list_release(struct folio_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		folio_unref(l->v[i].folio);
	if (l->v != l->local)
		free(l->v);
	folio_list_init(l);
}
