/* SPDX-License-Identifier: MIT */
/*
 * Built instead of nbd.c when libnbd is missing, so the symbols exist in
 * every build and callers can fall back at run time.
 */
#include "engine/engine.h"
#include "engines/nbd_args.h"

int folio_engine_nbd(struct folio_engine **out, const char *uri,
		     const struct folio_nbd_opts *opts)
{
	struct folio_nbd_opts o;
	int r = nbd_args_read(uri, opts, &o);
	if (!out || r)
		return r ? r : -EINVAL;
	return -ENOSYS;
}

int folio_engine_nbd_info(const struct folio_engine *e,
			  struct folio_nbd_info *info)
{
	if (!e || !info)
		return -EINVAL;
	return e->kind == ENGINE_NBD ? -ENOSYS : -EINVAL;
}
