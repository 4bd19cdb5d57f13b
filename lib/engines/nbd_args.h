/* SPDX-License-Identifier: MIT */
/*
 * The arguments of folio_engine_nbd(), checked the same way by the engine
 * (nbd.c) and by the stub built without libnbd (nbd_stub.c), so that a
 * bad call fails the same way in both builds.
 */
#ifndef FOLIO_ENGINES_NBD_ARGS_H
#define FOLIO_ENGINES_NBD_ARGS_H

#include <string.h>

#include "base/base.h"
#include "folio_state_nbd.h"

#define NE_MAX_CONNS 16u
#define NE_DEF_CONNS 4u
#define NE_MAX_DEPTH 1024u
#define NE_DEF_DEPTH 64u
#define NE_DEF_TIMEOUT_MS 30000u
#define NE_MAX_TIMEOUT_MS 3600000u
#define NE_DEF_TRIES 3u
#define NE_MAX_TRIES 100u

/* @opts with its defaults filled in; NULL is all defaults. */
static inline int nbd_args_read(const char *uri,
				const struct folio_nbd_opts *opts,
				struct folio_nbd_opts *out)
{
	if (!uri || (strncmp(uri, "nbd://", 6) &&
		     strncmp(uri, "nbd+unix://", 11)))
		return -EINVAL;
	struct folio_nbd_opts d = {0};
	if (opts) {
		int r = sized_check(opts, opts->sz, sizeof(size_t),
				    sizeof(*opts));
		if (r)
			return r;
		memcpy(&d, opts, MIN(opts->sz, sizeof(d)));
	}
	d.sz = sizeof(d);
	d.connections = d.connections ? d.connections : NE_DEF_CONNS;
	d.depth = d.depth ? d.depth : NE_DEF_DEPTH;
	d.timeout_ms = d.timeout_ms ? d.timeout_ms : NE_DEF_TIMEOUT_MS;
	d.reconnect_tries = d.reconnect_tries ? d.reconnect_tries :
						NE_DEF_TRIES;
	if (d.connections > NE_MAX_CONNS || d.depth > NE_MAX_DEPTH ||
	    (d.flags & ~FOLIO_NBD_NO_FUA) || d.timeout_ms > NE_MAX_TIMEOUT_MS ||
	    d.reconnect_tries > NE_MAX_TRIES)
		return -EINVAL;
	*out = d;
	return 0;
}

#endif
