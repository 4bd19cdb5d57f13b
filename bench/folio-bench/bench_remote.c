/* SPDX-License-Identifier: MIT */
/*
 * Remote stores for folio-bench: --engine nbd (an export named by --uri,
 * which the caller's server serves; bench/remote-bench.sh starts one), and
 * what the read workloads read: the store, filled once before their cold
 * rounds so that every round's new engine and mapping read data that is
 * there rather than a RADOS object's holes, which need no I/O; or, with a
 * local engine, their temporary file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "folio_state_nbd.h"

int bench_nbd_engine(struct bench_ctx *c, struct folio_engine **out,
		     uint64_t capacity)
{
	int r = folio_engine_nbd(out, c->o.uri, NULL);
	if (r)
		return r;
	struct folio_nbd_info i = {.sz = sizeof(i)};
	r = folio_engine_nbd_info(*out, &i);
	if (!r && i.export_size < capacity) {
		char s1[32], s2[32];
		fprintf(stderr, "folio-bench: the export %s holds %s, the "
				"workload needs %s (--size)\n",
			c->o.uri, bench_fmt_size(s1, sizeof(s1), i.export_size),
			bench_fmt_size(s2, sizeof(s2), capacity));
		r = -EFBIG;
	}
	if (r) {
		folio_engine_free(*out);
		*out = NULL;
	}
	return r;
}

int bench_remote_fill(struct bench_ctx *c, uint64_t size)
{
	struct bench_engine be;
	int err = 0;
	if (c->o.engine == BENCH_ENGINE_RADOS) {
		/* A fresh object, named so that the workload's later engines
		 * open it again; bench_remote_drop() removes it. */
		err = bench_rados_engine(&be.engine, NULL, c->store,
					 sizeof(c->store));
		if (err) {
			fprintf(stderr, "folio-bench %s: cannot create the "
					"rados engine: %s\n",
				c->cmd->name, strerror(-err));
			return err;
		}
		be.mem = NULL;
		be.dm = NULL;
		be.keep_store = true;
	} else {
		err = bench_engine_open(c, &be, c->o.engine, -1, size);
		if (err)
			return err;
	}
	struct folio_mapping_opts mo = {.sz = sizeof(mo),
					.block_size = c->o.block_size,
					.max_folio_size = c->o.folio_size,
					.size = size, .engine = be.engine};
	struct folio_mapping *m = NULL;
	const size_t chunk = MIB;
	unsigned char *buf = malloc(chunk);
	err = buf ? folio_mapping_new(&m, &mo) : -ENOMEM;
	uint64_t seed = 0x5eedf111u;
	for (uint64_t at = 0; !err && at < size; at += chunk) {
		size_t n = (size_t)(size - at < chunk ? size - at : chunk);
		for (size_t k = 0; k + 8 <= n; k += 8) {
			uint64_t x = bench_rand(&seed);
			memcpy(buf + k, &x, 8);
		}
		ssize_t w = folio_mapping_write(m, buf, n, at);
		if (w != (ssize_t)n)
			err = w < 0 ? (int)w : -EIO;
		/* Write back as it goes: a whole --size of dirty folios
		 * would be --size of memory. */
		if (!err && (at / chunk) % 64 == 63)
			err = folio_mapping_sync(m, NULL);
		bench_progress("filling the %s store: %llu/%llu MiB",
			       bench_engine_name(c->o.engine),
			       (unsigned long long)(at / MIB),
			       (unsigned long long)(size / MIB));
	}
	bench_progress_done();
	if (!err)
		err = folio_mapping_sync(m, NULL);
	if (m) {
		int f = folio_mapping_free(m);
		if (!err)
			err = f;
	}
	free(buf);
	bench_engine_close(&be);
	if (err) {
		fprintf(stderr, "folio-bench %s: filling the %s store: %s\n",
			c->cmd->name, bench_engine_name(c->o.engine),
			strerror(-err));
		bench_remote_drop(c);
	}
	return err;
}

int bench_read_data(struct bench_ctx *c, const char *skipped, int *fd)
{
	const struct bench_opts *o = &c->o;
	*fd = -1;
	if (bench_engine_remote(o->engine)) {
		bench_note(c, "%s engine: a remote store, no file: %s skipped",
			   bench_engine_name(o->engine), skipped);
		return bench_remote_fill(c, o->size);
	}
	if (o->given & BOPT_ENGINE)
		bench_note(c, "--engine %s: the file variants run over every "
			      "local engine anyway; --engine picks a remote "
			      "store (nbd, rados)",
			   bench_engine_name(o->engine));
	*fd = bench_tmpfile(o->dir);
	if (*fd < 0)
		return -EIO;
	return bench_prefill(*fd, o->size);
}

void bench_remote_drop(struct bench_ctx *c)
{
	if (!c->store[0])
		return;
	struct folio_engine *e;
	if (!bench_rados_engine(&e, c->store, NULL, 0)) {
		bench_rados_engine_remove(e);
		folio_engine_free(e);
	}
	c->store[0] = 0;
}
