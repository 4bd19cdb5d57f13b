/* SPDX-License-Identifier: MIT */
/*
 * Built instead of rados.c when librados is missing, so the symbols exist
 * in every build and callers can fall back at run time. Arguments are
 * still checked, so a bad call fails the same way in both builds.
 */
#include "engines/rados_opts.h"

int folio_engine_rados(struct folio_engine **out,
		       const struct folio_rados_opts *opts)
{
	int r = rados_opts_check(opts);
	if (r || !out)
		return r ? r : -EINVAL;
	return -ENOSYS;
}

int folio_engine_rados_size(struct folio_engine *e, uint64_t *size)
{
	(void)e;
	(void)size;
	return -EINVAL;
}
