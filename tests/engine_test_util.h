/* SPDX-License-Identifier: MIT */
/*
 * Support shared by the engine tests (test_engine_mem, _posix, _uring).
 *
 * Requests are built by a small helper that embeds the library's request
 * wrapper (struct engine_io), so nothing here needs the mapping layer; the
 * engine's callbacks are reached through the ops table it was created
 * with.
 *
 * The posix and io_uring engines promise the same things about files (the
 * data path, end of file, segments, short transfers, flush and truncate,
 * O_DIRECT, errors, refusals), so those tests are written once below and
 * run against whichever engine the program names in fe_engine. They run
 * in a directory on a disk file system (/var/tmp, else /tmp) and one on
 * tmpfs (/dev/shm); a missing directory skips its half.
 */
#ifndef FOLIO_ENGINE_TEST_UTIL_H
#define FOLIO_ENGINE_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include "engine/engine.h"

/* ---- requests ------------------------------------------------------- */

/* The flags tio_prep() gives every request (0 unless a test sets it). */
extern uint32_t tio_default_flags;

/* Requests of up to this many segments need no allocation, so tests that
 * rebuild a request in place (or inside a completion) never leak. */
#define TIO_INLINE_IOV 8

struct tio {
	struct engine_io rq;
	struct iovec *iov; /* iov_inline, or allocated for more segments */
	struct iovec iov_inline[TIO_INLINE_IOV];
	atomic_int ncomplete;
	atomic_long result;
	atomic_int barrier;          /* the request's barrier_error */
	atomic_uint order;           /* global completion rank */
	void (*hook)(struct tio *t); /* runs inside the completion */
	void *arg;
};

/* A request at pos (and dev_pos == pos) over buf split into nseg
 * segments: about equal, or cut at pseudo-random points when seed != 0
 * (some segments then are empty). */
void tio_prep(struct tio *t, enum folio_io_op op, uint64_t pos, void *buf,
	      size_t len, int nseg, uint64_t seed);
/* Completions on the thread named tio_main_thread (set by the test) are
 * counted in tio_on_main by the hook tio_note_thread. */
extern pthread_t tio_main_thread;
extern atomic_int tio_on_main;
void tio_note_thread(struct tio *t);

/* A FOLIO_IO_WAITED 4 KiB write of buf at pos, hooked with
 * tio_note_thread. */
void tio_prep_waited(struct tio *t, uint64_t pos, char *buf);
/* Needed only after tio_prep() with more than TIO_INLINE_IOV segments. */
void tio_free(struct tio *t);
/* How many times the request has completed (0 or 1 unless a bug). */
int tio_done(struct tio *t);
/* Poll until the request has completed, without calling the engine
 * (whose wait() may run queued requests in this thread): it must
 * complete on an engine thread. Fails after about 20 s. */
void tio_await(struct tio *t);
/* Poll until *flag is `want` (set by another thread), failing after
 * about 20 s. */
void await_flag(atomic_bool *flag, bool want);
/* The rank the next completion will get (see struct tio.order). */
unsigned tio_completion_rank(void);

int eng_submit(struct folio_engine *e, struct tio *t);
/* Fails the test on an engine without wait(): such an engine must have
 * completed the request already, as nothing else would. */
int eng_wait(struct folio_engine *e);
/* 0 for an engine without unplug(): it queues nothing. */
int eng_unplug(struct folio_engine *e);
int eng_flush(struct folio_engine *e);
int eng_truncate(struct folio_engine *e, uint64_t size);

/* wait(), or for an engine without one a short sleep. */
void eng_progress(struct folio_engine *e);
/* wait() until each of the n requests has completed (poll an engine
 * without wait()). */
void wait_all(struct folio_engine *e, struct tio *t, int n);
/* Read n blocks of bs bytes at [0, n * bs) into out (zeroed first) with
 * n requests t[] all in flight at once, block by block upwards or (with
 * backwards) downwards, of 1 or 2 segments; check that each read all of
 * its block and that out then equals in. */
void tio_read_back(struct folio_engine *e, struct tio *t, int n, size_t bs,
		   const void *in, void *out, bool backwards);
/* Submit t, start it, wait for it; its result, or submit()'s refusal. */
long tio_run(struct folio_engine *e, struct tio *t);
/* tio_run() for a FOLIO_IO_DURABLE write: its result, or its barrier's
 * error when only the barrier failed (the transfer, checked, was full;
 * *barrier_failed then says so, when given). */
long tio_run_durable(struct folio_engine *e, struct tio *t,
		     bool *barrier_failed);
/* tio_prep() + tio_run() + tio_free(). */
long do_io(struct folio_engine *e, enum folio_io_op op, uint64_t pos,
	   void *buf, size_t len, int nseg, uint64_t seed);

/* ---- completions that call back into the engine --------------------- */

#define CHAIN_MAX 64

/* Writes each submitted by the completion of the one before: the engine
 * must not hold a lock while completing. */
struct chain {
	struct folio_engine *e;
	struct tio t[CHAIN_MAX];
	char buf[CHAIN_MAX][512];
	int n;
	atomic_int submitted;
	atomic_int hooked; /* completions whose hook has run */
	atomic_int failed;
};

/* Runs a chain of n (up to CHAIN_MAX) writes of buf[i] (filled from
 * seed + i) at i * 512 until every hook has run. The caller checks the
 * data, frees e, then calls chain_finish(). */
struct chain *chain_run(struct folio_engine *e, int n, uint64_t seed);
/* Checks that every request completed once, in full, and frees ch. Only
 * after the engine is freed: that waits for the last completion to
 * return. */
void chain_finish(struct chain *ch);

/* A 512-byte write at 0 whose completion runs hook (with arg e) before it
 * counts as done; its result. */
long run_hooked(struct folio_engine *e, void (*hook)(struct tio *t));

/* wait() inside a completion must not wait for that very request. */
void check_wait_in_completion(struct folio_engine *e);

/* ---- memory --------------------------------------------------------- */

/* malloc that never returns NULL (abort() is known not to return, which
 * keeps the compiler from warning about NULL paths). */
void *xmalloc(size_t n);
/* Page aligned, as O_DIRECT wants. */
void *xaligned(size_t n);
void fill(void *buf, size_t len, uint64_t seed);
bool all_bytes(const void *buf, size_t len, unsigned char v);

/* ---- the file engine under test ------------------------------------- */

struct file_engine {
	const char *name; /* names the temporary directories and seeds */
	/* An engine on fd (assert on failure). */
	struct folio_engine *(*create)(int fd, unsigned flags);
	/* The constructor itself: 0 or its error. */
	int (*try_create)(struct folio_engine **out, int fd, unsigned flags);
	/* submit() completes before it returns; otherwise nothing completes
	 * before unplug() and wait() (without an engine thread). */
	bool completes_in_submit;
	/* Requests complete on engine threads, at any time after submit()
	 * (the engine may have no wait()). */
	bool completes_on_threads;
	/* A durable write's barrier is an fdatasync() call. */
	bool barrier_is_fdatasync;
	/* The same with FOLIO_IO_WAITED (engines that take the hint). */
	bool waited_barrier_is_fdatasync;
	/* The flag that makes an engine thread complete requests, or 0 when
	 * the engine has none: tests that care run once with it as well. */
	unsigned completion_thread_flag;
};

/* Set by main() before the tests run. */
extern const struct file_engine *fe_engine;

struct folio_engine *fe_new(int fd, unsigned flags);

/* ---- temporary files ------------------------------------------------ */

struct where {
	const char *const *candidates;
	char dir[256];
	bool ok;
};

/* The two directories; the state of the tests FE_ON_BOTH() lists. */
extern struct where fe_disk, fe_shm;

/* A data test once per file system, named after it. */
#define ON_BOTH(f)                                       \
	{#f "_disk", f, NULL, NULL, &fe_disk},           \
	{#f "_shm", f, NULL, NULL, &fe_shm}

/* The same for the shared tests below, under the names they had when
 * each engine's file had its own copy: FE_ON_BOTH(x) runs fe_test_x as
 * "test_x_disk" and "test_x_shm", FE_TEST(x) once as "test_x". */
#define FE_ON_BOTH(x)                                              \
	{"test_" #x "_disk", fe_test_##x, NULL, NULL, &fe_disk},   \
	{"test_" #x "_shm", fe_test_##x, NULL, NULL, &fe_shm}
#define FE_TEST(x) {"test_" #x, fe_test_##x, NULL, NULL, NULL}

/* Every shared test below, in one list. */
#define FE_ALL_TESTS                                                   \
	FE_ON_BOTH(round_trip), FE_ON_BOTH(dev_pos),                   \
	FE_ON_BOTH(read_past_eof), FE_ON_BOTH(many_segments),          \
	FE_ON_BOTH(short_write), FE_ON_BOTH(flush_truncate),           \
	FE_ON_BOTH(truncate_eintr), FE_ON_BOTH(direct),                \
	FE_ON_BOTH(direct_tail), FE_TEST(errors), FE_TEST(bad_requests), \
	FE_ON_BOTH(durable), FE_ON_BOTH(waited),                       \
	FE_ON_BOTH(readahead_hint)

/* Group fixtures: make the directories, and remove them together with
 * any files a failed test left behind. */
int fe_group_setup(void **state);
int fe_group_teardown(void **state);

/* A fresh empty file; close and unlink it with tfile_close(). */
struct tfile {
	char path[300];
	int fd;
	struct where *w; /* its directory */
};

/* In the test's directory (state of an FE_ON_BOTH() test), or in either
 * for a test without state. When the directory is missing it says so
 * and returns false, and the test returns: skip() is not used because
 * cmocka 1.1.5 reports it in TAP as "not ok N # SKIP", which meson 1.0
 * counts as a failure. */
bool tfile_open(struct tfile *f, void **state);
/* tfile_open() and an O_DIRECT descriptor of the file: the descriptor,
 * or -1 with nothing left open when the test cannot run (no directory,
 * or a file system without O_DIRECT: the test is skipped). */
int tfile_open_direct(struct tfile *f, void **state);
void tfile_close(struct tfile *f);

/* A file-size limit (RLIMIT_FSIZE) of `bytes`, the easy way to force a
 * short write: a write stops at it and the next one fails with EFBIG.
 * SIGXFSZ is ignored meanwhile; fsize_limit_end() restores both. */
struct fsize_limit {
	struct rlimit old;
	void (*oldsig)(int);
};
void fsize_limit_begin(struct fsize_limit *l, uint64_t bytes);
void fsize_limit_end(struct fsize_limit *l);

/* ---- tests shared by the file engines ------------------------------- */

void fe_test_round_trip(void **state);
void fe_test_dev_pos(void **state);
void fe_test_read_past_eof(void **state);
void fe_test_many_segments(void **state);
void fe_test_short_write(void **state);
void fe_test_flush_truncate(void **state);
void fe_test_truncate_eintr(void **state);
void fe_test_direct(void **state);
void fe_test_direct_tail(void **state);
void fe_test_errors(void **state);
void fe_test_bad_requests(void **state);
void fe_test_durable(void **state);
void fe_test_waited(void **state);
/* The engine's readahead hint is what the kernel reads ahead on the
 * file's device (0 on tmpfs). */
void fe_test_readahead_hint(void **state);

#endif
