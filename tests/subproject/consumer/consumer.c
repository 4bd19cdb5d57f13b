/* SPDX-License-Identifier: MIT */
/* The subproject consumer: a mapping over the mem engine, written, synced
 * and read back, through the public headers only. */
#include <folio_state.h>
#include <folio_state_mem.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct folio_engine *e;
	struct folio_mapping *m;
	char buf[5000];

	if (folio_engine_mem(&e, 1 << 20))
		return 1;
	struct folio_mapping_opts opts = {.sz = sizeof(opts), .engine = e};
	if (folio_mapping_new(&m, &opts))
		return 2;
	memset(buf, 'a', sizeof(buf));
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	if (folio_mapping_write(m, buf, sizeof(buf), 100) != (ssize_t)sizeof(buf) ||
	    folio_mapping_sync(m, &cur))
		return 3;
	memset(buf, 0, sizeof(buf));
	if (folio_engine_mem_peek(e, buf, sizeof(buf), 100) ||
	    buf[0] != 'a' || buf[sizeof(buf) - 1] != 'a')
		return 4;
	if (folio_mapping_free(m) || folio_engine_free(e))
		return 5;
	printf("consumer ok: libfolio-state %d.%d as a subproject\n",
	       FOLIO_STATE_VERSION_MAJOR, FOLIO_STATE_VERSION_MINOR);
	return 0;
}
