/* SPDX-License-Identifier: MIT */
/*
 * --engine rados: workloads that open their engines with
 * bench_engine_open() run the library over a RADOS engine instead of the
 * temporary file, one striped object per engine, in the cluster named by
 * $FOLIO_BENCH_CEPH_CONF (pool $FOLIO_BENCH_CEPH_POOL, default "folio";
 * bench/rados-compare.sh shows how to start one). Each engine gets an
 * object of its own and removes it when closed, so runs do not fill the
 * cluster; the read workloads fill one object once and reopen it in each
 * round (bench_remote.c), then remove it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "folio_state_rados.h"

int bench_rados_engine(struct folio_engine **out, const char *prefix,
		       char *name_out, size_t name_len)
{
	static atomic_uint seq;
	const char *conf = getenv("FOLIO_BENCH_CEPH_CONF");
	const char *pool = getenv("FOLIO_BENCH_CEPH_POOL");
	if (!conf || !*conf) {
		fprintf(stderr, "folio-bench: --engine rados needs "
				"FOLIO_BENCH_CEPH_CONF=<ceph.conf>\n");
		return -EINVAL;
	}
	char fresh[64];
	if (!prefix) {
		snprintf(fresh, sizeof(fresh), "folio-bench.%d.%u",
			 (int)getpid(), atomic_fetch_add(&seq, 1));
		prefix = fresh;
		if (name_out)
			snprintf(name_out, name_len, "%s", fresh);
	}
	struct folio_rados_opts o = {
		.sz = sizeof(o), .conf_path = conf,
		.pool = pool && *pool ? pool : "folio", .prefix = prefix,
	};
	return folio_engine_rados(out, &o);
}

void bench_rados_engine_remove(struct folio_engine *e)
{
	uint64_t size;
	if (!e || folio_engine_rados_size(e, &size))
		return; /* not a RADOS engine */
	struct folio_mapping_opts mo = {.sz = sizeof(mo), .engine = e,
					.size = size};
	struct folio_mapping *m;
	if (folio_mapping_new(&m, &mo))
		return;
	folio_mapping_truncate(m, 0); /* removes the data objects */
	folio_mapping_free(m);
}
