/* SPDX-License-Identifier: MIT */
/*
 * The mapping's error sequence: every error recorded moves it, and each
 * cursor reports the latest error once when it sees the sequence moved
 * (Linux's errseq_t). Several errors between two looks are one report.
 */
#include "mapping/errseq.h"

void errseq_report_again(struct folio_mapping *m, int err)
{
	atomic_store(&m->err.last_error, err);
	/* The low bit is unused: a counter step of 2 keeps 0 free to mean
	 * "no error ever" without a separate flag. */
	atomic_fetch_add(&m->err.seq, 2);
}

void errseq_record(struct folio_mapping *m, int err)
{
	errseq_report_again(m, err);
	stat_add(&m->stats.errors, 1);
}

folio_errseq_t folio_mapping_err_cursor(struct folio_mapping *m)
{
	return m ? atomic_load(&m->err.seq) : 0;
}

int errseq_check_advance(struct folio_mapping *m, folio_errseq_t *cursor,
			 folio_errseq_t begin)
{
	uint64_t now = atomic_load(&m->err.seq);
	uint64_t seen;
	if (cursor) {
		seen = *cursor;
		*cursor = now;
	} else {
		/* The mapping's own cursor is shared by every thread that
		 * syncs with NULL: one of them takes an old error. */
		seen = atomic_exchange(&m->err.own_cursor, now);
	}
	/* An error recorded while this call ran is this caller's too,
	 * even when another caller of a shared cursor took it first: its
	 * data may be what failed. */
	if (now == seen && now == begin)
		return 0;
	int err = atomic_load(&m->err.last_error);
	return err ? err : -EIO;
}
