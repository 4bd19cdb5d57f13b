/* SPDX-License-Identifier: MIT */
/*
 * nbd_engine: a cache over an NBD export. Run it with the export's URI,
 * for instance under a captive nbdkit:
 *   nbdkit -U - memory size=64M --run './nbd_engine "$uri"'
 */
#include <stdio.h>
#include <string.h>

#include <folio_state.h>
#include <folio_state_nbd.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s nbd+unix:///?socket=PATH\n", argv[0]);
		return 2;
	}
	/* Two connections if the server allows multi-conn; defaults else. */
	struct folio_nbd_opts nopts = {.sz = sizeof(nopts), .connections = 2};
	struct folio_engine *e;
	int r = folio_engine_nbd(&e, argv[1], &nopts);
	if (r) {
		fprintf(stderr, "folio_engine_nbd: %s\n", strerror(-r));
		return 1;
	}
	struct folio_nbd_info info = {.sz = sizeof(info)};
	folio_engine_nbd_info(e, &info);

	/* The export is the object: its whole size, 64 KiB folios. */
	struct folio_mapping_opts mopts = {
		.sz = sizeof(mopts),
		.max_folio_size = 64 << 10,
		.size = info.export_size,
		.engine = e,
	};
	struct folio_mapping *m;
	r = folio_mapping_new(&m, &mopts);
	if (r)
		goto out;

	const char msg[] = "hello, remote block device";
	if (folio_mapping_write(m, msg, sizeof(msg), 4096) != sizeof(msg)) {
		r = -1;
		goto out_map;
	}
	/* Durable on the server: one FUA write when it supports FUA. */
	r = folio_mapping_sync(m, NULL);
	if (r)
		goto out_map;

	/* Drop the cached copy and read it back from the server. */
	char back[sizeof(msg)];
	r = folio_mapping_invalidate(m, 0, 65536, 0);
	if (!r && (folio_mapping_read(m, back, sizeof(back), 4096) !=
			   sizeof(back) ||
		   memcmp(back, msg, sizeof(msg))))
		r = -1;
	folio_engine_nbd_info(e, &info);
	printf("%s: %llu NBD commands, %llu bytes written, durable %u\n",
	       r ? "FAILED" : "ok", (unsigned long long)info.commands,
	       (unsigned long long)info.bytes_written, info.durable);
out_map:
	folio_mapping_free(m);
out:
	folio_engine_free(e);
	return r ? 1 : 0;
}
