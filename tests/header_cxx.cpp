// SPDX-License-Identifier: MIT
// The public header from C++: it must compile there and its functions
// must link with C linkage (a missing extern "C" fails at link time).
#include "folio_state.h"
#include "folio_state_mem.h"
#include "folio_state_nbd.h"
#include "folio_state_rados.h"

#include <cerrno>
#include <cstdio>

int main()
{
	struct folio *f = nullptr;
	if (folio_new(&f, 0, 64 * 1024, 4096) != 0)
		return 1;
	int r = folio_set_dirty_uptodate(f, 0, 64 * 1024);
	if (r != (FOLIO_BECAME_DIRTY | FOLIO_BECAME_UPTODATE))
		return 1;
	folio_range runs[2];
	if (folio_take_dirty(f, runs, 2) != 1 || runs[0].len != 64 * 1024)
		return 1;
	bool clean = !folio_test_dirty(f);
	folio_put(f);
	struct folio_engine *e = nullptr;
	if (folio_engine_mem(&e, 1 << 20) != 0 ||
	    folio_engine_mem_poke(e, "x", 1, 0) != 0 ||
	    folio_engine_free(e) != 0)
		return 1;
	struct folio_nbd_opts nopts = {};
	nopts.sz = sizeof(nopts);
	if (folio_engine_nbd(&e, "http://x", &nopts) != -EINVAL)
		return 1;
	std::printf("folio API from C++: %s\n", clean ? "ok" : "FAILED");
	return clean ? 0 : 1;
}
