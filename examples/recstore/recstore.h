/* SPDX-License-Identifier: MIT */
/*
 * recstore: a fixed-size record store over one file, built on a
 * libfolio-state mapping. An example of embedding the library in a storage
 * engine: records go into the page cache with folio_mapping_write(), come
 * out with folio_mapping_read(), and a checkpoint is folio_mapping_sync().
 *
 * Layout: record i lives at byte i * record_size, back to back, with no
 * header. Records smaller than a 4 KiB block share blocks, so a checkpoint
 * writes only the blocks that changed records touch, not whole pages or
 * folios.
 *
 * Conventions (the library's): 0 or a count on success, a negative errno
 * on failure; out-parameters are written only on success.
 *
 * A never-written record reads as zeros (the store keeps no allocation
 * map, so it cannot tell "never written" from "written as zeros").
 *
 * Records are not atomic: a put that fails part way (a record that spans
 * two folios, where the second one cannot be read) may leave the record
 * partly updated in the cache, as pwrite(2) would in a file. Records whose
 * size divides the folio size never span two folios.
 *
 * Thread rules: one thread at a time per store (the mapping underneath is
 * thread-safe, but the store's counters are not).
 */
#ifndef RECSTORE_H
#define RECSTORE_H

#include <stddef.h>
#include <stdint.h>

#include <folio_state.h>

#define RECSTORE_MAX_RECORD_SIZE 65536u

enum recstore_engine {
	RECSTORE_ENGINE_POSIX = 0, /* pread/pwrite, synchronous */
	RECSTORE_ENGINE_URING = 1, /* io_uring; posix where unavailable
				    * or under valgrind */
};

struct recstore_opts {
	/* Capacity in records. 0: as many as the file already holds (the
	 * file must then exist; others are created). A file holding more is
	 * never cut: the capacity grows to cover it. */
	uint64_t nrecords;
	enum recstore_engine engine; /* recstore_open() only */
	/* Smallest folio, a power of two from 4096 to 2 MiB; default 64 KiB.
	 * Larger folios mean fewer cache objects; per-block dirty state
	 * keeps checkpoints from writing more than the dirty blocks. */
	size_t folio_size;
	/* After a successful checkpoint, drop the (then clean) cache when it
	 * holds more than this many bytes. 0: never drop. */
	uint64_t cache_limit;
	/* Bytes of folio data the store may hold at any time, dirty or not:
	 * the store gets a folio pool of this budget of its own, which
	 * reclaims and writes back as it fills. At least one folio; 0: no
	 * pool (the cache grows with the data touched). */
	uint64_t budget;
};

struct recstore;

/**
 * recstore_open() - open or create the store in file @path.
 * @record_size: 1..RECSTORE_MAX_RECORD_SIZE bytes. Not stored in the file:
 *               reopen with the same value.
 * @opts:        NULL for defaults (then the file must exist and not be
 *               empty).
 * Return: 0; -EINVAL for NULL @out/@path, a bad record or folio size, or a
 * capacity of 0; -EFBIG when the capacity passes 2^62 bytes; open(2)'s
 * errors (-ENOENT when opts->nrecords is 0 and there is no file); -ENOMEM.
 */
int recstore_open(struct recstore **out, const char *path, size_t record_size,
		  const struct recstore_opts *opts);

/**
 * recstore_open_engine() - open a store over a caller's engine (e.g. a mem
 * engine with fault injection, for tests). The caller keeps the engine and
 * frees it after recstore_close().
 * @size: current size of the engine's backing object in bytes.
 * Return: as recstore_open() (opts->engine is ignored).
 */
int recstore_open_engine(struct recstore **out, struct folio_engine *engine,
			 uint64_t size, size_t record_size,
			 const struct recstore_opts *opts);

/**
 * recstore_put() - store @rec (record_size bytes) as record @id, in the
 * cache; recstore_checkpoint() makes it durable.
 * Return: 0; -EINVAL for NULL; -ERANGE when @id >= capacity; the engine's
 * error when a block the record partly covers cannot be read; -ENOMEM.
 */
int recstore_put(struct recstore *rs, uint64_t id, const void *rec);

/**
 * recstore_get() - copy record @id into @rec (record_size bytes).
 * Return: 0; -EINVAL; -ERANGE; the engine's read error.
 */
int recstore_get(struct recstore *rs, uint64_t id, void *rec);

/**
 * recstore_scan() - call @fn(id, rec, @arg) for records @first ..
 * @first + @count - 1 in order. @rec is valid only during the call.
 * Return: 0; the first non-zero value @fn returns (the scan stops); -EINVAL
 * for NULL @rs or @fn; -ERANGE when the range passes the capacity; read
 * errors; -ENOMEM.
 */
int recstore_scan(struct recstore *rs, uint64_t first, uint64_t count,
		  int (*fn)(uint64_t id, const void *rec, void *arg),
		  void *arg);

/**
 * recstore_checkpoint() - make every put so far durable: write back the
 * dirty blocks and flush. On failure the unwritten data stays dirty in the
 * cache, and the next checkpoint writes it again; each error is reported
 * by one checkpoint only.
 * Return: 0 (everything put before the call is in the file and flushed);
 * the write or flush error; -EINVAL for NULL.
 */
int recstore_checkpoint(struct recstore *rs);

struct recstore_stats {
	uint64_t nrecords;           /* capacity */
	size_t record_size;
	enum recstore_engine engine; /* the one in use */
	uint64_t puts, gets, scanned;
	uint64_t checkpoints, failed_checkpoints;
	/* bytes_written (by puts) vs wb_bytes (sent to the file) is the
	 * write amplification. */
	struct folio_mapping_stats cache;
	/* With a budget: the pool's peak is not kept, so the store records
	 * the highest cached_bytes it saw after each put and get. */
	uint64_t budget, cached_max;
};

/** recstore_stats() - fill @st. Return: 0; -EINVAL for NULL. */
int recstore_stats(struct recstore *rs, struct recstore_stats *st);

/**
 * recstore_close() - checkpoint, then free the store (and the file and
 * engine recstore_open() made). When the checkpoint fails nothing is freed
 * and its error is returned: retry later, or give up the unsaved puts with
 * recstore_discard(). NULL is a no-op.
 * Return: 0; the checkpoint's error (the store stays open); close(2)'s
 * error (the store is freed anyway).
 */
int recstore_close(struct recstore *rs);

/**
 * recstore_discard() - free the store, throwing away puts not yet
 * checkpointed. NULL is a no-op. Return: 0; close(2)'s error (freed anyway).
 */
int recstore_discard(struct recstore *rs);

#endif /* RECSTORE_H */
