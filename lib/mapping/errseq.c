/* SPDX-License-Identifier: MIT */
/*
 * The mapping's error sequence: every error recorded moves it, and each
 * cursor reports the latest error once when it sees the sequence moved
 * (Linux's errseq_t). Several errors between two looks are one report.
 */
#include "mapping/mapping.h"

void errseq_record(struct folio_mapping *m, int err)
{
	atomic_store(&m->last_error, err);
	/* The low bit is unused: a counter step of 2 keeps 0 free to mean
	 * "no error ever" without a separate flag. */
	atomic_fetch_add(&m->errseq, 2);
	stat_add(&m->stats.errors, 1);
}

folio_errseq_t folio_mapping_err_cursor(struct folio_mapping *m)
{
	return m ? atomic_load(&m->errseq) : 0;
}

int errseq_check_advance(struct folio_mapping *m, folio_errseq_t *cursor)
{
	uint64_t now = atomic_load(&m->errseq);
	if (now == *cursor)
		return 0;
	*cursor = now;
	int err = atomic_load(&m->last_error);
	return err ? err : -EIO;
}
