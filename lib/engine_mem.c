/* SPDX-License-Identifier: MIT */
/*
 * The mem engine: an in-memory backing store for tests. Besides storing
 * data it plays the awkward device: it fails requests on command (fault
 * rules), checks that every request went where its own map says, and
 * completes requests late and out of order (POLL and THREAD modes), which
 * is how the library's completion handling gets exercised without a real
 * device.
 *
 * One mutex guards everything. Completion callbacks run without it: the
 * library may submit from a completion, and that submit takes the lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "folio_state_mem.h"
#include "internal.h"

/*
 * Sparse storage indexed by device position: a top table of leaves, each
 * leaf a table of 64 KiB chunks. Memory follows the data written, so a
 * 2^40 capacity costs only the top table (4096 pointers) until used.
 */
#define CHUNK_SHIFT 16
#define CHUNK_SIZE ((size_t)1 << CHUNK_SHIFT)
#define LEAF_SHIFT 12
#define LEAF_ENTRIES ((size_t)1 << LEAF_SHIFT)
#define LEAF_SPAN_SHIFT (CHUNK_SHIFT + LEAF_SHIFT) /* bytes per leaf */

#define MEM_MAX_RULES 64
#define MEM_MAX_ERRNO 4095
/* Most requests one wait() or one thread round completes (bounds the
 * stack array they are collected in). */
#define MEM_BATCH 64
#define MEM_THREAD_BATCH 4
#define MEM_THREAD_MAX_DELAY_NS 100000

struct mem_leaf {
	size_t used; /* chunks allocated in this leaf */
	unsigned char *chunk[LEAF_ENTRIES];
};

struct mem_rule {
	struct folio_mem_fault f;
	uint64_t seen; /* matching calls so far */
};

/* A request waiting for completion and the outcome fixed at submit time:
 * bytes to move, or a negative errno. */
struct mem_held {
	struct folio_io *io;
	ssize_t plan;
};

struct mem_ctx {
	pthread_mutex_t lock;
	pthread_cond_t work_cv;     /* completion thread: work or stop */
	pthread_cond_t progress_cv; /* completions finished, mode switched */

	uint64_t capacity;
	uint64_t size;
	struct mem_leaf **top;
	size_t ntop;
	uint64_t mem_bytes;

	uint64_t extent_size; /* 0: no map */
	bool scatter;
	struct folio_engine *engine;

	struct mem_rule rules[MEM_MAX_RULES];
	unsigned nrules;

	enum folio_mem_mode mode;
	uint64_t rng;
	struct mem_held *held;
	size_t nheld, held_cap;
	uint64_t inflight;    /* accepted, completion not yet returned */
	unsigned completing;  /* requests taken out whose callback runs */
	uint64_t completions; /* progress counter for waiters */
	bool switching;
	bool closing;

	pthread_t thread;
	bool thread_running;
	bool thread_stop;

	struct folio_mem_stats st;
};

/* Lets wait() and set_mode() notice they run on the completion thread. */
static _Thread_local struct mem_ctx *mem_thread_self;

/*
 * Requests this thread has taken for completion and not yet accounted
 * for. They still count as in flight for other threads (a waiter wakes
 * only once their callbacks have returned), but a wait() called from one
 * of their callbacks must not wait for itself.
 */
struct mem_own {
	const struct mem_ctx *ctx;
	uint64_t n;
};
static _Thread_local struct mem_own mem_own;

static struct mem_own own_enter(const struct mem_ctx *c, uint64_t k)
{
	struct mem_own saved = mem_own;
	if (mem_own.ctx != c)
		mem_own = (struct mem_own){c, 0};
	mem_own.n += k;
	return saved;
}

static void own_leave(struct mem_own saved)
{
	mem_own = saved;
}

static uint64_t own_of(const struct mem_ctx *c)
{
	return mem_own.ctx == c ? mem_own.n : 0;
}

static uint64_t splitmix64(uint64_t x)
{
	x += UINT64_C(0x9E3779B97F4A7C15);
	x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

/* xorshift64*; the state is never 0 (seeded through splitmix64). */
static uint64_t mem_rand(struct mem_ctx *c)
{
	uint64_t x = c->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->rng = x;
	return x * UINT64_C(0x2545F4914F6CDD1D);
}

static void mem_seed(struct mem_ctx *c, uint64_t seed)
{
	c->rng = splitmix64(seed);
	if (!c->rng)
		c->rng = 1;
}

static struct mem_ctx *mem_of(struct folio_engine *e)
{
	return e && e->kind == ENGINE_MEM ? e->ctx : NULL;
}

/* ---- sparse store (device positions) -------------------------------- */

/* Device bytes the store must be able to hold: with scatter the last,
 * possibly partial, extent pair may put file bytes below the capacity at
 * device places above it. */
static uint64_t dev_limit(uint64_t capacity, uint64_t extent_size,
			  bool scatter)
{
	if (!scatter)
		return capacity;
	uint64_t pair = extent_size * 2;
	return (capacity + pair - 1) & ~(pair - 1);
}

static int store_reserve(struct mem_ctx *c, uint64_t limit)
{
	size_t need = (size_t)((limit + ((UINT64_C(1) << LEAF_SPAN_SHIFT) - 1)) >>
			       LEAF_SPAN_SHIFT);
	if (need <= c->ntop)
		return 0;
	struct mem_leaf **t = realloc(c->top, need * sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t + c->ntop, 0, (need - c->ntop) * sizeof(*t));
	c->top = t;
	c->ntop = need;
	return 0;
}

static unsigned char *store_chunk(struct mem_ctx *c, uint64_t dev, bool alloc)
{
	uint64_t ci = dev >> CHUNK_SHIFT;
	size_t ti = (size_t)(ci >> LEAF_SHIFT), li = ci & (LEAF_ENTRIES - 1);
	if (ti >= c->ntop)
		return NULL;
	struct mem_leaf *leaf = c->top[ti];
	if (!leaf) {
		if (!alloc)
			return NULL;
		leaf = calloc(1, sizeof(*leaf));
		if (!leaf)
			return NULL;
		c->top[ti] = leaf;
	}
	if (!leaf->chunk[li] && alloc) {
		leaf->chunk[li] = calloc(1, CHUNK_SIZE);
		if (leaf->chunk[li]) {
			leaf->used++;
			c->mem_bytes += CHUNK_SIZE;
		}
	}
	return leaf->chunk[li];
}

static void store_read(struct mem_ctx *c, uint64_t dev, void *buf, size_t len)
{
	unsigned char *out = buf;
	while (len) {
		size_t off = dev & (CHUNK_SIZE - 1), n = MIN(len, CHUNK_SIZE - off);
		unsigned char *ch = store_chunk(c, dev, false);
		if (ch)
			memcpy(out, ch + off, n);
		else
			memset(out, 0, n);
		out += n;
		dev += n;
		len -= n;
	}
}

/* Returns the bytes stored: less than @len only when memory ran out. */
static size_t store_write(struct mem_ctx *c, uint64_t dev, const void *buf,
			  size_t len)
{
	const unsigned char *in = buf;
	size_t done = 0;
	while (done < len) {
		size_t off = dev & (CHUNK_SIZE - 1),
		       n = MIN(len - done, CHUNK_SIZE - off);
		unsigned char *ch = store_chunk(c, dev, true);
		if (!ch)
			break;
		memcpy(ch + off, in + done, n);
		done += n;
		dev += n;
	}
	return done;
}

/* Zero device bytes [dev, dev+len); chunks wholly inside are freed. */
static void store_zero(struct mem_ctx *c, uint64_t dev, uint64_t len)
{
	while (len) {
		uint64_t off = dev & (CHUNK_SIZE - 1),
			 n = MIN(len, CHUNK_SIZE - off);
		uint64_t ci = dev >> CHUNK_SHIFT;
		size_t ti = (size_t)(ci >> LEAF_SHIFT),
		       li = ci & (LEAF_ENTRIES - 1);
		if (ti >= c->ntop)
			return;
		struct mem_leaf *leaf = c->top[ti];
		if (!leaf) {
			/* Skip the rest of this absent leaf in one step. */
			uint64_t span = (UINT64_C(1) << LEAF_SPAN_SHIFT) -
					(dev & ((UINT64_C(1) << LEAF_SPAN_SHIFT) - 1));
			span = MIN(span, len);
			dev += span;
			len -= span;
			continue;
		}
		unsigned char *ch = leaf->chunk[li];
		if (ch) {
			if (n == CHUNK_SIZE) {
				free(ch);
				leaf->chunk[li] = NULL;
				c->mem_bytes -= CHUNK_SIZE;
				if (!--leaf->used) {
					free(leaf);
					c->top[ti] = NULL;
				}
			} else {
				memset(ch + off, 0, (size_t)n);
			}
		}
		dev += n;
		len -= n;
	}
}

static void store_free(struct mem_ctx *c)
{
	for (size_t t = 0; t < c->ntop; t++) {
		struct mem_leaf *leaf = c->top[t];
		if (!leaf)
			continue;
		for (size_t i = 0; i < LEAF_ENTRIES; i++)
			free(leaf->chunk[i]);
		free(leaf);
	}
	free(c->top);
}

/* ---- the map -------------------------------------------------------- */

static uint64_t map_dev(const struct mem_ctx *c, uint64_t pos)
{
	if (!c->extent_size || !c->scatter)
		return pos;
	return pos ^ c->extent_size; /* extent k <-> extent k ^ 1 */
}

/*
 * Split file range [pos, pos+len) into device pieces and call fn on each
 * with the piece's offset inside the range. With @any_order the caller
 * does not care which file byte lands where (zeroing): whole extent pairs
 * then go as one piece, since a pair maps onto itself as a whole, and a
 * truncate of a huge range costs what the store holds, not what the range
 * spans.
 */
static void for_each_piece(struct mem_ctx *c, uint64_t pos, uint64_t len,
			   bool any_order,
			   void (*fn)(struct mem_ctx *c, uint64_t dev,
				      uint64_t file_off, uint64_t n, void *arg),
			   void *arg)
{
	uint64_t off = 0;
	if (!c->extent_size || !c->scatter) {
		if (len)
			fn(c, pos, 0, len, arg);
		return;
	}
	uint64_t e = c->extent_size, pair = 2 * e;
	while (off < len) {
		uint64_t p = pos + off, n;
		if (any_order && !(p & (pair - 1)) && len - off >= pair) {
			n = (len - off) & ~(pair - 1);
			fn(c, p, off, n, arg);
		} else {
			n = MIN(len - off, e - (p & (e - 1)));
			fn(c, map_dev(c, p), off, n, arg);
		}
		off += n;
	}
}

static void piece_read(struct mem_ctx *c, uint64_t dev, uint64_t off,
		       uint64_t n, void *arg)
{
	store_read(c, dev, (unsigned char *)arg + off, (size_t)n);
}

struct piece_write_arg {
	const unsigned char *buf;
	bool failed;
};

static void piece_write(struct mem_ctx *c, uint64_t dev, uint64_t off,
			uint64_t n, void *arg)
{
	struct piece_write_arg *a = arg;
	if (store_write(c, dev, a->buf + off, (size_t)n) < n)
		a->failed = true;
}

static void piece_zero(struct mem_ctx *c, uint64_t dev, uint64_t off,
		       uint64_t n, void *arg)
{
	store_zero(c, dev, n);
}

/* Shrink the size; everything past it becomes zero (the invariant that
 * lets a later write or truncate grow the object with zeros). */
static void mem_shrink(struct mem_ctx *c, uint64_t size)
{
	if (size < c->size) {
		/* Bytes past the old size are zero already, so zeroing up to
		 * the end of its chunk lets that chunk be freed too. */
		uint64_t end = (c->size + CHUNK_SIZE - 1) & ~(uint64_t)(CHUNK_SIZE - 1);
		for_each_piece(c, size, end - size, true, piece_zero, NULL);
		c->size = size;
	}
}

/* Does io go where the map says? */
static bool mem_directed(const struct mem_ctx *c, const struct folio_io *io)
{
	if (io->dev_pos != map_dev(c, io->pos))
		return false;
	if (c->extent_size && c->scatter) {
		/* Neighbouring extents are never device-contiguous here. */
		uint64_t in_ext = c->extent_size - (io->pos & (c->extent_size - 1));
		if (io->len > in_ext)
			return false;
	}
	return true;
}

static int mem_map(void *arg, uint64_t pos, uint64_t len,
		   struct folio_extent *ext)
{
	struct mem_ctx *c = arg;
	if (!ext || pos >= FOLIO_MAX_POS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->st.map_calls++;
	int ret = 0;
	if (!c->extent_size) {
		/* Only reachable through a stale copy of the ops. */
		ret = -EINVAL;
	} else {
		uint64_t start = pos & ~(c->extent_size - 1);
		ext->pos = start;
		ext->len = c->extent_size;
		ext->dev_pos = map_dev(c, start);
		ext->flags = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ---- faults --------------------------------------------------------- */

/* The rule that fires on this call, or NULL. Every matching rule counts
 * the call, so each rule's skip/count window is independent. */
static const struct folio_mem_fault *fault_check(struct mem_ctx *c,
						 unsigned opbit,
						 const struct folio_io *io)
{
	const struct folio_mem_fault *fired = NULL;
	for (unsigned i = 0; i < c->nrules; i++) {
		struct mem_rule *r = &c->rules[i];
		if (!(r->f.ops & opbit))
			continue;
		if (io && r->f.len) {
			uint64_t end = io->pos + MAX(io->len, (size_t)1);
			if (io->pos >= r->f.pos + r->f.len || end <= r->f.pos)
				continue;
		}
		r->seen++;
		if (r->seen > r->f.skip &&
		    (!r->f.count || r->seen - r->f.skip <= r->f.count) &&
		    !fired)
			fired = &r->f;
	}
	if (fired)
		c->st.faults++;
	return fired;
}

/* Decide the fate of an accepted request (lock held). */
static ssize_t mem_plan(struct mem_ctx *c, const struct folio_io *io)
{
	if (io->op == FOLIO_IO_READ)
		c->st.read_requests++;
	else
		c->st.write_requests++;
	if (!mem_directed(c, io)) {
		c->st.misdirected++;
		return -EIO;
	}
	if (io->op == FOLIO_IO_WRITE && io->pos + io->len > c->capacity)
		return -ENOSPC;
	const struct folio_mem_fault *f =
		fault_check(c, 1u << io->op, io);
	if (!f)
		return (ssize_t)io->len;
	if (f->error)
		return f->error;
	return (ssize_t)MIN(f->short_len, io->len);
}

/* Move the data of a request whose plan is to transfer @n bytes (lock
 * held). Returns the completion result. */
static ssize_t mem_perform(struct mem_ctx *c, struct folio_io *io, ssize_t n)
{
	if (n < 0)
		return n;
	size_t want = (size_t)n, done = 0;
	uint64_t dev = io->dev_pos;
	for (int i = 0; i < io->iovcnt && done < want; i++) {
		size_t l = MIN(io->iov[i].iov_len, want - done);
		if (io->op == FOLIO_IO_READ) {
			store_read(c, dev + done, io->iov[i].iov_base, l);
		} else {
			size_t w = store_write(c, dev + done,
					       io->iov[i].iov_base, l);
			if (w < l) {
				done += w;
				break;
			}
		}
		done += l;
	}
	if (io->op == FOLIO_IO_READ) {
		/* Bytes at or past the size read as zeros whatever the store
		 * holds at their device place. */
		if (io->pos + done > c->size) {
			size_t from = c->size > io->pos ?
					      (size_t)(c->size - io->pos) : 0;
			engine_iov_zero(io->iov, io->iovcnt, from, done);
		}
		c->st.read_bytes += done;
	} else {
		c->st.write_bytes += done;
		if (done && io->pos + done > c->size)
			c->size = io->pos + done;
		if (done < want && !done)
			return -ENOMEM;
	}
	return (ssize_t)done;
}

/* Account for @n requests whose callbacks have returned, and wake
 * waiters. Takes the lock. */
static void mem_finished(struct mem_ctx *c, unsigned n)
{
	pthread_mutex_lock(&c->lock);
	c->inflight -= n;
	c->completing -= n;
	c->completions += n;
	pthread_cond_broadcast(&c->progress_cv);
	pthread_mutex_unlock(&c->lock);
}

/* Remove held request i (order does not matter: picks are random). */
static struct mem_held held_take(struct mem_ctx *c, size_t i)
{
	struct mem_held h = c->held[i];
	c->held[i] = c->held[--c->nheld];
	return h;
}

/* Take up to @max held requests in pseudo-random order, perform them, and
 * store (io, result) in @out (lock held). Returns how many. */
static unsigned mem_take_random(struct mem_ctx *c, struct mem_held *out,
				unsigned max)
{
	unsigned k = 0;
	while (k < max && c->nheld) {
		struct mem_held h = held_take(c, mem_rand(c) % c->nheld);
		out[k].io = h.io;
		out[k].plan = mem_perform(c, h.io, h.plan);
		k++;
	}
	c->completing += k;
	return k;
}

static void deliver(const struct mem_ctx *c, struct mem_held *done,
		    unsigned k)
{
	struct mem_own saved = own_enter(c, k);
	for (unsigned i = 0; i < k; i++)
		folio_io_complete(done[i].io, done[i].plan);
	own_leave(saved);
}

/* ---- callbacks ------------------------------------------------------ */

static int mem_submit(void *arg, struct folio_io *io)
{
	struct mem_ctx *c = arg;
	int ret = engine_check_io(io);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	if (c->closing) {
		pthread_mutex_unlock(&c->lock);
		return -ESHUTDOWN;
	}
	if (c->mode != FOLIO_MEM_SYNC && c->nheld == c->held_cap) {
		/* Grow before deciding anything so a refusal leaves the
		 * counters and rules untouched. */
		size_t cap = c->held_cap ? c->held_cap * 2 : 64;
		struct mem_held *h = realloc(c->held, cap * sizeof(*h));
		if (!h) {
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		c->held = h;
		c->held_cap = cap;
	}
	ssize_t plan = mem_plan(c, io);
	c->inflight++;
	if (c->mode != FOLIO_MEM_SYNC) {
		c->held[c->nheld++] = (struct mem_held){io, plan};
		if (c->mode == FOLIO_MEM_THREAD)
			pthread_cond_signal(&c->work_cv);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	struct mem_held h = {io, mem_perform(c, io, plan)};
	c->completing++;
	pthread_mutex_unlock(&c->lock);
	deliver(c, &h, 1);
	mem_finished(c, 1);
	return 0;
}

static int mem_wait(void *arg)
{
	struct mem_ctx *c = arg;
	struct mem_held done[MEM_BATCH];
	pthread_mutex_lock(&c->lock);
	uint64_t seen = c->completions;
	for (;;) {
		if (c->inflight == own_of(c) || c->completions != seen)
			break;
		/* The completion thread waiting on itself would never wake:
		 * there it completes like POLL mode. */
		bool drive = c->nheld && (c->mode == FOLIO_MEM_POLL ||
					  mem_thread_self == c);
		if (drive) {
			unsigned max = c->mode == FOLIO_MEM_POLL ?
				(unsigned)MIN(c->nheld, (size_t)MEM_BATCH) : 1;
			unsigned k = 1 + (unsigned)(mem_rand(c) % max);
			k = mem_take_random(c, done, k);
			pthread_mutex_unlock(&c->lock);
			deliver(c, done, k);
			mem_finished(c, k);
			return 0;
		}
		/* Someone else (another waiter, the thread, a SYNC submit,
		 * a mode switch) is completing what is in flight. */
		pthread_cond_wait(&c->progress_cv, &c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int mem_flush(void *arg)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->st.flushes++;
	const struct folio_mem_fault *f =
		fault_check(c, FOLIO_MEM_OP_FLUSH, NULL);
	pthread_mutex_unlock(&c->lock);
	return f ? f->error : 0;
}

static int mem_truncate(void *arg, uint64_t size)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->st.truncates++;
	const struct folio_mem_fault *f =
		fault_check(c, FOLIO_MEM_OP_TRUNCATE, NULL);
	int ret = 0;
	if (f)
		ret = f->error;
	else if (size > c->capacity)
		ret = -EFBIG;
	else if (size < c->size)
		mem_shrink(c, size);
	else
		c->size = size;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void *mem_thread_main(void *arg)
{
	struct mem_ctx *c = arg;
	struct mem_held done[MEM_THREAD_BATCH];
	mem_thread_self = c;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->thread_stop &&
		       (c->mode != FOLIO_MEM_THREAD || !c->nheld))
			pthread_cond_wait(&c->work_cv, &c->lock);
		if (c->thread_stop)
			break;
		uint64_t r = mem_rand(c);
		/* Half the rounds complete at once, the others after a
		 * delay, so requests overtake each other in time too. */
		if (r & 1) {
			struct timespec ts = {
				0, (long)((r >> 1) % MEM_THREAD_MAX_DELAY_NS)};
			pthread_mutex_unlock(&c->lock);
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&c->lock);
			if (c->thread_stop)
				break;
			if (c->mode != FOLIO_MEM_THREAD || !c->nheld)
				continue;
		}
		unsigned max = (unsigned)MIN(c->nheld, (size_t)MEM_THREAD_BATCH);
		unsigned k = 1 + (unsigned)(mem_rand(c) % max);
		k = mem_take_random(c, done, k);
		pthread_mutex_unlock(&c->lock);
		deliver(c, done, k);
		pthread_mutex_lock(&c->lock);
		c->inflight -= k;
		c->completing -= k;
		c->completions += k;
		pthread_cond_broadcast(&c->progress_cv);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Stop and join the completion thread (lock not held). Held requests stay
 * held. */
static void mem_stop_thread(struct mem_ctx *c)
{
	pthread_mutex_lock(&c->lock);
	bool running = c->thread_running;
	c->thread_stop = true;
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	if (running)
		pthread_join(c->thread, NULL);
	pthread_mutex_lock(&c->lock);
	c->thread_running = false;
	c->thread_stop = false;
	pthread_mutex_unlock(&c->lock);
}

static void mem_destroy(void *arg)
{
	struct mem_ctx *c = arg;
	pthread_mutex_lock(&c->lock);
	c->closing = true;
	pthread_mutex_unlock(&c->lock);
	mem_stop_thread(c);

	pthread_mutex_lock(&c->lock);
	struct mem_held *held = c->held;
	size_t n = c->nheld;
	c->held = NULL;
	c->nheld = c->held_cap = 0;
	c->completing += (unsigned)n;
	pthread_mutex_unlock(&c->lock);
	struct mem_own saved = own_enter(c, n);
	for (size_t i = 0; i < n; i++)
		folio_io_complete(held[i].io, -ECANCELED);
	own_leave(saved);
	free(held);

	/* A completion delivered by another thread may still be about to
	 * account for itself; the context must outlive that. */
	pthread_mutex_lock(&c->lock);
	c->inflight -= n;
	c->completing -= (unsigned)n;
	while (c->completing)
		pthread_cond_wait(&c->progress_cv, &c->lock);
	pthread_mutex_unlock(&c->lock);

	store_free(c);
	pthread_cond_destroy(&c->work_cv);
	pthread_cond_destroy(&c->progress_cv);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const struct folio_engine_ops mem_ops = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = mem_submit,
	.flush = mem_flush,
	.truncate = mem_truncate,
	.wait = mem_wait,
	.destroy = mem_destroy,
};

/* ---- public API ----------------------------------------------------- */

int folio_engine_mem(struct folio_engine **out, uint64_t capacity)
{
	if (!out || !capacity || capacity > FOLIO_MEM_MAX_CAPACITY)
		return -EINVAL;
	struct mem_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->capacity = capacity;
	c->mode = FOLIO_MEM_SYNC;
	mem_seed(c, 1);
	int ret = store_reserve(c, capacity);
	if (ret) {
		free(c);
		return ret;
	}
	if (pthread_mutex_init(&c->lock, NULL)) {
		ret = -ENOMEM;
		goto fail_store;
	}
	if (pthread_cond_init(&c->work_cv, NULL)) {
		ret = -ENOMEM;
		goto fail_lock;
	}
	if (pthread_cond_init(&c->progress_cv, NULL)) {
		ret = -ENOMEM;
		goto fail_work;
	}
	struct folio_engine *e;
	ret = engine_create(&e, &mem_ops, c, ENGINE_MEM);
	if (ret)
		goto fail_progress;
	c->engine = e;
	*out = e;
	return 0;

fail_progress:
	pthread_cond_destroy(&c->progress_cv);
fail_work:
	pthread_cond_destroy(&c->work_cv);
fail_lock:
	pthread_mutex_destroy(&c->lock);
fail_store:
	store_free(c);
	free(c);
	return ret;
}

int folio_engine_mem_inject(struct folio_engine *e,
			    const struct folio_mem_fault *fault)
{
	struct mem_ctx *c = mem_of(e);
	const unsigned all = FOLIO_MEM_OP_READ | FOLIO_MEM_OP_WRITE |
			     FOLIO_MEM_OP_FLUSH | FOLIO_MEM_OP_TRUNCATE;
	if (!c || !fault || fault->sz < sizeof(*fault) || !fault->ops ||
	    (fault->ops & ~all) || fault->error > 0 ||
	    fault->error < -MEM_MAX_ERRNO ||
	    !fault->error == !fault->short_len ||
	    (!fault->error &&
	     (fault->ops & (FOLIO_MEM_OP_FLUSH | FOLIO_MEM_OP_TRUNCATE))) ||
	    fault->len > UINT64_MAX - fault->pos)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int ret = 0;
	if (c->nrules == MEM_MAX_RULES) {
		ret = -ENOSPC;
	} else {
		struct mem_rule *r = &c->rules[c->nrules++];
		r->f = *fault;
		r->f.sz = sizeof(r->f);
		r->seen = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int folio_engine_mem_clear_faults(struct folio_engine *e)
{
	struct mem_ctx *c = mem_of(e);
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->nrules = 0;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int folio_engine_mem_set_mode(struct folio_engine *e,
			      enum folio_mem_mode mode, uint64_t seed)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (mode != FOLIO_MEM_SYNC && mode != FOLIO_MEM_POLL &&
		   mode != FOLIO_MEM_THREAD))
		return -EINVAL;
	if (mem_thread_self == c)
		return -EDEADLK;
	pthread_mutex_lock(&c->lock);
	if (c->switching || c->closing) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	c->switching = true;
	bool start = mode == FOLIO_MEM_THREAD && !c->thread_running;
	pthread_mutex_unlock(&c->lock);

	/* Start the thread first so a failure leaves everything as it was:
	 * it idles until the mode says THREAD. */
	if (start) {
		pthread_t t;
		if (pthread_create(&t, NULL, mem_thread_main, c)) {
			pthread_mutex_lock(&c->lock);
			c->switching = false;
			pthread_mutex_unlock(&c->lock);
			return -EAGAIN;
		}
		pthread_mutex_lock(&c->lock);
		c->thread = t;
		c->thread_running = true;
		pthread_mutex_unlock(&c->lock);
	}

	pthread_mutex_lock(&c->lock);
	enum folio_mem_mode old = c->mode;
	c->mode = mode;
	mem_seed(c, seed);
	struct mem_held *held = c->held;
	size_t n = c->nheld;
	c->held = NULL;
	c->nheld = c->held_cap = 0;
	c->completing += (unsigned)n;
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->lock);

	if (old == FOLIO_MEM_THREAD && mode != FOLIO_MEM_THREAD)
		mem_stop_thread(c);

	struct mem_own saved = own_enter(c, n);
	for (size_t i = 0; i < n; i++) {
		pthread_mutex_lock(&c->lock);
		ssize_t res = mem_perform(c, held[i].io, held[i].plan);
		pthread_mutex_unlock(&c->lock);
		folio_io_complete(held[i].io, res);
	}
	own_leave(saved);
	free(held);

	pthread_mutex_lock(&c->lock);
	c->inflight -= n;
	c->completing -= (unsigned)n;
	c->completions += n;
	c->switching = false;
	pthread_cond_broadcast(&c->progress_cv);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int folio_engine_mem_set_map(struct folio_engine *e, uint64_t extent_size,
			     bool scatter)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (extent_size && (!is_pow2(extent_size) || extent_size < 512 ||
				   extent_size > FOLIO_MEM_MAX_EXTENT)) ||
	    (scatter && !extent_size))
		return -EINVAL;
	if (atomic_load(&e->users))
		return -EBUSY;
	pthread_mutex_lock(&c->lock);
	int ret = 0;
	if (c->size) {
		ret = -EBUSY;
	} else {
		ret = store_reserve(c, extent_size ?
				dev_limit(c->capacity, extent_size, scatter) :
				c->capacity);
	}
	if (!ret) {
		c->extent_size = extent_size;
		c->scatter = scatter;
		/* No mapping uses the engine, so nobody reads ops.map. */
		e->ops.map = extent_size ? mem_map : NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int folio_engine_mem_stats(struct folio_engine *e, struct folio_mem_stats *st)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || !st || st->sz < sizeof(size_t))
		return -EINVAL;
	struct folio_mem_stats now;
	pthread_mutex_lock(&c->lock);
	now = c->st;
	now.size = c->size;
	now.inflight = c->inflight;
	now.mem_bytes = c->mem_bytes;
	pthread_mutex_unlock(&c->lock);
	size_t n = MIN(st->sz, sizeof(now));
	memcpy((char *)st + sizeof(size_t), (char *)&now + sizeof(size_t),
	       n - sizeof(size_t));
	return 0;
}

int folio_engine_mem_peek(struct folio_engine *e, void *buf, size_t len,
			  uint64_t pos)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (!buf && len))
		return -EINVAL;
	if (pos > c->capacity || len > c->capacity - pos)
		return -ERANGE;
	pthread_mutex_lock(&c->lock);
	for_each_piece(c, pos, len, false, piece_read, buf);
	if (pos + len > c->size) {
		uint64_t from = MAX(pos, c->size);
		memset((char *)buf + (from - pos), 0, (size_t)(pos + len - from));
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int folio_engine_mem_poke(struct folio_engine *e, const void *buf,
			  size_t len, uint64_t pos)
{
	struct mem_ctx *c = mem_of(e);
	if (!c || (!buf && len))
		return -EINVAL;
	if (pos > FOLIO_MAX_POS || len > FOLIO_MAX_POS - pos)
		return -ERANGE;
	if (pos + len > c->capacity)
		return -ENOSPC;
	if (!len)
		return 0;
	pthread_mutex_lock(&c->lock);
	struct piece_write_arg a = {buf, false};
	for_each_piece(c, pos, len, false, piece_write, &a);
	int ret = 0;
	if (a.failed) {
		/* Leave no stray bytes past the size behind. */
		if (pos + len > c->size)
			for_each_piece(c, MAX(pos, c->size),
				       pos + len - MAX(pos, c->size), true,
				       piece_zero, NULL);
		ret = -ENOMEM;
	} else if (pos + len > c->size) {
		c->size = pos + len;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}
