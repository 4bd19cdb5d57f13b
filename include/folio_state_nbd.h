/* SPDX-License-Identifier: MIT */
/*
 * libfolio-state: the NBD engine, a backing store on a Network Block
 * Device server reached through libnbd.
 *
 * It is one of the built-in engines (lib/engines/), a plug-in over the
 * engine layer of folio_state.h, with a header of its own because only
 * users of NBD need it. The library is built with it when Meson finds
 * libnbd; otherwise folio_engine_nbd() checks its arguments and returns
 * -ENOSYS.
 *
 * The conventions of folio_state.h hold here too: 0 on success, a
 * negative errno on failure, bad input changes nothing, sized structs
 * start with `size_t sz` and a struct larger than this library knows is
 * refused with -E2BIG unless its unknown tail is zero.
 */
#ifndef FOLIO_STATE_NBD_H
#define FOLIO_STATE_NBD_H

#include "folio_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* struct folio_nbd_opts.flags */
#define FOLIO_NBD_NO_FUA 0x1u /* never send FUA writes: the engine does not
			       * take FOLIO_IO_DURABLE (a sync then writes,
			       * waits, and flushes) */

/** Options of folio_engine_nbd(); a zero field takes its default. */
struct folio_nbd_opts {
	size_t sz;               /* sizeof(struct folio_nbd_opts) */
	unsigned connections;    /* connections when the server advertises
				  * multi-conn, 1..16 (default 4); one
				  * otherwise */
	unsigned depth;          /* requests in flight per connection,
				  * 1..1024 (default 64); more wait in
				  * the engine */
	unsigned flags;          /* FOLIO_NBD_* */
	unsigned timeout_ms;     /* a connection whose oldest request has
				  * had no reply for this long, or that
				  * takes this long to connect, is closed
				  * (default 30000, at most 3600000) */
	unsigned reconnect_tries; /* connection attempts per reconnect,
				   * 1..100 (default 3) */
};

/**
 * folio_engine_nbd() - asynchronous engine over an NBD export (libnbd).
 * @out:  receives the engine on success.
 * @uri:  an NBD URI as libnbd's nbd_connect_uri() takes it, restricted to
 *        nbd:// (TCP) and nbd+unix:// (a Unix socket:
 *        nbd+unix:///EXPORT?socket=PATH); TLS schemes (nbds://) are
 *        refused. Copied: it may be freed after the call.
 * @opts: NULL for the defaults, or sized options (see above).
 *
 * One export is one object: file position = device position = export
 * offset (a map() callback is not used). Every request is asynchronous:
 * submit() sends it (nbd_aio_pread / nbd_aio_pwrite; a request larger than
 * the server's maximum is cut into several commands; segments that follow
 * each other in memory go out as one command straight from or into them,
 * and a request of many short scattered segments through one bounce buffer
 * per command, so that a merged write is one command, not one per folio)
 * and returns. One thread
 * at a time drives the connections (poll() on their sockets, libnbd's
 * reads and writes) and delivers completions outside every lock, so a
 * completion may submit again: a thread in wait() when there is one (the
 * reply then wakes the thread that waits for it, with no hand-over), else
 * the engine's own thread, so requests nobody waits for complete too.
 * wait() returns 0 at once when nothing is in flight (requests whose
 * completion the calling thread is delivering do not count), else once
 * at least one request has completed; it never fails.
 *
 * Connections: one is opened at creation; when the server advertises
 * multi-conn (nbd_can_multi_conn) @opts->connections are opened and each
 * request goes to the connection with the fewest in flight. Beyond @depth
 * per connection, requests queue in the engine until a reply frees a slot.
 *
 * Reads past the export's end are zero-filled. A write that ends past the
 * export's end is refused with -ENOSPC. The export's size is fixed:
 * truncate(size) sends write-zeroes (NBD_CMD_WRITE_ZEROES; plain writes of
 * zeros when the server has none) from @size up to the end of what may
 * hold data (the export's end on the first truncate, afterwards the
 * highest byte written since), so that a later grow reads zeros there;
 * a size past the export's end is -EFBIG and changes nothing.
 *
 * Durability: when the server supports FUA (nbd_can_fua) and
 * FOLIO_NBD_NO_FUA is not given, the engine takes FOLIO_IO_DURABLE writes
 * (FOLIO_ENGINE_CAP_DURABLE): the write goes out with NBD_CMD_FLAG_FUA,
 * and when some plain write has completed since the last barrier an
 * NBD_CMD_FLUSH is sent alongside it (a FUA write makes only itself
 * durable); the request completes once both replied. flush() sends one
 * NBD_CMD_FLUSH: with one connection it covers every write replied to;
 * with several, the server advertised multi-conn, which obliges it to make
 * a flush on one connection cover the writes replied to on all of them.
 * A server without flush support gets none (flush() returns 0).
 *
 * Failures: an error the server replies with completes the request with
 * that -errno (a command cut in several fails with the first error). A
 * connection that drops (server gone, socket error) or whose oldest request
 * has waited @timeout_ms is closed and every request in flight on it
 * completes with -EIO; the requests stay dirty in the library, which
 * writes them again. Because a server that went away may have lost
 * writes it acknowledged, the next flush() (or durable write) after a
 * drop fails with -EIO: the library then writes again everything since
 * the last good flush. The connection is reopened by the next submit(),
 * flush() or truncate() that needs it: up to @reconnect_tries attempts,
 * each bounded by @timeout_ms, 10 ms apart doubling; when they all fail
 * the call returns -EIO, and for the next 100 ms calls fail at once with
 * -EIO instead of trying again (a writeback pass submits many requests;
 * each must not wait for the same dead server). Reconnecting on use, not
 * in the background, keeps a dead server from costing anything while
 * nothing is written, and puts the retry where its error can be reported.
 * A reopened connection must show the same export size, else -EIO.
 *
 * submit() refuses with -EINVAL the requests folio_engine_posix() refuses
 * (unknown op or flags, iovecs that do not add up, ranges past
 * FOLIO_MAX_POS), with -ENOSPC as above, with -ENOMEM, and with -EIO while
 * no connection can be opened.
 *
 * folio_engine_free() waits for every accepted request to complete (a dead
 * server's within @timeout_ms), stops the thread and closes the
 * connections.
 *
 * Context: creation from any thread: it connects (blocking, bounded by
 * @timeout_ms per connection) and starts the engine thread. Every callback
 * may run in any number of threads at once, including inside a completion;
 * flush(), truncate() and a submit() that reconnects sleep. Do not free the
 * engine from a completion.
 * Return: 0; -EINVAL for NULL @out or @uri, a URI that is not nbd:// or
 * nbd+unix://, or an option out of range or with an unknown flag; -E2BIG
 * for a larger @opts with a non-zero unknown tail; -ENOSYS when the
 * library was built without libnbd (arguments are still checked); the
 * connection's error (-ECONNREFUSED, -ENOENT, -ETIMEDOUT, ...; -EIO when
 * libnbd gives none); -EROFS for a read-only export; -EAGAIN when the
 * engine thread cannot start; -ENOMEM. Nothing is left allocated or
 * connected on failure.
 */
FOLIO_EXPORT int folio_engine_nbd(struct folio_engine **out, const char *uri,
				  const struct folio_nbd_opts *opts);

/** What folio_engine_nbd_info() reports. */
struct folio_nbd_info {
	size_t sz;              /* set by the caller */
	uint64_t export_size;   /* bytes */
	unsigned connections;   /* open or to be reopened */
	unsigned durable;       /* 1 when FOLIO_ENGINE_CAP_DURABLE is set */
	uint64_t commands;      /* NBD commands sent (reads, writes, zeroes,
				 * flushes) */
	uint64_t bytes_written; /* payload bytes of write commands */
	uint64_t bytes_read;    /* payload bytes of read commands */
	uint64_t flushes;       /* NBD_CMD_FLUSH sent */
	uint64_t reconnects;    /* connections reopened after a drop */
	uint64_t drops;         /* connections closed: dropped by the
				 * server, failed, or timed out */
};

/**
 * folio_engine_nbd_info() - the export's size and the engine's counters.
 * @e:    an engine from folio_engine_nbd().
 * @info: filled up to @info->sz (fields past it are left alone).
 *
 * Context: any thread, any time; the counters are a snapshot.
 * Return: 0; -EINVAL for NULL, an @info->sz below the first field, or an
 * engine that is not an NBD engine; -E2BIG for a larger @info with a
 * non-zero unknown tail; -ENOSYS without libnbd.
 */
FOLIO_EXPORT int folio_engine_nbd_info(const struct folio_engine *e,
				       struct folio_nbd_info *info);

#ifdef __cplusplus
}
#endif

#endif
