/* SPDX-License-Identifier: MIT */
/*
 * The argument checks of folio_engine_rados(), shared by the engine and
 * the stub built without librados, so a bad call fails the same way in
 * both builds.
 */
#ifndef FOLIO_ENGINES_RADOS_OPTS_H
#define FOLIO_ENGINES_RADOS_OPTS_H

#include <string.h>

#include "base/base.h"
#include "folio_state_rados.h"

#define RADOS_MAX_PREFIX 200u

static inline int rados_opts_check(const struct folio_rados_opts *o)
{
	struct folio_rados_opts z = {0};
	if (!o)
		return -EINVAL;
	/* The required fields end at prefix; later ones default to 0. */
	int r = sized_check(o, o->sz, SIZEOF_THROUGH(struct folio_rados_opts,
						      prefix),
			    sizeof(*o));
	if (r)
		return r;
	memcpy(&z, o, MIN(o->sz, sizeof(z)));
	size_t plen = z.prefix ? strlen(z.prefix) : 0;
	if (!z.pool || !z.pool[0] || !plen || plen > RADOS_MAX_PREFIX)
		return -EINVAL;
	if (z.object_size && (z.object_size < 4096 ||
			      z.object_size > (UINT64_C(1) << 30) ||
			      (z.object_size & (z.object_size - 1))))
		return -EINVAL;
	if (z.depth > 1024 || z.timeout > 3600 || (z.cluster && z.timeout))
		return -EINVAL;
	return 0;
}

#endif
