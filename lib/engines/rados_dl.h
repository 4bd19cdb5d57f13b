/* SPDX-License-Identifier: MIT */
/*
 * librados, loaded at run time by the RADOS engine's first creation.
 *
 * Linking libfolio-state against librados would make every program using
 * the library load librados and its dependencies (libceph-common, the C++
 * runtime, boost) and run their static constructors: tens of MiB of RSS
 * and a slower start for users who never touch Ceph. So the engine is
 * built against librados' header only, and resolves the functions it
 * calls with dlopen()/dlsym() when it is first used.
 */
#ifndef FOLIO_ENGINES_RADOS_DL_H
#define FOLIO_ENGINES_RADOS_DL_H

#include <rados/librados.h>

/* Every librados function the engine calls. */
#define RADOS_DL_FUNCS(X)                                                   \
	X(aio_create_completion2) X(aio_get_return_value) X(aio_release)    \
	X(aio_read) X(aio_write) X(aio_read_op_operate)                     \
	X(aio_write_op_operate) X(aio_remove) X(aio_wait_for_complete)      \
	X(conf_read_file) X(conf_set) X(connect) X(create)                  \
	X(create_read_op) X(create_write_op) X(getxattr) X(ioctx_create)    \
	X(ioctx_destroy) X(read_op_read) X(release_read_op)                 \
	X(release_write_op) X(setxattr) X(shutdown) X(trunc)                \
	X(write_op_operate)                                                 \
	X(write_op_setxattr) X(write_op_write)

struct rados_dl {
#define RADOS_DL_FIELD(name) __typeof__(rados_##name) *name;
	RADOS_DL_FUNCS(RADOS_DL_FIELD)
#undef RADOS_DL_FIELD
};

/* The table, loading librados.so.2 on the first call (thread-safe; the
 * library stays loaded). NULL when it cannot be loaded or lacks a
 * function (the reason goes to stderr once). */
const struct rados_dl *rados_dl_get(void);

#endif
