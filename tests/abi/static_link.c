/* SPDX-License-Identifier: MIT */
/*
 * Links statically against libfolio-state.a while defining global
 * functions and variables named like the library's internal ones. Every
 * internal symbol of the archive must be local: if one were global, this
 * program would fail to link (multiple definition, the archive's single
 * member is pulled in by the API calls below) or, worse, the library would
 * call this program's function instead of its own.
 */
#include <folio_state.h>
#include <folio_state_mem.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Names of internal functions of the library, with other signatures. */
int bitmap_set_range(int x);
int index_insert(int x);
int index_init(int x);
int mapping_commit(int x);
int mapping_lookup(int x);
unsigned brlock_thread_stripe(void);
int engine_create(int x);
int mem_of(int x);
int rqb_init(int x);
int io_group_init(int x);
int brlock_init(int x);
int errseq_record(int x);
int folio_alloc(int x);
int mapping_map_extent(int x);
int mem_store_write(int x);

int bitmap_set_range(int x) { return x + 1; }
int index_insert(int x) { return x + 2; }
int index_init(int x) { return x + 3; }
int mapping_commit(int x) { return x + 4; }
int mapping_lookup(int x) { return x + 5; }
unsigned brlock_thread_stripe(void) { return 12345; }
int engine_create(int x) { return x + 6; }
int mem_of(int x) { return x + 7; }
int rqb_init(int x) { return x + 8; }
int io_group_init(int x) { return x + 9; }
int brlock_init(int x) { return x + 10; }
int errseq_record(int x) { return x + 11; }
int folio_alloc(int x) { return x + 12; }
int mapping_map_extent(int x) { return x + 13; }
int mem_store_write(int x) { return x + 14; }

/* An internal variable's name too (the old index test hook). */
unsigned index_debug_fail_alloc = 1;

static int own_functions(void)
{
	int sum = bitmap_set_range(0) + index_insert(0) + index_init(0) +
		  mapping_commit(0) + mapping_lookup(0) + engine_create(0) +
		  mem_of(0) + rqb_init(0) + io_group_init(0) + brlock_init(0) +
		  errseq_record(0) + folio_alloc(0) + mapping_map_extent(0) +
		  mem_store_write(0);
	return sum == 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 +
			      14 &&
	       brlock_thread_stripe() == 12345 && index_debug_fail_alloc == 1;
}

int main(void)
{
	struct folio_engine *e;
	struct folio_mapping *m;
	char buf[8192];

	if (!own_functions()) {
		fprintf(stderr, "FAIL: the program's own functions\n");
		return 1;
	}
	/* The API, through the mapping (index, bitmap, engine, commit and
	 * brlock code of the library all run). */
	if (folio_engine_mem(&e, 1 << 20)) {
		fprintf(stderr, "FAIL: folio_engine_mem\n");
		return 1;
	}
	struct folio_mapping_opts opts;
	memset(&opts, 0, sizeof(opts));
	opts.sz = sizeof(opts);
	opts.engine = e;
	if (folio_mapping_new(&m, &opts)) {
		fprintf(stderr, "FAIL: folio_mapping_new\n");
		return 1;
	}
	memset(buf, 'x', sizeof(buf));
	folio_errseq_t cur = folio_mapping_err_cursor(m);
	if (folio_mapping_write(m, buf, sizeof(buf), 4096) != (ssize_t)sizeof(buf) ||
	    folio_mapping_sync(m, &cur) != 0) {
		fprintf(stderr, "FAIL: write + sync\n");
		return 1;
	}
	memset(buf, 0, sizeof(buf));
	if (folio_mapping_read(m, buf, sizeof(buf), 4096) != (ssize_t)sizeof(buf) ||
	    buf[0] != 'x' || buf[sizeof(buf) - 1] != 'x') {
		fprintf(stderr, "FAIL: read back\n");
		return 1;
	}
	if (folio_mapping_free(m) || folio_engine_free(e)) {
		fprintf(stderr, "FAIL: free\n");
		return 1;
	}
	/* Still ours after the library ran. */
	if (!own_functions()) {
		fprintf(stderr, "FAIL: the program's own functions after the API\n");
		return 1;
	}
	printf("ok: linked statically with internal-looking names of its own\n");
	return 0;
}
