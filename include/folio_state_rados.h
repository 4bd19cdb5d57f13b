/* SPDX-License-Identifier: MIT */
/*
 * libfolio-state: the RADOS engine, a mapping's backing object kept in a
 * Ceph cluster through librados.
 *
 * It is one of the built-in engines (lib/engines/), a plug-in over the
 * engine layer of folio_state.h, with a header of its own because it
 * exists only where librados does. The library is built with it when
 * Meson finds librados (Debian: librados-dev); otherwise
 * folio_engine_rados() checks its arguments and returns -ENOSYS. This
 * header does not include librados.h: a cluster handle is passed as the
 * `void *` a rados_t is.
 *
 * The conventions of folio_state.h hold here too: 0 on success, a
 * negative errno on failure, bad input changes nothing, sized structs
 * start with `size_t sz`, and a sized struct larger than this library
 * knows is refused with -E2BIG unless its unknown tail is zero.
 *
 * Layout in the pool. One engine is one striped object named by a
 * prefix P: its bytes [i * S, (i + 1) * S) live in the RADOS object
 * "P.%016" PRIx64 of i (16 lower-case hex digits, so `rados ls` sorts
 * them), S being the stripe object size; an object that does not exist
 * reads as zeros, and so do bytes past the end of a shorter one. The
 * size of the striped object is the xattr "folio.size" (decimal ASCII)
 * of the header object named P itself, which also carries
 * "folio.object_size" (decimal) so that reopening with another stripe
 * size is refused, and "folio.high_water" (decimal): no data object holds
 * a byte at or past it, so an engine opening the object trims what a
 * crashed one left between the size and the mark. doc/design.md, "RADOS engine", explains the order of
 * updates that keeps the size backed by data across a crash.
 */
#ifndef FOLIO_STATE_RADOS_H
#define FOLIO_STATE_RADOS_H

#include "folio_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default stripe object size (RBD's default object size). */
#define FOLIO_RADOS_DEFAULT_OBJECT_SIZE (UINT64_C(4) << 20)
/* Default number of RADOS operations in flight per engine. */
#define FOLIO_RADOS_DEFAULT_DEPTH 64u
/* Timeout set on a cluster handle the engine creates, in seconds. */
#define FOLIO_RADOS_DEFAULT_TIMEOUT 30u

/** Options of folio_engine_rados(). Zeroed fields take the defaults. */
struct folio_rados_opts {
	size_t sz;               /* sizeof(struct folio_rados_opts) */
	/* A connected rados_t the caller owns and keeps until after
	 * folio_engine_free(); or NULL to have the engine create, connect
	 * and finally shut down its own from @conf_path and @client. */
	void *cluster;
	const char *conf_path;   /* ceph.conf; NULL: librados' search path
				  * (only without @cluster) */
	const char *client;      /* client id ("admin" for client.admin);
				  * NULL: "admin" (only without @cluster) */
	const char *pool;        /* required: the pool's name */
	const char *prefix;      /* required: the object's name, 1..200
				  * bytes, no NUL inside */
	uint64_t object_size;    /* stripe object size: a power of two in
				  * 4 KiB..1 GiB; 0: 4 MiB */
	unsigned depth;          /* RADOS operations in flight, 1..1024;
				  * 0: FOLIO_RADOS_DEFAULT_DEPTH */
	unsigned timeout;        /* seconds, 1..3600, for an engine-created
				  * handle (rados_osd_op_timeout and
				  * client_mount_timeout); 0: 30. Must be 0
				  * with @cluster. */
};

/**
 * folio_engine_rados() - an engine over one striped RADOS object.
 * @out:  receives the engine on success.
 * @opts: see struct folio_rados_opts; required.
 *
 * Creation opens an I/O context on @opts->pool and reads the header
 * object: its size becomes folio_engine_rados_size() (0 and nothing
 * written when the object is new; the header is written by the first
 * operation that sets a size).
 *
 * Requests: submit() splits a request at stripe object boundaries into
 * one RADOS operation per object (a write op or read op holding one
 * extent per iovec segment, so each object's part is atomic) and
 * completes the request once all of them have, with the first error when
 * one failed. It never blocks: beyond @opts->depth operations (or 64 MiB)
 * in flight, operations wait in a FIFO queue and start as others
 * complete. Reads zero-fill missing objects and bytes past an object's
 * end and always transfer the full length. A write that ends past the
 * stored size completes only after the header's size has been raised to
 * cover it (one header update in flight at a time, covering every write
 * waiting then); a failed header update fails those writes, whose data
 * may have landed (the library writes them again). Requests with an
 * unknown op or flag, iovecs that do not add up to len, or a range past
 * FOLIO_MAX_POS are refused with -EINVAL; -ENOMEM; -ESHUTDOWN while the
 * engine is being freed.
 *
 * Durability: an OSD acknowledges a write only once every replica has it
 * on stable storage, so a completed write is durable. The engine takes
 * FOLIO_IO_DURABLE writes (FOLIO_ENGINE_CAP_DURABLE) as ordinary ones,
 * and flush() only waits for the writes in flight when it was called
 * (they are durable when it returns) and returns 0. truncate() (with no
 * request in flight, as the library guarantees) lowers the stored size
 * first, then truncates the object holding the new end and removes the
 * objects past it; growing first clears what a failed shrink left past
 * the old size, then raises the size. Its errors: the header update's
 * (nothing changed), or -EINVAL past FOLIO_MAX_POS.
 *
 * Failures: there is no wait(); operations complete on librados' threads.
 * An OSD or monitor that stops answering fails operations after the
 * handle's rados_osd_op_timeout (set to @opts->timeout on an
 * engine-created handle; a caller-owned handle without that option set
 * may wait forever, so set it before rados_connect()) with -ETIMEDOUT.
 *
 * Context: creation from any thread; it talks to the cluster (connects
 * when it creates the handle) and so sleeps, bounded by the timeout.
 * Every callback may run in any number of threads at once. One engine
 * per prefix at a time: two engines (or processes) on the same prefix
 * would race on the size. folio_engine_free() waits for every operation
 * in flight (bounded by the timeout), then closes the I/O context and
 * shuts down an engine-created handle.
 * Return: 0; -EINVAL for NULL @out or @opts, a missing @opts->pool or
 * @opts->prefix, a prefix too long, an @opts->object_size that is not a
 * power of two in range, @opts->depth or @opts->timeout out of range, a
 * @opts->timeout with @opts->cluster, or a header whose object size
 * differs from @opts->object_size (or is unreadable); -E2BIG (see
 * above); -ENOSYS when the library was built without librados (arguments
 * are still checked); -ENOENT for a pool that does not exist; librados'
 * error for a failed connection or header read (-ETIMEDOUT when the
 * cluster does not answer); -ENOMEM. On failure nothing is left
 * allocated and a caller's handle is untouched.
 */
FOLIO_EXPORT int folio_engine_rados(struct folio_engine **out,
				    const struct folio_rados_opts *opts);

/**
 * folio_engine_rados_size() - the striped object's stored size.
 * @e:    a RADOS engine.
 * @size: receives the size the header holds as far as this engine knows
 *        (read at creation, then kept up to date by its own updates):
 *        what to pass as folio_mapping_opts.size.
 *
 * Context: any thread; takes the engine's lock briefly.
 * Return: 0; -EINVAL for NULL arguments or an engine that is not a RADOS
 * engine (always, in a build without librados).
 */
FOLIO_EXPORT int folio_engine_rados_size(struct folio_engine *e,
					 uint64_t *size);

#ifdef __cplusplus
}
#endif

#endif
