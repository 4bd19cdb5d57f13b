/* SPDX-License-Identifier: MIT */
/* librados resolved at run time: see rados_dl.h for why. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "engines/rados_dl.h"

static struct rados_dl table;
static const struct rados_dl *loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	/* RTLD_NODELETE: librados' threads and atexit handlers must not
	 * outlive its code, so it is never unloaded. */
	void *h = dlopen("librados.so.2", RTLD_NOW | RTLD_NODELETE);
	if (!h) {
		fprintf(stderr, "libfolio-state: RADOS engine: %s\n", dlerror());
		return;
	}
	void *sym;
#define RADOS_DL_LOAD(name)                                               \
	if (!(sym = dlsym(h, "rados_" #name))) {                          \
		fprintf(stderr, "libfolio-state: RADOS engine: librados "  \
			"lacks rados_" #name "\n");                       \
		return;                                                   \
	}                                                                 \
	memcpy(&table.name, &sym, sizeof(sym));
	RADOS_DL_FUNCS(RADOS_DL_LOAD)
#undef RADOS_DL_LOAD
	loaded = &table;
}

const struct rados_dl *rados_dl_get(void)
{
	pthread_once(&once, load);
	return loaded;
}
