/* SPDX-License-Identifier: MIT */
/*
 * Built instead of uring.c when liburing is missing, so the symbol
 * exists in every build and callers can fall back at run time. Arguments
 * are still checked, so a bad call fails the same way in both builds.
 */
#include "engines/builtin.h"

int folio_engine_uring(struct folio_engine **out, int fd, unsigned depth,
		       unsigned flags)
{
	if (!out || fd < 0 || !depth || depth > 4096u ||
	    (flags & ~(FOLIO_ENGINE_DIRECT | FOLIO_URING_COMPLETION_THREAD)))
		return -EINVAL;
	return -ENOSYS;
}
