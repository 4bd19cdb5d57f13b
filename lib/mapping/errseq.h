/* SPDX-License-Identifier: MIT */
/*
 * The error sequence of a mapping (errseq.c).
 */
#ifndef FOLIO_MAPPING_ERRSEQ_H
#define FOLIO_MAPPING_ERRSEQ_H

#include "mapping/mapping.h"

/* Record an error. Call it before waking anyone who waits for the
 * operation that failed. */
void errseq_record(struct folio_mapping *m, int err);
/* Report an error recorded before once more, to every cursor, without
 * counting it again in the statistics: what it did reached more data
 * since (see settle_flush()). */
void errseq_report_again(struct folio_mapping *m, int err);
/* End of a sync that read the sequence as `begin` when it started:
 * report an error the cursor (NULL: the mapping's shared one) has not
 * seen, or one recorded since `begin`, advancing the cursor; 0 if
 * neither. */
int errseq_check_advance(struct folio_mapping *m, folio_errseq_t *cursor,
			 folio_errseq_t begin);

#endif
