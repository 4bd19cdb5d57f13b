/* SPDX-License-Identifier: MIT */
/*
 * libfolio-state: the mem engine, an in-memory backing store for tests
 * (the library's own and its users'). It injects faults, checks device
 * positions against its own map, completes requests late and out of order,
 * and counts everything.
 *
 * It is one of the built-in engines (lib/engines/), a plug-in over the
 * engine layer of folio_state.h, with a header of its own because only
 * tests need it.
 *
 * The conventions of folio_state.h hold here too: 0 or a count on success,
 * a negative errno on failure, bad input changes nothing, sized structs
 * start with `size_t sz`, and each function documents its parameters
 * (@name:), Context: and Return:, and a sized struct larger than this
 * library knows is refused with -E2BIG unless its unknown tail is zero.
 * Every function here refuses an engine that is not a mem engine with
 * -EINVAL.
 */
#ifndef FOLIO_STATE_MEM_H
#define FOLIO_STATE_MEM_H

#include "folio_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest capacity of a mem engine. */
#define FOLIO_MEM_MAX_CAPACITY (UINT64_C(1) << 40)

/**
 * folio_engine_mem() - in-memory backing store for tests and users' own
 * tests: it injects faults (folio_engine_mem_inject()), checks device
 * positions against its own map (folio_engine_mem_set_map()) and completes
 * requests inline, when polled, or from a thread in a pseudo-random order
 * (folio_engine_mem_set_mode()); with a volatile write cache
 * (folio_engine_mem_set_volatile()) it models power cuts
 * (folio_engine_mem_power_cut()) for crash-safety tests.
 * @out:      receives the engine on success.
 * @capacity: the largest size the store may reach, 1..FOLIO_MEM_MAX_CAPACITY
 *            bytes. Memory is allocated in 64 KiB chunks as data is
 *            written, so an unused capacity costs (almost) nothing.
 *
 * The store has a size, initially 0. Reads of bytes at file positions at
 * or past the size give zeros; a write extends the size to the end of the
 * bytes it wrote. Data lives at device positions (io->dev_pos); without a
 * map, dev_pos must equal pos. Checks, in order: a request whose dev_pos
 * disagrees with the map fails with -EIO (counted as misdirected); a write
 * ending past @capacity fails with -ENOSPC and writes nothing; then the
 * fault rules. A request with an unknown op, iovecs that do not add up to
 * len, or a range past FOLIO_MAX_POS is refused with -EINVAL. Without the
 * volatile write cache (the default) a completed write is durable at
 * once, flush() only counts (and fails when a rule says so), and
 * truncate() zeroes and frees the store past the new size and sets the
 * size (-EFBIG past @capacity); with it, see
 * folio_engine_mem_set_volatile(). The
 * engine takes FOLIO_IO_DURABLE writes (FOLIO_ENGINE_CAP_DURABLE): when
 * such a write is performed (at submit in SYNC mode, when it completes
 * in POLL and THREAD modes) and transferred in full, a flush follows at
 * once, exactly as a flush() call would run there (counted in flushes,
 * matched by FOLIO_MEM_OP_FLUSH rules, failing while powered off), and
 * its error is the write's result; a write that fails or stops short
 * runs no flush. A request with other flags than FOLIO_EXTENT_* and
 * FOLIO_IO_DURABLE, or a durable read, is refused with -EINVAL. The
 * engine's wait() never fails: it returns 0 at once when nothing is in
 * flight, else once at least one request has completed (its completion
 * returned). Requests whose completion the calling thread is itself
 * delivering do not count as in flight, so wait() inside a completion
 * does not wait for itself.
 *
 * submit() also refuses with -ENOMEM when it cannot hold a request (POLL
 * and THREAD modes) and with -ESHUTDOWN while the engine is being freed.
 *
 * Context: creation from any thread (it allocates). Every mem function and
 * callback is safe to call from any number of threads at once; each takes
 * the engine's mutex for its bookkeeping. Completions are never delivered
 * under that lock, so a completion may submit again. folio_engine_free()
 * completes requests still held with -ECANCELED, stops the completion
 * thread and frees everything; no other call on the engine may be running
 * then, and it must not run inside a completion.
 *
 * Return: 0; -EINVAL for NULL @out or a @capacity of 0 or above
 * FOLIO_MEM_MAX_CAPACITY; -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_mem(struct folio_engine **out,
				  uint64_t capacity);

/* Which requests a mem fault applies to (struct folio_mem_fault.ops). */
#define FOLIO_MEM_OP_READ (1u << FOLIO_IO_READ)
#define FOLIO_MEM_OP_WRITE (1u << FOLIO_IO_WRITE)
#define FOLIO_MEM_OP_FLUSH 0x4u
#define FOLIO_MEM_OP_TRUNCATE 0x8u

/**
 * struct folio_mem_fault - a deterministic fault rule for the mem engine.
 *
 * A read or write request matches when its op is in @ops and its file
 * range [io->pos, io->pos + io->len) overlaps [@pos, @pos + @len) (@len 0:
 * anywhere; a zero-length request matches when io->pos is in the range).
 * Every flush() or truncate() call matches a rule with FOLIO_MEM_OP_FLUSH
 * or FOLIO_MEM_OP_TRUNCATE in @ops, whatever the range. Each rule counts
 * the calls that match it and fires on matches @skip + 1 to @skip +
 * @count (@count 0: on every match after the first @skip). When several
 * rules fire on one call, the one added first decides. Rules see only
 * requests that passed the map and capacity checks, and count them when
 * they are submitted, so the submission order decides, not the completion
 * order.
 */
struct folio_mem_fault {
	size_t sz;        /* sizeof(struct folio_mem_fault) */
	unsigned ops;     /* FOLIO_MEM_OP_* mask */
	uint64_t pos;     /* file range a read or write must overlap; */
	uint64_t len;     /* len 0: anywhere */
	uint64_t skip;    /* let this many matching calls through first */
	uint64_t count;   /* then fire this many times (0: forever) */
	int error;        /* -4095..-1: complete with this error, nothing
			   * transferred (flush/truncate return it and
			   * change nothing); or 0 for ... */
	size_t short_len; /* ... a short transfer: exactly the first
			   * min(short_len, io->len) bytes are transferred
			   * and that count is the result (reads and writes
			   * only; the other bytes are left untouched) */
	/* Added later: callers whose @sz ends before it get 0. */
	unsigned flags;   /* FOLIO_MEM_FAULT_*; 0: a failing flush changes
			   * nothing, a failing write transfers nothing */
};

/*
 * struct folio_mem_fault.flags: a flush this rule fails also discards the
 * volatile write cache (everything completed and not yet durable), as
 * Linux's fdatasync() may drop the dirty pages it failed to write; reads
 * then see the durable store again. Without it, a failing flush leaves
 * the cache pending and a later successful flush makes it durable.
 */
#define FOLIO_MEM_FAULT_LOSE 0x1u
/*
 * struct folio_mem_fault.flags: a write this rule fails with @error is
 * performed in full first (the store holds its bytes, and its size grew),
 * and only its completion reports @error: a remote store that applied
 * the write and lost the reply (an NBD reply cut by a dropped connection,
 * a RADOS op timing out after the OSD applied it). Only with @error and
 * FOLIO_MEM_OP_WRITE in @ops (and neither FLUSH nor TRUNCATE, whose
 * failures this flag does not describe).
 */
#define FOLIO_MEM_FAULT_APPLIED 0x2u

/**
 * folio_engine_mem_inject() - add a fault rule (up to 64).
 * @e:     a mem engine.
 * @fault: the rule, copied. A larger struct than this library knows is
 *         accepted when its unknown tail is zero (else -E2BIG).
 *
 * Context: any thread, any time; requests already submitted keep the
 * fate they were given. Takes the engine's mutex; no I/O.
 * Return: 0; -EINVAL for NULL, a non-mem engine, @fault->sz smaller than
 * the struct before @flags was added (offsetof(struct folio_mem_fault,
 * flags) on common ABIs; such older structs work, with @flags 0), an
 * empty @ops or one with unknown bits, @error outside
 * -4095..0, both @error and @short_len set or neither (a rule that would do
 * nothing), a short transfer rule whose @ops includes FLUSH or TRUNCATE,
 * @pos + @len overflowing, unknown @flags bits, FOLIO_MEM_FAULT_LOSE
 * without FOLIO_MEM_OP_FLUSH in @ops, or FOLIO_MEM_FAULT_APPLIED without
 * @error or with @ops other than FOLIO_MEM_OP_WRITE; -E2BIG for a larger @fault with non-zero
 * unknown bytes; -ENOSPC when 64 rules exist.
 */
FOLIO_EXPORT int folio_engine_mem_inject(struct folio_engine *e,
					 const struct folio_mem_fault *fault);
/**
 * folio_engine_mem_clear_faults() - drop every fault rule.
 * @e: a mem engine.
 * Context: any thread, any time; requests already submitted keep the fate
 * they were given. Takes the engine's mutex; no I/O.
 * Return: 0; -EINVAL for NULL or a non-mem engine.
 */
FOLIO_EXPORT int folio_engine_mem_clear_faults(struct folio_engine *e);

/* Completion modes of the mem engine. */
enum folio_mem_mode {
	FOLIO_MEM_SYNC = 0,   /* complete inside submit() (default) */
	FOLIO_MEM_POLL = 1,   /* hold requests; wait() completes them, in a
			       * pseudo-random order */
	FOLIO_MEM_THREAD = 2, /* a completion thread completes them after a
			       * pseudo-random delay, in a pseudo-random order */
};

/**
 * folio_engine_mem_set_mode() - choose how requests complete.
 * @e:    a mem engine.
 * @mode: FOLIO_MEM_SYNC, FOLIO_MEM_POLL or FOLIO_MEM_THREAD.
 * @seed: seeds the pseudo-random choices (which held requests complete
 *        next, how many, the delays), so single-threaded POLL runs are
 *        reproducible.
 *
 * Requests already held are first completed (by the caller, with the
 * outcome decided when they were submitted); then the new mode applies.
 * In POLL mode each wait() completes between one and 64 held requests,
 * picked pseudo-randomly (several threads may wait() at once). In THREAD
 * mode an engine thread completes one to four held requests at a time
 * after delays of up to 100 us; wait() then sleeps until some request
 * completes. Held requests' data moves when they complete, not when they
 * are submitted, as with a device.
 *
 * Context: any thread, while other threads submit and wait; one switch
 * at a time; not from a completion delivered by the completion thread.
 * It completes held requests itself and may start or stop (join) the
 * completion thread, so it sleeps.
 *
 * Return: 0; -EINVAL for NULL, a non-mem engine or an unknown mode;
 * -EBUSY while another switch runs or the engine is being freed; -EDEADLK
 * from the completion thread; -EAGAIN when the thread cannot start
 * (nothing changed then).
 */
FOLIO_EXPORT int folio_engine_mem_set_mode(struct folio_engine *e,
					   enum folio_mem_mode mode,
					   uint64_t seed);

/* Largest extent size of folio_engine_mem_set_map(). */
#define FOLIO_MEM_MAX_EXTENT (UINT64_C(1) << 40)

/**
 * folio_engine_mem_set_map() - give the mem engine a map() callback.
 * @e:           a mem engine.
 * @extent_size: extent size, a power of two from 512 to
 *               FOLIO_MEM_MAX_EXTENT; 0 removes map() again (then dev_pos
 *               must equal pos).
 * @scatter:     false: each extent sits at its own file position on the
 *               device; true: extent pairs (2k, 2k+1) swap device places,
 *               so runs that are contiguous in the file are not contiguous
 *               on the device.
 *
 * map(pos) returns the extent holding pos (flags 0) and counts the call.
 * Every request must then have the dev_pos the map gives its pos, and may
 * run past the end of its first extent only where the device places stay
 * contiguous (always without @scatter, never with it); otherwise it fails
 * with -EIO and counts as misdirected. Peek and poke translate through the
 * map too.
 *
 * Context: any thread, but only while no mapping uses the engine and the
 * store is empty (see Return); takes the engine's mutex; allocates.
 * Return: 0; -EINVAL for NULL, a non-mem engine, a bad @extent_size, or
 * @scatter with @extent_size 0; -EBUSY while a mapping uses the engine (it
 * may cache extents) or while the store is not empty (size > 0: data stays
 * at its device position, so a new map would scramble it); -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_mem_set_map(struct folio_engine *e,
					  uint64_t extent_size, bool scatter);

struct folio_mem_stats {
	size_t sz;            /* sizeof(struct folio_mem_stats) */
	uint64_t read_requests, read_bytes;   /* requests accepted by */
	uint64_t write_requests, write_bytes; /* submit(); bytes moved */
	uint64_t flushes, truncates, map_calls; /* calls, faulted or not */
	uint64_t faults; /* requests and calls a fault rule fired on */
	uint64_t misdirected; /* requests whose dev_pos disagreed with the
			       * engine's own map (failed with -EIO) */
	uint64_t size;   /* current size of the backing object, as reads
			  * see it (volatile cache included) */
	uint64_t inflight;  /* accepted requests not yet completed */
	uint64_t mem_bytes; /* memory holding durable data (64 KiB chunks) */
	/* The volatile write cache (added later: smaller @sz, not filled). */
	uint64_t volatile_bytes; /* bytes of completed writes not durable yet */
	uint64_t volatile_ops;   /* completed writes and truncates not durable
				  * yet (the log's length) */
	uint64_t power_cuts;     /* folio_engine_mem_power_cut() calls */
	uint64_t durable_size;   /* size of the durable object */
	uint64_t lost_ops;       /* logged writes and truncates discarded by
				  * power cuts and losing flushes */
	uint64_t lost_bytes;     /* the bytes of those writes */
	/* Added later (smaller @sz: not filled): FOLIO_IO_DURABLE writes
	 * accepted (their barriers count in @flushes when they run). */
	uint64_t durable_writes;
	/* Added later (smaller @sz: not filled): the writes among
	 * @inflight. A sync waits for writes, not for reads (readahead) in
	 * flight, so only this count is 0 once it returned. */
	uint64_t inflight_writes;
};

/**
 * folio_engine_mem_stats() - counters since creation.
 * @e:  a mem engine.
 * @st: filled up to @st->sz bytes (set it to sizeof(*st); older, smaller
 *      structs get the fields they have; a larger one must have its
 *      unknown tail zeroed, else -E2BIG, and that tail stays zero).
 * Context: any thread, any time; takes the engine's mutex, so the counters
 * agree with each other.
 * Return: 0; -EINVAL for NULL, a non-mem engine, or @st->sz smaller than
 * sizeof(size_t); -E2BIG for a larger @st with non-zero unknown bytes.
 */
FOLIO_EXPORT int folio_engine_mem_stats(struct folio_engine *e,
					struct folio_mem_stats *st);

/**
 * folio_engine_mem_peek() - copy backing-store bytes [pos, pos+len) (file
 * positions, through the map) into @buf as a read sees them (the volatile
 * cache over the durable store); zeros past the size.
 * @e:   a mem engine.
 * @buf: receives @len bytes.
 * @len: bytes to copy.
 * @pos: file position of the first byte.
 *
 * Not counted in the stats; no faults.
 *
 * Context: any thread, any time, also while requests are in flight (a
 * held request's data is not there until it completes); takes the
 * engine's mutex.
 * Return: 0; -EINVAL for NULL @e, a non-mem engine, or NULL @buf with
 * @len > 0; -ERANGE when the range ends past the capacity or overflows.
 */
FOLIO_EXPORT int folio_engine_mem_peek(struct folio_engine *e, void *buf,
				       size_t len, uint64_t pos);
/**
 * folio_engine_mem_poke() - write backing-store bytes [pos, pos+len) (file
 * positions, through the map) directly, to set up a test; grows the size
 * like a write. The bytes are durable at once. Not counted in the stats;
 * no faults.
 * @e:   a mem engine.
 * @buf: the @len bytes to store.
 * @len: bytes to store.
 * @pos: file position of the first byte.
 *
 * Context: any thread; takes the engine's mutex. Poke what no mapping
 * caches, normally before a mapping is opened: the engine's users do not
 * learn of the change.
 * Return: 0; -EINVAL as for peek; -ERANGE when the range overflows;
 * -ENOSPC when it ends past the capacity (nothing written); -EBUSY while
 * the volatile cache holds anything (it would hide the bytes; flush or
 * cut the power first); -ENOMEM.
 */
FOLIO_EXPORT int folio_engine_mem_poke(struct folio_engine *e,
				       const void *buf, size_t len,
				       uint64_t pos);

/**
 * folio_engine_mem_peek_durable() - copy durable bytes [pos, pos+len)
 * (file positions, through the map) into @buf: what would be left after a
 * power cut now, ignoring the volatile cache; zeros past the durable size.
 * @e:   a mem engine.
 * @buf: receives @len bytes.
 * @len: bytes to copy.
 * @pos: file position of the first byte.
 * Context: as for folio_engine_mem_peek().
 * Return: as for folio_engine_mem_peek().
 */
FOLIO_EXPORT int folio_engine_mem_peek_durable(struct folio_engine *e,
					       void *buf, size_t len,
					       uint64_t pos);

/**
 * folio_engine_mem_set_volatile() - turn the volatile write cache on or
 * off: the mem engine then models a disk whose write cache loses its
 * content at a power cut.
 * @e:  a mem engine.
 * @on: true: from now on a write the engine completes (its data moved, its
 *      completion delivered) and a successful truncate() go into the
 *      cache, an ordered log kept over the durable store. Reads (and
 *      folio_engine_mem_peek()) see the log applied, in order, over the
 *      durable store, as a disk serves reads from its cache; the durable
 *      store does not change. flush() applies the whole log to the
 *      durable store in order, so everything completed before the flush
 *      is durable when it returns 0, then empties it. A power cut
 *      (folio_engine_mem_power_cut()) throws the log away.
 *      false: the log is first made durable, as a successful flush would
 *      (not counted as a flush, no fault rules); afterwards writes and
 *      truncates are durable at once again (the default).
 *
 * Requests held in POLL or THREAD mode move their data when they
 * complete, so they enter the log in completion order. The log costs
 * memory for every byte written until the next flush. A volatile write
 * that finds no memory for its log entry completes with -ENOMEM; a
 * volatile truncate returns -ENOMEM.
 *
 * Context: any thread, any time, also while requests are in flight
 * and from a completion; a request completes under the setting in force
 * when it completes. Takes the engine's mutex.
 *
 * Return: 0; -EINVAL for NULL or a non-mem engine; -ENOMEM when turning
 * off could not store the log (the cache stays on with the entries not
 * yet durable still logged).
 */
FOLIO_EXPORT int folio_engine_mem_set_volatile(struct folio_engine *e,
					       bool on);

/* folio_engine_mem_power_cut() flags. */
#define FOLIO_MEM_CUT_KEEP_SOME 0x1u /* a pseudo-random subset of the
				      * volatile cache survives */
#define FOLIO_MEM_CUT_STAY_OFF 0x2u  /* the engine stays without power
				      * until folio_engine_mem_power_on() */

/**
 * folio_engine_mem_power_cut() - cut the power: the volatile cache is
 * lost, requests in flight never land, the durable store stays.
 * @e:     a mem engine.
 * @flags: 0 or FOLIO_MEM_CUT_* bits.
 *         FOLIO_MEM_CUT_KEEP_SOME: each entry of the log (write or
 *         truncate) survives with probability 1/2, as a disk persists
 *         part of its cache; the survivors are applied to the durable
 *         store in log order, the others dropped. Without it the whole
 *         log is dropped.
 *         FOLIO_MEM_CUT_STAY_OFF: afterwards every request completes with
 *         -EIO and flush() and truncate() return -EIO, without touching
 *         the store or counting against fault rules, until
 *         folio_engine_mem_power_on(). Use it when the code under test
 *         keeps running after the cut (a cut from another thread), so
 *         that nothing it does later lands on the "rebooted" disk.
 * @seed:  chooses the survivors of FOLIO_MEM_CUT_KEEP_SOME: the same seed
 *         and the same log give the same durable result. Ignored
 *         otherwise.
 *
 * Requests held in POLL or THREAD mode at the cut are completed with -EIO
 * by the caller before the call returns, and move no data; a request that
 * a mode switch is completing at that moment also completes with -EIO.
 * Requests whose completion was already being delivered completed before
 * the cut (a write among them landed in the log, and shares its fate).
 * The cut is atomic with respect to flush(): a flush either completed
 * before it (its log is durable) or runs after it, on the rebooted disk
 * (with STAY_OFF it then fails). Without STAY_OFF the engine is usable at
 * once, like a rebooted disk: it holds the durable content and durable
 * size, and keeps its mode, map, fault rules and volatile setting. The
 * engine's users must treat everything they believe about its content as
 * stale (a mapping over it should be freed without writing back and a new
 * one opened).
 *
 * Context: any thread, any time, including while other threads
 * submit, wait or are inside flush() or truncate(), and from inside a
 * completion (the completions it delivers may run nested in that one).
 * Not concurrently with folio_engine_free().
 *
 * Return: 0; -EINVAL for NULL, a non-mem engine or unknown @flags
 * (nothing changed); -ESHUTDOWN when it meets folio_engine_free() running
 * (nothing changed); -ENOMEM when a surviving write of KEEP_SOME found no
 * memory (the cut still happened: that write may be torn, the rest of the
 * log is lost).
 */
FOLIO_EXPORT int folio_engine_mem_power_cut(struct folio_engine *e,
					    unsigned flags, uint64_t seed);

/**
 * folio_engine_mem_power_on() - end the power loss that
 * folio_engine_mem_power_cut() started with FOLIO_MEM_CUT_STAY_OFF: the
 * engine serves requests again, over the durable store.
 * @e: a mem engine.
 * Context: any thread, any time; a no-op when the power is on. Takes the
 * engine's mutex.
 * Return: 0; -EINVAL for NULL or a non-mem engine.
 */
FOLIO_EXPORT int folio_engine_mem_power_on(struct folio_engine *e);

#ifdef __cplusplus
}
#endif

#endif /* FOLIO_STATE_MEM_H */
