/* SPDX-License-Identifier: MIT */
/*
 * Kernel AIO batches (lib/engines/aio.c) and the posix engine's workers
 * that use them on O_DIRECT descriptors. White-box: the batches are
 * transferred directly against a byte-array model of the file (random
 * reads and writes, segments, end of file), then through the failures a
 * batch can meet (a file-size limit cutting writes short or refusing
 * them, a descriptor that refuses writes at submission, vectors longer
 * than one call takes); and the engine is checked to send what it finds
 * queued as batches (engine_aio_batches counts them), with completions on
 * its worker, and to keep to one system call per request when asked
 * (FOLIO_POSIX_NO_AIO) or on a buffered descriptor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "engines/aio.h"
#include "test_util.h"

#define SECTOR 512u

/* The test file reopened with O_DIRECT (@flags: O_RDWR or O_RDONLY), or
 * -1 (the test is then skipped) where the file system refuses it. */
static int open_direct(const struct tfile *f, int flags)
{
	int fd = open(f->path, flags | O_DIRECT);
	if (fd < 0)
		printf("# O_DIRECT not supported in %s (%s)\n", f->w->dir,
		       strerror(errno));
	return fd;
}

/* A request of @len bytes at @pos over @buf in @nseg segments cut at
 * sector boundaries (O_DIRECT wants every segment aligned). */
struct req {
	struct folio_io io;
	struct iovec iov[8];
};

static void req_prep(struct req *r, enum folio_io_op op, uint64_t pos,
		     char *buf, size_t len, int nseg)
{
	size_t sectors = len / SECTOR, left = sectors;
	nseg = (int)MIN((size_t)nseg, sectors);
	memset(r, 0, sizeof(*r));
	char *at = buf;
	for (int i = 0; i < nseg; i++) {
		size_t s = i == nseg - 1 ? left : sectors / (size_t)nseg;
		r->iov[i] = (struct iovec){at, s * SECTOR};
		at += s * SECTOR;
		left -= s;
	}
	r->io = (struct folio_io){.op = op, .pos = pos, .dev_pos = pos,
				  .len = len, .iov = r->iov, .iovcnt = nseg};
}

/* ---- batches against a model -------------------------------------- */

#define MODEL_SLOTS 64
#define MODEL_SLOT (16 * 1024)
#define MODEL_SIZE (MODEL_SLOTS * MODEL_SLOT)

/*
 * Rounds of up to ENGINE_AIO_BATCH reads and writes, each inside a slot
 * of its own (requests of one batch run in any order, so none overlaps
 * another), of 1 to 32 sectors in up to 4 segments, some past end of file
 * (reads there are zero-filled, writes grow the file). Every result must
 * be the full length and the file must match the model after each round,
 * and every read what the model held before it.
 */
static void test_transfer_model(void **state)
{
	struct tfile f;
	int fd = tfile_open_direct(&f, state);
	if (fd < 0)
		return;
	uint64_t seed = test_seed("aio_model");
	struct engine_aio a = {0};
	assert_int_equal(engine_aio_setup(&a), 0);
	char *model = xmalloc(MODEL_SIZE), *file = xmalloc(MODEL_SIZE);
	char *bufs = xaligned((size_t)ENGINE_AIO_BATCH * MODEL_SLOT);
	memset(model, 0, MODEL_SIZE);
	uint64_t eof = 0;
	struct req r[ENGINE_AIO_BATCH];
	struct folio_io *ios[ENGINE_AIO_BATCH];
	ssize_t res[ENGINE_AIO_BATCH];
	unsigned rounds = test_iters(300, 30);
	unsigned long batches = atomic_load(&engine_aio_batches);
	for (unsigned round = 0; round < rounds; round++) {
		int n = 1 + (int)test_rand_below(&seed, ENGINE_AIO_BATCH);
		bool used[MODEL_SLOTS] = {0};
		uint64_t new_eof = eof;
		for (int i = 0; i < n; i++) {
			int slot;
			do
				slot = (int)test_rand_below(&seed, MODEL_SLOTS);
			while (used[slot]);
			used[slot] = true;
			size_t sectors = 1 + test_rand_below(&seed, 32);
			uint64_t off = test_rand_below(&seed, 33 - sectors) *
				       SECTOR;
			uint64_t pos = (uint64_t)slot * MODEL_SLOT + off;
			char *buf = bufs + (size_t)i * MODEL_SLOT;
			bool write = test_rand(&seed) & 1;
			size_t len = sectors * SECTOR;
			if (write) {
				fill(buf, len, test_rand(&seed));
				new_eof = MAX(new_eof, pos + len);
			} else {
				memset(buf, 0xee, len);
			}
			req_prep(&r[i], write ? FOLIO_IO_WRITE : FOLIO_IO_READ,
				 pos, buf, len,
				 1 + (int)test_rand_below(&seed, 4));
			ios[i] = &r[i].io;
			res[i] = -12345;
		}
		engine_aio_transfer(&a, fd, true, ios, n, res);
		for (int i = 0; i < n; i++) {
			struct folio_io *io = ios[i];
			assert_int_equal(res[i], (ssize_t)io->len);
			char *buf = io->iov[0].iov_base;
			if (io->op == FOLIO_IO_READ) {
				/* Past the old end: zeros, whether or not a
				 * write of this batch moved it on. */
				assert_memory_equal(buf, model + io->pos,
						    io->len);
			}
		}
		for (int i = 0; i < n; i++)
			if (ios[i]->op == FOLIO_IO_WRITE)
				memcpy(model + ios[i]->pos,
				       ios[i]->iov[0].iov_base, ios[i]->len);
		eof = new_eof;
		assert_int_equal(pread(f.fd, file, MODEL_SIZE, 0),
				 (ssize_t)eof);
		assert_memory_equal(file, model, eof);
	}
	assert_true(atomic_load(&engine_aio_batches) - batches >= rounds);
	engine_aio_destroy(&a);
	assert_int_equal(a.ctx, 0);
	engine_aio_destroy(&a); /* twice is harmless */
	free(model);
	free(file);
	free(bufs);
	close(fd);
	tfile_close(&f);
}

/* ---- what a batch can meet ------------------------------------------ */

/*
 * A file-size limit: one write stops at it (short: the bytes below it),
 * one lies past it (-EFBIG), one is below it (full). A descriptor open
 * for reading only: io_submit() refuses its writes, which still end with
 * the error (-EBADF) while the reads of the same batch are done. A vector
 * longer than one call takes (1500 segments) is finished after the
 * kernel's part.
 */
static void test_transfer_failures(void **state)
{
	struct tfile f;
	int fd = tfile_open_direct(&f, state);
	if (fd < 0)
		return;
	struct engine_aio a = {0};
	assert_int_equal(engine_aio_setup(&a), 0);
	enum { K = 4096 };
	char *buf = xaligned(16 * K), *chk = xmalloc(16 * K);
	fill(buf, 16 * K, 3);
	struct req r[3];
	struct folio_io *ios[3] = {&r[0].io, &r[1].io, &r[2].io};
	ssize_t res[3];

	struct fsize_limit fl;
	fsize_limit_begin(&fl, 16 * K);
	req_prep(&r[0], FOLIO_IO_WRITE, 14 * K, buf, 4 * K, 3);
	req_prep(&r[1], FOLIO_IO_WRITE, 20 * K, buf, K, 1);
	req_prep(&r[2], FOLIO_IO_WRITE, 0, buf + 4 * K, 2 * K, 2);
	engine_aio_transfer(&a, fd, true, ios, 3, res);
	fsize_limit_end(&fl);
	assert_int_equal(res[0], 2 * K);
	assert_int_equal(res[1], -EFBIG);
	assert_int_equal(res[2], 2 * K);
	assert_int_equal(pread(f.fd, chk, 16 * K, 0), 16 * K);
	assert_memory_equal(chk + 14 * K, buf, 2 * K);
	assert_memory_equal(chk, buf + 4 * K, 2 * K);

	int ro = open_direct(&f, O_RDONLY);
	assert_true(ro >= 0);
	char *in = xaligned(2 * K);
	req_prep(&r[0], FOLIO_IO_WRITE, 0, buf, K, 1);
	req_prep(&r[1], FOLIO_IO_READ, 14 * K, in, 2 * K, 2);
	req_prep(&r[2], FOLIO_IO_WRITE, 4 * K, buf, K, 1);
	engine_aio_transfer(&a, ro, true, ios, 3, res);
	assert_int_equal(res[0], -EBADF);
	assert_int_equal(res[1], 2 * K);
	assert_memory_equal(in, buf, 2 * K);
	assert_int_equal(res[2], -EBADF);
	close(ro);

	enum { SEGS = 1500 };
	char *big = xaligned((size_t)SEGS * SECTOR);
	char *back = xaligned((size_t)SEGS * SECTOR);
	fill(big, (size_t)SEGS * SECTOR, 9);
	struct iovec *v = xmalloc(SEGS * sizeof(*v));
	for (int i = 0; i < SEGS; i++)
		v[i] = (struct iovec){big + (size_t)i * SECTOR, SECTOR};
	struct folio_io w = {.op = FOLIO_IO_WRITE, .pos = 1 << 20,
			     .dev_pos = 1 << 20, .len = SEGS * SECTOR,
			     .iov = v, .iovcnt = SEGS};
	struct folio_io *one = &w;
	engine_aio_transfer(&a, fd, true, &one, 1, res);
	assert_int_equal(res[0], SEGS * SECTOR);
	for (int i = 0; i < SEGS; i++)
		v[i].iov_base = back + (size_t)i * SECTOR;
	w.op = FOLIO_IO_READ;
	engine_aio_transfer(&a, fd, true, &one, 1, res);
	assert_int_equal(res[0], SEGS * SECTOR);
	assert_memory_equal(back, big, (size_t)SEGS * SECTOR);

	engine_aio_destroy(&a);
	free(v);
	free(big);
	free(back);
	free(in);
	free(buf);
	free(chk);
	close(fd);
	tfile_close(&f);
}

/* ---- the posix engine's batches ------------------------------------- */

static atomic_bool release;

/* Holds the worker in the first request's completion until the test has
 * queued the rest behind it. */
static void hold_worker(struct tio *t)
{
	(void)t;
	while (!atomic_load(&release)) {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
}

static void await_all(struct tio *t, int n)
{
	for (int i = 0; i < n; i++)
		tio_await(&t[i]);
}

static int posix_try(struct folio_engine **out, int fd, unsigned flags,
		     int workers)
{
	struct folio_posix_opts o = {.sz = sizeof(o), .flags = flags,
				     .workers = workers};
	return folio_engine_posix_opts(out, fd, &o);
}

static struct folio_engine *posix_on(int fd, unsigned flags, int workers)
{
	struct folio_engine *e = NULL;
	assert_int_equal(posix_try(&e, fd, flags, workers), 0);
	return e;
}

/*
 * One worker, held in the completion of a first write while 199 more
 * queue up (every 5th durable, every 3rd of two segments): the worker
 * takes the plain writes between the durable ones as batches, through
 * AIO on an O_DIRECT descriptor (engine_aio_batches grows), and one call
 * per request with FOLIO_POSIX_NO_AIO or on a buffered descriptor (it
 * does not, nor where the kernel refuses the worker an AIO context).
 * Reads of them, queued the same way, are never batched.
 * Every request completes in full on the worker and the file holds what
 * was written.
 */
static void run_queued(int fd, unsigned flags, bool expect_aio,
		       int check_fd)
{
	enum { N = 200, BS = 4096 };
	char *buf = xaligned((size_t)N * BS), *back = xaligned((size_t)N * BS);
	fill(buf, (size_t)N * BS, (uint64_t)fd + flags);
	struct folio_engine *e = posix_on(fd, flags, 1);
	tio_main_thread = pthread_self();
	atomic_store(&tio_on_main, 0);
	atomic_store(&release, false);
	unsigned long before = atomic_load(&engine_aio_batches);
	struct tio *t = calloc(2 * N, sizeof(*t));
	assert_non_null(t);
	for (int i = 0; i < N; i++) {
		tio_prep(&t[i], FOLIO_IO_WRITE, (uint64_t)i * BS,
			 buf + (size_t)i * BS, BS, i % 3 ? 1 : 2, 0);
		if (i % 5 == 4)
			t[i].rq.io.flags = FOLIO_IO_DURABLE;
		t[i].hook = i ? tio_note_thread : hold_worker;
		assert_int_equal(eng_submit(e, &t[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		tio_prep(&t[N + i], FOLIO_IO_READ, (uint64_t)i * BS,
			 back + (size_t)i * BS, BS, 1, 0);
		t[N + i].hook = tio_note_thread;
	}
	atomic_store(&release, true);
	/* The reads only once the writes are over (a batch runs its
	 * requests in any order), and waiting without wait(), which would
	 * run queued requests in this thread: all must come from the
	 * worker. */
	await_all(t, N);
	unsigned long write_batches = atomic_load(&engine_aio_batches);
	atomic_store(&release, false);
	t[N].hook = hold_worker;
	for (int i = 0; i < N; i++)
		assert_int_equal(eng_submit(e, &t[N + i]), 0);
	atomic_store(&release, true);
	await_all(t + N, N);
	assert_int_equal(atomic_load(&tio_on_main), 0);
	/* Reads queued together go one at a time all the same: each
	 * completes as soon as it is read. */
	assert_int_equal(atomic_load(&engine_aio_batches), write_batches);
	for (int i = 0; i < 2 * N; i++) {
		assert_int_equal(tio_done(&t[i]), 1);
		assert_int_equal(atomic_load(&t[i].result), BS);
		assert_int_equal(atomic_load(&t[i].barrier), 0);
		tio_free(&t[i]);
	}
	assert_memory_equal(back, buf, (size_t)N * BS);
	unsigned long batches = atomic_load(&engine_aio_batches) - before;
	if (expect_aio)
		assert_true(batches > 0);
	else
		assert_int_equal(batches, 0);
	assert_int_equal(folio_engine_free(e), 0);
	char *chk = xmalloc((size_t)N * BS);
	assert_int_equal(pread(check_fd, chk, (size_t)N * BS, 0),
			 (ssize_t)N * BS);
	assert_memory_equal(chk, buf, (size_t)N * BS);
	free(chk);
	free(t);
	free(buf);
	free(back);
}

static void test_posix_batches(void **state)
{
	struct tfile f;
	int fd = tfile_open_direct(&f, state);
	if (fd < 0)
		return;
	run_queued(fd, 0, true, f.fd);
	run_queued(fd, FOLIO_POSIX_NO_AIO, false, f.fd);
	/* A kernel that gives the worker no AIO context: its batches go
	 * one call per request, with the same results. */
	atomic_store(&engine_aio_refuse, true);
	run_queued(fd, 0, false, f.fd);
	atomic_store(&engine_aio_refuse, false);
	/* Buffered, with the alignment checks asked for: AIO would do each
	 * transfer inside io_submit(), so the engine does not use it. */
	run_queued(f.fd, FOLIO_ENGINE_DIRECT, false, f.fd);
	close(fd);
	tfile_close(&f);
}

/* The flag is the posix engine's: io_uring refuses it. */
static void test_flag_is_posix_only(void **state)
{
	(void)state;
	struct tfile f;
	if (!tfile_open(&f, NULL))
		return;
	struct folio_engine *e = NULL;
	int r = folio_engine_uring(&e, f.fd, 8, FOLIO_POSIX_NO_AIO);
	assert_true(r == -EINVAL || r == -ENOSYS);
	assert_null(e);
	assert_int_equal(folio_engine_posix(&e, f.fd, FOLIO_POSIX_NO_AIO), 0);
	assert_int_equal(folio_engine_free(e), 0);
	tfile_close(&f);
}

static struct folio_engine *aio_engine_new(int fd, unsigned flags)
{
	return posix_on(fd, flags, 2);
}

static int aio_engine_try(struct folio_engine **out, int fd, unsigned flags)
{
	return posix_try(out, fd, flags, 2);
}

static const struct file_engine aio_engine = {
	.name = "aio",
	.create = aio_engine_new,
	.try_create = aio_engine_try,
	.completes_on_threads = true,
};

int main(void)
{
	fe_engine = &aio_engine;
	const struct CMUnitTest tests[] = {
		ON_BOTH(test_transfer_model),
		ON_BOTH(test_transfer_failures),
		ON_BOTH(test_posix_batches),
		cmocka_unit_test(test_flag_is_posix_only),
	};
	return cmocka_run_group_tests(tests, fe_group_setup, fe_group_teardown);
}
