/* SPDX-License-Identifier: MIT */
/*
 * kill -9 test on a real file: a forked child writes self-checking records
 * through a mapping while a background thread writes back, acknowledges
 * every batch that folio_mapping_sync() returned 0 for, and is killed with
 * SIGKILL at a random moment. The parent then checks that everything
 * acknowledged is in the file, through pread() and through a fresh mapping.
 *
 * What this proves and what it does not: SIGKILL leaves the kernel's page
 * cache alone, so whatever the child handed to the kernel survives it. The
 * test therefore checks that the library had *issued* (written to the file)
 * every byte of a batch before sync returned 0 for it, and that it never
 * wrote stale or foreign bytes over acknowledged data: it is not a
 * power-loss test (the flush itself is not tested).
 *
 * Layout. A record has a fixed extent [off, off + cap) in the file (cap =
 * 32 + 1..9000 bytes, so extents and records are not block-aligned); new
 * records are appended after every extent known so far, and later batches
 * overwrite earlier records in place. Each version of a record is
 *   magic, total length, record id, batch id, FNV-1a checksum (32 bytes),
 *   payload of 1..cap-32 bytes derived from (seed, id, batch)
 * and is shorter than or as long as the extent: it covers [off, off + len).
 * A batch writes 1..12 records (each at most once), then syncs.
 *
 * The log. The child talks to the parent over a pipe, one write() of at
 * most PIPE_BUF bytes per message (so a kill never tears one): INTENT
 * (batch id and its table: id, off, cap, len of each record) before the
 * batch's first write, and ACK (the same table) only after sync returned 0.
 * The parent thus knows every version that may have reached the file, and
 * exactly which were acknowledged. Batch ids grow across rounds.
 *
 * The verification rule, per byte p of every extent (exact, so no timing
 * can make it flaky). Let the versions of the record be v1 < v2 < ... in
 * batch order (all rounds since the file was created), and let va be the
 * latest ACKNOWLEDGED version with len > p (the latest acknowledged value
 * of that byte). The byte in the file must equal
 *   - va's byte, or the byte of any later version (necessarily not
 *     acknowledged) that covers p: a later, interrupted overwrite may or
 *     may not have reached the file, in whole blocks or in part;
 *   - when no acknowledged version covers p: zero, past end of file, or
 *     the byte of any version covering p.
 * So every record of every acknowledged batch is checked; a record that
 * no later batch touched must be exactly its acknowledged version (it may
 * not be torn); a record overwritten by a later unacknowledged batch may
 * be the acknowledged version, the later one, or a mix of the two, but
 * never an older version, zeros or anything else. The file may not be
 * longer than the extents, and the fresh mapping must read exactly what
 * pread() reads.
 *
 * Rounds: each variant runs 24 rounds (3 under valgrind, killed after 1..3
 * acknowledgements). Round 0 starts on an empty file, round 1 continues on
 * it, later rounds do either (the child takes the file size, overwrites
 * old records through its new mapping, and keeps appending up to 8 MiB).
 * Geometry (round 0: 4 KiB blocks, 64 KiB folios; then blocks 512..4096,
 * folios 4 KiB..2 MiB), batch mix and the kill moment (3..200 ms after the
 * fork, or 0..3 ms after the Nth acknowledgement, N = 1..20) come from the
 * seed. Variants: posix engine, io_uring engine (skipped when
 * unavailable), and a background writer that uses FOLIO_WB_WAIT passes.
 * The file lives in $TMPDIR, else the build directory, else /var/tmp or
 * /tmp; /dev/shm only as a last resort (the TAP log names the file
 * system).
 *
 * Replay: FOLIO_TEST_SEED=<seed> (the kill moments still vary with the
 * machine's speed, so a replay explores the same configuration, not
 * necessarily the same interleaving).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "folio_state.h"
#include "test_util.h"

#ifndef BUILDDIR
#define BUILDDIR "."
#endif

#define REC_MAGIC 0x394b5246u /* "FRK9" */
#define REC_HDR 32u
#define MAX_PAYLOAD 9000u
#define MAX_CAP (REC_HDR + MAX_PAYLOAD)
#define MAX_BATCH 12u
#define MAX_APPEND_FILE (8u << 20) /* past this a child only overwrites */

#define MSG_MAGIC 0x4b494c4cu /* "KILL" */
#define MSG_INTENT 1u
#define MSG_ACK 2u

enum engine_kind { ENG_POSIX, ENG_URING };

struct variant {
	const char *name;
	unsigned id;
	enum engine_kind engine;
	unsigned wb_flags; /* flags of the background writeback passes */
};

static const struct variant v_posix = {"posix", 1, ENG_POSIX, 0};
static const struct variant v_uring = {"uring", 2, ENG_URING, 0};
static const struct variant v_wait = {"wb-wait", 3, ENG_POSIX, FOLIO_WB_WAIT};

/* ---- records --------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x += UINT64_C(0x9E3779B97F4A7C15);
	x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

#define FNV_INIT UINT64_C(0xcbf29ce484222325)

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* The bytes of version (id, batch) of a record, @len >= REC_HDR + 1. */
static void record_bytes(uint64_t cseed, uint64_t id, uint64_t batch,
			 uint32_t len, unsigned char *out)
{
	uint64_t s = mix64(cseed ^ mix64(id * UINT64_C(0x9E3779B97F4A7C15) ^
					 mix64(batch)));
	if (!s)
		s = 1;
	for (uint32_t at = REC_HDR; at < len; at += 8) {
		uint64_t r = test_rand(&s);
		uint32_t n = len - at < 8 ? len - at : 8;
		memcpy(out + at, &r, n);
	}
	put32(out, REC_MAGIC);
	put32(out + 4, len);
	put64(out + 8, id);
	put64(out + 16, batch);
	put64(out + 24, 0);
	uint64_t sum = fnv1a(FNV_INIT, out, len);
	put64(out + 24, sum);
}

/* ---- the log between child and parent -------------------------------- */

struct msg_ent {
	uint64_t id;
	uint64_t off;
	uint32_t cap;
	uint32_t len;
};

struct msg {
	uint32_t magic;
	uint32_t type;
	uint64_t batch;
	uint32_t n;
	uint32_t sum;
	struct msg_ent e[MAX_BATCH];
};

#define MSG_HDR offsetof(struct msg, e)
_Static_assert(sizeof(struct msg) <= PIPE_BUF, "one atomic pipe write");

static uint32_t msg_sum(const struct msg *m)
{
	struct msg c;
	size_t n = MSG_HDR + m->n * sizeof(m->e[0]);
	memcpy(&c, m, n);
	c.sum = 0;
	return (uint32_t)fnv1a(FNV_INIT, &c, n);
}

/* ---- parent state ----------------------------------------------------- */

struct version {
	uint64_t batch;
	uint32_t len;
	bool acked;
	unsigned round; /* the round that wrote it */
};

struct record {
	uint64_t off;
	uint32_t cap;
	uint32_t nver, maxver;
	struct version *ver;
};

struct round_cfg {
	uint64_t rseed;
	size_t block, min_folio, max_folio;
	bool fresh;
	unsigned kill_ms;    /* kill this long after the fork ... */
	unsigned kill_acks;  /* ... or right after this many ACKs (if > 0) */
	unsigned overwrite_pct;
	unsigned uring_flags, uring_depth;
};

struct kctx {
	const struct variant *v;
	uint64_t seed, cseed;
	char dir[PATH_MAX];
	char path[PATH_MAX + 16];
	bool have_dir;
	int fd;
	pid_t child; /* running child, or 0 */

	struct record *recs;
	size_t nrecs, maxrecs;
	uint64_t end;        /* end of all extents known so far */
	uint64_t next_batch; /* first batch id of the next round */

	struct msg pending;  /* the last INTENT */
	bool have_pending;

	unsigned char pbuf[2 * sizeof(struct msg)];
	size_t plen;

	char failure[1024]; /* the first bad byte's description */
	unsigned char *fbuf, *mbuf, *vbuf;
	size_t fcap, vcap;

	unsigned round;
	struct round_cfg cfg;
	unsigned round_acks, round_intents;
	unsigned long kills, mid_batch_kills, acks, intents, checked_versions;
	uint64_t checked_bytes;
};

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	assert_non_null(q);
	return q;
}

static void ctx_reset_records(struct kctx *k)
{
	for (size_t i = 0; i < k->nrecs; i++)
		free(k->recs[i].ver);
	k->nrecs = 0;
	k->end = 0;
	k->have_pending = false;
}

/* ---- the child ------------------------------------------------------- */

struct child {
	const struct kctx *k;
	int logfd;
	struct folio_mapping *map;
	uint64_t rng, wb_rng;
	atomic_bool stop;
	uint64_t *off;
	uint32_t *cap;
	size_t nrecs, maxrecs;
	uint64_t append_at;
};

static _Noreturn void child_die(const char *what, long long err)
{
	fprintf(stderr, "kill9 child: %s: %lld (%s)\n", what, err,
		err < 0 ? strerror((int)-err) : "-");
	_exit(3);
}

static void child_send(struct child *c, struct msg *m)
{
	m->magic = MSG_MAGIC;
	m->sum = 0;
	m->sum = msg_sum(m);
	size_t n = MSG_HDR + m->n * sizeof(m->e[0]);
	ssize_t r;
	do
		r = write(c->logfd, m, n);
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)n)
		child_die("log write", r < 0 ? -errno : r);
}

static void *child_flusher(void *arg)
{
	struct child *c = arg;
	const struct kctx *k = c->k;
	while (!atomic_load(&c->stop)) {
		uint64_t *rng = &c->wb_rng;
		struct folio_writeback_opts wb = {
			.sz = sizeof(wb),
			.flags = k->v->wb_flags,
			.budget = UINT64_C(4096) << test_rand_below(rng, 7),
		};
		if (test_rand_below(rng, 4) == 0)
			wb.max_request = (size_t)4096
					 << test_rand_below(rng, 5);
		if (test_rand_below(rng, 5) == 0) {
			int64_t size = folio_mapping_size(c->map);
			if (size > 0)
				wb.start = test_rand_below(rng,
							   (uint64_t)size);
		}
		int64_t r = folio_mapping_writeback(c->map, &wb);
		if (r < 0)
			child_die("writeback", r);
		unsigned nap = (unsigned)test_rand_below(rng, 4);
		if (nap == 0)
			sched_yield();
		else if (nap == 1) {
			struct timespec ts = {0, (long)(20000 +
				test_rand_below(rng, 300000))};
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

static void child_push(struct child *c, uint64_t off, uint32_t cap)
{
	if (c->nrecs == c->maxrecs) {
		c->maxrecs = c->maxrecs ? 2 * c->maxrecs : 256;
		c->off = realloc(c->off, c->maxrecs * sizeof(*c->off));
		c->cap = realloc(c->cap, c->maxrecs * sizeof(*c->cap));
		if (!c->off || !c->cap)
			child_die("realloc", -ENOMEM);
	}
	c->off[c->nrecs] = off;
	c->cap[c->nrecs] = cap;
	c->nrecs++;
}

static void child_write(struct child *c, const unsigned char *buf,
			size_t len, uint64_t pos)
{
	ssize_t n = folio_mapping_write(c->map, buf, len, pos);
	if (n != (ssize_t)len)
		child_die("folio_mapping_write", n);
}

static _Noreturn void child_main(const struct kctx *k, int logfd)
{
	const struct round_cfg *cfg = &k->cfg;
	struct child c = {.k = k, .logfd = logfd};
	c.rng = mix64(cfg->rseed ^ 1) | 1;
	c.wb_rng = mix64(cfg->rseed ^ 2) | 1;
	alarm(120); /* never outlive a parent that lost track of us */

	int fd = open(k->path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		child_die("open", -errno);
	struct stat st;
	if (fstat(fd, &st) < 0)
		child_die("fstat", -errno);
	struct folio_engine *e = NULL;
	int r = k->v->engine == ENG_URING
			? folio_engine_uring(&e, fd, cfg->uring_depth,
					     cfg->uring_flags)
			: folio_engine_posix(&e, fd, 0);
	if (r < 0)
		child_die("engine", r);
	struct folio_mapping_opts o = {
		.sz = sizeof(o),
		.block_size = cfg->block,
		.min_folio_size = cfg->min_folio,
		.max_folio_size = cfg->max_folio,
		.size = (uint64_t)st.st_size,
		.engine = e,
	};
	r = folio_mapping_new(&c.map, &o);
	if (r < 0)
		child_die("folio_mapping_new", r);
	folio_errseq_t cursor = folio_mapping_err_cursor(c.map);

	for (size_t i = 0; i < k->nrecs; i++)
		child_push(&c, k->recs[i].off, k->recs[i].cap);
	c.append_at = k->end > (uint64_t)st.st_size ? k->end
						     : (uint64_t)st.st_size;

	pthread_t flusher;
	r = pthread_create(&flusher, NULL, child_flusher, &c);
	if (r)
		child_die("pthread_create", -r);

	static unsigned char buf[MAX_CAP];
	uint64_t batch = k->next_batch;
	for (;; batch++) {
		struct msg m = {.type = MSG_INTENT, .batch = batch};
		unsigned want = 1 + (unsigned)test_rand_below(&c.rng,
							      MAX_BATCH);
		for (unsigned i = 0; i < want; i++) {
			struct msg_ent *en = &m.e[m.n];
			bool over = c.nrecs > 0 &&
				    (c.append_at >= MAX_APPEND_FILE ||
				     test_rand_below(&c.rng, 100) <
					     cfg->overwrite_pct);
			if (over) {
				/* Half of them near the end of the file,
				 * where appends and writeback meet. */
				uint64_t id;
				if (test_rand_below(&c.rng, 2) && c.nrecs > 16)
					id = c.nrecs - 1 -
					     test_rand_below(&c.rng, 16);
				else
					id = test_rand_below(&c.rng, c.nrecs);
				bool dup = false;
				for (unsigned j = 0; j < m.n; j++)
					dup |= m.e[j].id == id;
				if (dup)
					continue;
				en->id = id;
				en->off = c.off[id];
				en->cap = c.cap[id];
			} else {
				en->id = c.nrecs;
				en->off = c.append_at;
				en->cap = REC_HDR + 1 +
					  (uint32_t)test_rand_below(&c.rng,
								    MAX_PAYLOAD);
				child_push(&c, en->off, en->cap);
				c.append_at += en->cap;
			}
			uint32_t room = en->cap - REC_HDR;
			en->len = REC_HDR + 1 +
				  (uint32_t)test_rand_below(&c.rng, room);
			if (!over && test_rand_below(&c.rng, 2))
				en->len = en->cap; /* appends: often full */
			m.n++;
		}
		child_send(&c, &m);

		/* Write the records, sometimes in reverse order, and some
		 * in two pieces, the second piece first. */
		bool reverse = test_rand_below(&c.rng, 4) == 0;
		for (unsigned i = 0; i < m.n; i++) {
			const struct msg_ent *en = &m.e[reverse ? m.n - 1 - i
							       : i];
			record_bytes(k->cseed, en->id, batch, en->len, buf);
			if (en->len > 2 && test_rand_below(&c.rng, 4) == 0) {
				size_t cut = 1 + test_rand_below(&c.rng,
								 en->len - 1);
				child_write(&c, buf + cut, en->len - cut,
					    en->off + cut);
				child_write(&c, buf, cut, en->off);
			} else {
				child_write(&c, buf, en->len, en->off);
			}
		}
		r = folio_mapping_sync(c.map, &cursor);
		if (r != 0)
			child_die("folio_mapping_sync", r);
		m.type = MSG_ACK;
		child_send(&c, &m);
	}
}

/* ---- the parent: log ----------------------------------------------------- */

static void log_fail(struct kctx *k, const char *why, uint64_t batch)
{
	fail_msg("kill9 %s: seed %llu round %u: bad log message (%s), "
		 "batch %llu",
		 k->v->name, (unsigned long long)k->seed, k->round, why,
		 (unsigned long long)batch);
}

static void handle_intent(struct kctx *k, const struct msg *m)
{
	if (m->n == 0 || m->batch < k->next_batch)
		log_fail(k, "intent: empty or old batch id", m->batch);
	for (uint32_t i = 0; i < m->n; i++) {
		const struct msg_ent *en = &m->e[i];
		struct record *rec;
		if (en->id < k->nrecs) {
			rec = &k->recs[en->id];
			if (rec->off != en->off || rec->cap != en->cap)
				log_fail(k, "intent: extent moved", m->batch);
		} else if (en->id == k->nrecs) {
			if (en->off != k->end)
				log_fail(k, "intent: append not at end",
					 m->batch);
			if (k->nrecs == k->maxrecs) {
				k->maxrecs = k->maxrecs ? 2 * k->maxrecs : 256;
				k->recs = xrealloc(k->recs, k->maxrecs *
						   sizeof(*k->recs));
			}
			rec = &k->recs[k->nrecs++];
			memset(rec, 0, sizeof(*rec));
			rec->off = en->off;
			rec->cap = en->cap;
			k->end = en->off + en->cap;
		} else {
			log_fail(k, "intent: record id skips", m->batch);
			return;
		}
		if (en->cap < REC_HDR + 1 || en->cap > MAX_CAP ||
		    en->len < REC_HDR + 1 || en->len > en->cap)
			log_fail(k, "intent: bad lengths", m->batch);
		if (rec->nver && rec->ver[rec->nver - 1].batch >= m->batch)
			log_fail(k, "intent: record twice in a batch",
				 m->batch);
		if (rec->nver == rec->maxver) {
			rec->maxver = rec->maxver ? 2 * rec->maxver : 4;
			rec->ver = xrealloc(rec->ver,
					    rec->maxver * sizeof(*rec->ver));
		}
		rec->ver[rec->nver++] = (struct version){
			.batch = m->batch, .len = en->len, .round = k->round};
	}
	k->pending = *m;
	k->have_pending = true;
	k->next_batch = m->batch + 1;
	k->round_intents++;
	k->intents++;
}

static void handle_ack(struct kctx *k, const struct msg *m)
{
	if (!k->have_pending || k->pending.batch != m->batch ||
	    k->pending.n != m->n ||
	    memcmp(k->pending.e, m->e, m->n * sizeof(m->e[0])))
		log_fail(k, "ack does not match the last intent", m->batch);
	for (uint32_t i = 0; i < m->n; i++) {
		struct record *rec = &k->recs[m->e[i].id];
		rec->ver[rec->nver - 1].acked = true;
	}
	k->have_pending = false;
	k->round_acks++;
	k->acks++;
}

/* Parse complete messages out of pbuf. */
static void parse_log(struct kctx *k)
{
	size_t at = 0;
	while (k->plen - at >= MSG_HDR) {
		struct msg m;
		memcpy(&m, k->pbuf + at, MSG_HDR);
		if (m.magic != MSG_MAGIC || m.n > MAX_BATCH)
			log_fail(k, "bad header", m.batch);
		size_t n = MSG_HDR + m.n * sizeof(m.e[0]);
		if (k->plen - at < n)
			break;
		memcpy(&m, k->pbuf + at, n);
		if (m.sum != msg_sum(&m))
			log_fail(k, "bad checksum", m.batch);
		if (m.type == MSG_INTENT)
			handle_intent(k, &m);
		else if (m.type == MSG_ACK)
			handle_ack(k, &m);
		else
			log_fail(k, "bad type", m.batch);
		at += n;
	}
	memmove(k->pbuf, k->pbuf + at, k->plen - at);
	k->plen -= at;
}

/* Read what the pipe has; false at end of file. */
static bool read_log(struct kctx *k, int rfd)
{
	ssize_t r;
	do
		r = read(rfd, k->pbuf + k->plen, sizeof(k->pbuf) - k->plen);
	while (r < 0 && errno == EINTR);
	assert_true(r >= 0);
	if (r == 0)
		return false;
	k->plen += (size_t)r;
	parse_log(k);
	return true;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the parent: verification ------------------------------------------ */

static void ensure_bufs(struct kctx *k, size_t n)
{
	if (n <= k->fcap)
		return;
	k->fcap = n;
	k->fbuf = xrealloc(k->fbuf, n);
	k->mbuf = xrealloc(k->mbuf, n);
}

/*
 * The rule of the file comment for byte @p of record @rec: true when the
 * file's byte is acceptable. *@acked receives the index of the latest
 * acknowledged version covering @p, or -1.
 */
static bool byte_ok(const struct kctx *k, const struct record *rec,
		    uint32_t p, uint64_t fsize, int *acked)
{
	uint64_t at = rec->off + p;
	bool present = at < fsize;
	unsigned char got = present ? k->fbuf[at] : 0;
	*acked = -1;
	for (int i = (int)rec->nver - 1; i >= 0; i--) {
		if (rec->ver[i].len <= p)
			continue;
		if (present && k->vbuf[(size_t)i * rec->cap + p] == got)
			return true;
		if (rec->ver[i].acked) {
			*acked = i;
			return false;
		}
	}
	return !present || got == 0;
}

static void report_bad(struct kctx *k, uint64_t id, uint32_t p,
		       uint32_t last, uint64_t bad, int acked, uint64_t fsize)
{
	const struct record *rec = &k->recs[id];
	uint64_t at = rec->off + p;
	bool present = at < fsize;
	unsigned char got = present ? k->fbuf[at] : 0;
	char found[160], want[160], hdr[160];
	if (!present) {
		snprintf(found, sizeof(found), "nothing (past EOF)");
	} else {
		int older = -1;
		int from = acked >= 0 ? acked - 1 : (int)rec->nver - 1;
		for (int i = from; i >= 0 && older < 0; i--)
			if (rec->ver[i].len > p &&
			    k->vbuf[(size_t)i * rec->cap + p] == got)
				older = i;
		if (older >= 0)
			snprintf(found, sizeof(found),
				 "0x%02x (= older batch %llu's byte)", got,
				 (unsigned long long)rec->ver[older].batch);
		else
			snprintf(found, sizeof(found), "0x%02x%s", got,
				 got ? "" : " (zero)");
	}
	if (acked >= 0) {
		const struct version *va = &rec->ver[acked];
		snprintf(want, sizeof(want),
			 "acknowledged batch %llu (round %u, record len %u) "
			 "expects 0x%02x",
			 (unsigned long long)va->batch, va->round, va->len,
			 k->vbuf[(size_t)acked * rec->cap + p]);
	} else {
		snprintf(want, sizeof(want),
			 "no acknowledged version covers it, expected zero "
			 "or a byte of one of its %u versions", rec->nver);
	}
	uint32_t later = 0;
	for (uint32_t i = (uint32_t)(acked + 1); i < rec->nver; i++)
		later += rec->ver[i].len > p;
	if (rec->off + REC_HDR <= fsize) {
		const unsigned char *h = k->fbuf + rec->off;
		snprintf(hdr, sizeof(hdr),
			 "the record's header reads magic 0x%08x len %u id "
			 "%llu batch %llu",
			 get32(h), get32(h + 4),
			 (unsigned long long)get64(h + 8),
			 (unsigned long long)get64(h + 16));
	} else {
		snprintf(hdr, sizeof(hdr), "the record's header is past EOF");
	}
	snprintf(k->failure, sizeof(k->failure),
		 "kill9 %s: DATA LOSS seed %llu round %u (block %zu, folios "
		 "%zu..%zu, %s file, engine %s, writeback flags 0x%x): "
		 "record %llu (extent %llu+%u), byte %u of it at file offset "
		 "%llu: %s, found %s; %llu bad bytes in record bytes %u..%u "
		 "(file %llu..%llu); %u "
		 "later unacknowledged versions cover it; file size %llu; %s. "
		 "Replay with FOLIO_TEST_SEED=%llu",
		 k->v->name, (unsigned long long)k->seed, k->round,
		 k->cfg.block, k->cfg.min_folio, k->cfg.max_folio,
		 k->cfg.fresh ? "fresh" : "continued",
		 k->v->engine == ENG_URING ? "uring" : "posix",
		 k->v->wb_flags, (unsigned long long)id,
		 (unsigned long long)rec->off, rec->cap, p,
		 (unsigned long long)at, want, found, (unsigned long long)bad,
		 p, last, (unsigned long long)at,
		 (unsigned long long)(rec->off + last), later,
		 (unsigned long long)fsize, hdr, (unsigned long long)k->seed);
}

/* Check one record's extent; returns its number of bad bytes. */
static uint64_t verify_record(struct kctx *k, uint64_t id, uint64_t fsize)
{
	const struct record *rec = &k->recs[id];
	size_t need = (size_t)rec->nver * rec->cap;
	if (need > k->vcap) {
		k->vcap = need;
		k->vbuf = xrealloc(k->vbuf, need);
	}
	for (uint32_t i = 0; i < rec->nver; i++) {
		record_bytes(k->cseed, id, rec->ver[i].batch, rec->ver[i].len,
			     k->vbuf + (size_t)i * rec->cap);
		if (rec->ver[i].acked)
			k->checked_versions++;
	}
	k->checked_bytes += rec->cap;
	uint64_t total = 0;
	uint32_t first = 0, last = 0;
	int first_acked = -1;
	for (uint32_t p = 0; p < rec->cap; p++) {
		int acked;
		if (byte_ok(k, rec, p, fsize, &acked))
			continue;
		if (!total++) {
			first = p;
			first_acked = acked;
		}
		last = p;
	}
	if (total && !k->failure[0])
		report_bad(k, id, first, last, total, first_acked, fsize);
	return total;
}

static struct folio_engine *verify_engine(struct kctx *k, int fd)
{
	struct folio_engine *e = NULL;
	if (k->v->engine == ENG_URING)
		assert_int_equal(folio_engine_uring(&e, fd, 16, 0), 0);
	else
		assert_int_equal(folio_engine_posix(&e, fd, 0), 0);
	return e;
}

static void verify_file(struct kctx *k, uint64_t *rng)
{
	struct stat st;
	assert_int_equal(fstat(k->fd, &st), 0);
	uint64_t fsize = (uint64_t)st.st_size;
	if (fsize > k->end)
		fail_msg("kill9 %s: seed %llu round %u: file size %llu is "
			 "past the end of every extent written (%llu)",
			 k->v->name, (unsigned long long)k->seed, k->round,
			 (unsigned long long)fsize,
			 (unsigned long long)k->end);
	ensure_bufs(k, (size_t)fsize + 1);

	for (uint64_t at = 0; at < fsize;) {
		ssize_t n = pread(k->fd, k->fbuf + at, (size_t)(fsize - at),
				  (off_t)at);
		assert_true(n > 0);
		at += (uint64_t)n;
	}

	/* The same bytes through a fresh mapping of another geometry. */
	int fd = open(k->path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	struct folio_engine *e = verify_engine(k, fd);
	size_t block = (size_t)512 << test_rand_below(rng, 4);
	struct folio_mapping_opts o = {
		.sz = sizeof(o),
		.block_size = block,
		.max_folio_size = (size_t)4096 << test_rand_below(rng, 10),
		.size = fsize,
		.engine = e,
	};
	struct folio_mapping *m = NULL;
	assert_int_equal(folio_mapping_new(&m, &o), 0);
	uint64_t at = 0;
	while (at < fsize) {
		size_t chunk = 1 + (size_t)test_rand_below(rng, 1u << 20);
		if (chunk > fsize - at)
			chunk = (size_t)(fsize - at);
		ssize_t n = folio_mapping_read(m, k->mbuf + at, chunk, at);
		if (n <= 0)
			fail_msg("kill9 %s: seed %llu round %u: mapping read "
				 "at %llu returned %zd (file size %llu)",
				 k->v->name, (unsigned long long)k->seed,
				 k->round, (unsigned long long)at, n,
				 (unsigned long long)fsize);
		at += (uint64_t)n;
	}
	unsigned char extra;
	assert_int_equal(folio_mapping_read(m, &extra, 1, fsize), 0);
	assert_int_equal(folio_mapping_free(m), 0);
	assert_int_equal(folio_engine_free(e), 0);
	close(fd);
	if (fsize && memcmp(k->fbuf, k->mbuf, (size_t)fsize)) {
		uint64_t i = 0;
		while (k->fbuf[i] == k->mbuf[i])
			i++;
		fail_msg("kill9 %s: seed %llu round %u: fresh mapping reads "
			 "0x%02x at %llu, pread 0x%02x",
			 k->v->name, (unsigned long long)k->seed, k->round,
			 k->mbuf[i], (unsigned long long)i, k->fbuf[i]);
	}

	uint64_t bad = 0, bad_recs = 0;
	for (uint64_t id = 0; id < k->nrecs; id++) {
		uint64_t b = verify_record(k, id, fsize);
		bad += b;
		bad_recs += b > 0;
	}
	if (bad)
		fail_msg("%s [in all: %llu bad bytes in %llu of %zu records]",
			 k->failure, (unsigned long long)bad,
			 (unsigned long long)bad_recs, k->nrecs);
}

/* ---- the parent: rounds ------------------------------------------------ */

static void pick_round(struct kctx *k, uint64_t *rng)
{
	struct round_cfg *c = &k->cfg;
	memset(c, 0, sizeof(*c));
	c->rseed = mix64(k->seed ^ mix64(k->v->id * 1000003u + k->round));
	if (k->round == 0) {
		c->block = 4096;
		c->min_folio = 4096;
		c->max_folio = 64 * 1024;
	} else {
		c->block = (size_t)512 << test_rand_below(rng, 4);
		c->max_folio = (size_t)4096 << test_rand_below(rng, 10);
		c->min_folio = c->block;
		if (test_rand_below(rng, 2)) {
			while (c->min_folio < c->max_folio &&
			       test_rand_below(rng, 2))
				c->min_folio *= 2;
		}
	}
	/* Round 1 always continues on round 0's file, so that even the
	 * three rounds under valgrind reopen a killed file. */
	c->fresh = k->round == 0 ||
		   (k->round >= 2 && test_rand_below(rng, 4) == 0);
	c->overwrite_pct = 20 + (unsigned)test_rand_below(rng, 51);
	if (test_slow_env()) {
		c->kill_acks = 1 + (unsigned)test_rand_below(rng, 3);
		c->kill_ms = 20000;
	} else if (test_rand_below(rng, 2)) {
		c->kill_ms = 3 + (unsigned)test_rand_below(rng, 198);
	} else {
		c->kill_acks = 1 + (unsigned)test_rand_below(rng, 20);
		c->kill_ms = 5000; /* only if the machine crawls */
	}
	c->uring_depth = 1u << test_rand_below(rng, 7);
	c->uring_flags = test_rand_below(rng, 2)
				 ? FOLIO_URING_COMPLETION_THREAD
				 : 0;
}

static void run_round(struct kctx *k, uint64_t *rng)
{
	pick_round(k, rng);
	if (k->cfg.fresh) {
		assert_int_equal(ftruncate(k->fd, 0), 0);
		ctx_reset_records(k);
	}
	k->round_acks = k->round_intents = 0;
	k->plen = 0;
	k->have_pending = false;

	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	/* Room for a whole round's log while a timed kill sleeps (where
	 * that is refused the child may block on the log now and then,
	 * which only makes the kill moments less varied). */
	(void)fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		child_main(k, p[1]);
	}
	k->child = pid; /* teardown kills it if a check fails before we do */
	close(p[1]);

	/*
	 * Waking up on every message would make the kill land right after
	 * an ACK (the wakeup preempts the child on a busy machine), so a
	 * timed kill sleeps until its moment and reads the log afterwards
	 * (the pipe is made big enough for it). A kill after N ACKs has to
	 * watch them, and then waits a random 0..3 ms more.
	 */
	uint64_t start = now_ms();
	bool eof = false;
	if (!k->cfg.kill_acks) {
		struct timespec ts = {
			.tv_sec = k->cfg.kill_ms / 1000,
			.tv_nsec = (long)(k->cfg.kill_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	} else {
		for (;;) {
			uint64_t t = now_ms() - start;
			if (t >= k->cfg.kill_ms ||
			    k->round_acks >= k->cfg.kill_acks)
				break;
			struct pollfd pf = {.fd = p[0], .events = POLLIN};
			int r = poll(&pf, 1, (int)(k->cfg.kill_ms - t));
			if (r < 0 && errno == EINTR)
				continue;
			assert_true(r >= 0);
			if (r > 0 && !read_log(k, p[0])) {
				eof = true;
				break;
			}
		}
		struct timespec ts = {
			0, (long)test_rand_below(rng, 3000000)};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	while (!eof && read_log(k, p[0]))
		;
	close(p[0]);
	int status;
	pid_t w;
	do
		w = waitpid(pid, &status, 0);
	while (w < 0 && errno == EINTR);
	assert_int_equal(w, pid);
	k->child = 0;
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("kill9 %s: seed %llu round %u: the child ended by "
			 "itself (%s %d; its stderr says why)",
			 k->v->name, (unsigned long long)k->seed, k->round,
			 WIFSIGNALED(status) ? "signal" : "exit status",
			 WIFSIGNALED(status) ? WTERMSIG(status)
					     : WEXITSTATUS(status));
	if (k->plen)
		printf("# round %u: %zu bytes of a torn log message "
		       "ignored\n", k->round, k->plen);
	k->kills++;
	k->mid_batch_kills += k->have_pending;

	verify_file(k, rng);
	printf("# %s round %2u: %s, block %4zu folios %7zu..%7zu, kill %s "
	       "%u%s: %u batches acked of %u, %zu records, file %llu\n",
	       k->v->name, k->round, k->cfg.fresh ? "fresh    " : "continued",
	       k->cfg.block, k->cfg.min_folio, k->cfg.max_folio,
	       k->cfg.kill_acks ? "after" : "at", 
	       k->cfg.kill_acks ? k->cfg.kill_acks : k->cfg.kill_ms,
	       k->cfg.kill_acks ? " acks" : " ms", k->round_acks,
	       k->round_intents, k->nrecs, (unsigned long long)k->end);
}

static void run_variant(void **state)
{
	struct kctx *k = *state;
	uint64_t rng = mix64(k->seed ^ k->v->id) | 1;
	unsigned rounds = test_iters(24, 3);
	for (k->round = 0; k->round < rounds; k->round++)
		run_round(k, &rng);
	printf("# %s: %lu kills survived (%lu in the middle of a batch), "
	       "%lu of %lu batches acknowledged, %lu acknowledged record "
	       "versions and %llu extent bytes checked\n",
	       k->v->name, k->kills, k->mid_batch_kills, k->acks, k->intents,
	       k->checked_versions,
	       (unsigned long long)k->checked_bytes);
	/* Not a durability condition, a sanity check that the test did
	 * something: rounds killed after N acks always see acks. */
	assert_true(k->acks > 0);
}

/* ---- setup ------------------------------------------------------------- */

static bool make_dir(struct kctx *k)
{
	const char *cands[] = {getenv("TMPDIR"), BUILDDIR, "/var/tmp", "/tmp",
			       "/dev/shm"};
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		if (!cands[i] || !*cands[i])
			continue;
		snprintf(k->dir, sizeof(k->dir), "%s/folio-kill9-XXXXXX",
			 cands[i]);
		if (!mkdtemp(k->dir))
			continue;
		struct statfs sf;
		if (!statfs(k->dir, &sf))
			printf("# %s: file in %s (f_type 0x%lx%s)\n",
			       k->v->name, k->dir, (unsigned long)sf.f_type,
			       sf.f_type == 0x01021994 ? ", tmpfs: not a disk"
						       : "");
		return true;
	}
	return false;
}

static int setup_variant(void **state, const struct variant *v)
{
	struct kctx *k = calloc(1, sizeof(*k));
	if (!k)
		return -1;
	k->v = v;
	k->fd = -1;
	k->next_batch = 1;
	*state = k;
	k->seed = test_seed(v == &v_posix ? "kill9 posix"
			    : v == &v_uring ? "kill9 uring"
					    : "kill9 wb-wait");
	k->cseed = mix64(k->seed ^ 0x6b696c6cu);
	if (!make_dir(k)) {
		printf("# kill9: no writable temporary directory\n");
		return -1;
	}
	k->have_dir = true;
	snprintf(k->path, sizeof(k->path), "%s/data", k->dir);
	k->fd = open(k->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	return k->fd >= 0 ? 0 : -1;
}

static int setup_posix(void **state)
{
	return setup_variant(state, &v_posix);
}

static int setup_uring(void **state)
{
	return setup_variant(state, &v_uring);
}

static int setup_wait(void **state)
{
	return setup_variant(state, &v_wait);
}

static int teardown(void **state)
{
	struct kctx *k = *state;
	if (!k)
		return 0;
	if (k->child > 0) {
		kill(k->child, SIGKILL);
		while (waitpid(k->child, NULL, 0) < 0 && errno == EINTR)
			;
	}
	ctx_reset_records(k);
	free(k->recs);
	free(k->fbuf);
	free(k->mbuf);
	free(k->vbuf);
	if (k->fd >= 0)
		close(k->fd);
	if (k->have_dir) {
		unlink(k->path);
		rmdir(k->dir);
	}
	free(k);
	return 0;
}

static void test_kill9_posix(void **state)
{
	run_variant(state);
}

static void test_kill9_uring(void **state)
{
	struct kctx *k = *state;
	struct folio_engine *e = NULL;
	int r = folio_engine_uring(&e, k->fd, 8, 0);
	if (r < 0) {
		printf("# kill9 uring: io_uring unavailable (%s): skipped\n",
		       strerror(-r));
		skip();
	}
	assert_int_equal(folio_engine_free(e), 0);
	run_variant(state);
}

static void test_kill9_wb_wait(void **state)
{
	run_variant(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kill9_posix, setup_posix,
						teardown),
		cmocka_unit_test_setup_teardown(test_kill9_uring, setup_uring,
						teardown),
		cmocka_unit_test_setup_teardown(test_kill9_wb_wait, setup_wait,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
