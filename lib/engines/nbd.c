/* SPDX-License-Identifier: MIT */
/*
 * The NBD engine (include/folio_state_nbd.h has the contract).
 *
 * A request (struct ne_rq) is one folio_io, or an internal flush or
 * write-zeroes a caller waits for. It is cut into NBD commands (struct
 * ne_cmd, allocated with it), each sent on one connection. The request is
 * finished when its last command has replied and nobody is still issuing
 * one of them (rq->refs); finished requests go on a list that the engine
 * thread delivers with no lock held, since a completion may submit again.
 *
 * Locks, outermost first: ctx->reconnect (one thread reopens connections
 * at a time), conn->hl (held around every libnbd call on the connection's
 * handle, and while the handle is swapped; libnbd's own handle lock is
 * inside it), ctx->mu (requests, commands, counters). libnbd runs
 * completion callbacks with its handle lock held, from whichever thread
 * called into the handle, so a callback takes only mu and never calls
 * libnbd.
 *
 * Lifetime of a command's memory: a command is in a connection's `sent`
 * list from the moment it is given a connection until its callback ran
 * or the connection was closed (nbd_close() returns only once libnbd has
 * dropped every callback of the handle), so a request is freed only
 * after libnbd can no longer call back into it.
 */
#include <errno.h>
#include <libnbd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "engines/builtin.h"
#include "engines/nbd_args.h"

/* Largest read or write command: the server's maximum when smaller. Big
 * enough that a merged writeback request is one command per few MiB. */
#define NE_CMD_MAX (4u << 20)
/* Shortest average run of consecutive request memory worth a command of
 * its own instead of a copy through a bounce buffer. */
#define NE_RUN_MIN (256u << 10)
/* Largest write-zeroes command (the protocol's length is 32 bits). */
#define NE_ZERO_MAX (1u << 30)
/* After reconnecting failed, calls fail at once for this long. */
#define NE_RETRY_HOLDOFF_NS 100000000LL
#define NE_FIRST_PAUSE_NS 10000000L
/* Engine thread's poll() period: how often timeouts are checked. */
#define NE_TICK_MS 50

#define NS_PER_MS 1000000LL

enum ne_kind { NE_READ, NE_WRITE, NE_ZERO, NE_FLUSH };
enum ne_state { NE_NEW, NE_SENT, NE_DONE };

struct ne_ctx;
struct ne_rq;

struct ne_cmd {
	struct ne_cmd *next, *prev; /* in a connection's sent list, or the
				     * pending queue (next only) */
	struct ne_rq *rq;
	enum ne_kind kind;
	enum ne_state state;
	uint32_t flags;    /* LIBNBD_CMD_FLAG_* */
	uint64_t off;      /* export offset */
	size_t len;
	size_t io_off;     /* offset of this command's bytes in the request */
	void *buf;         /* into the request's memory, or bounce */
	void *bounce;      /* owned: a command over several segments */
	unsigned conn;
	uint64_t gen;      /* the connection's generation when given it */
	int64_t sent_ns;
	uint64_t mark;     /* flush: plain writes done when it was made */
};

struct ne_rq {
	struct ne_rq *next;  /* in the done list */
	struct ne_ctx *c;
	struct folio_io *io; /* NULL for an internal request */
	unsigned ncmd;
	unsigned refs;       /* commands not finished + issuers at work */
	int err;             /* first error */
	bool done;           /* internal: finished (the waiter frees it) */
	struct ne_cmd cmd[];
};

struct ne_conn {
	pthread_mutex_t hl;
	struct nbd_handle *h; /* NULL while closed (written under hl+mu) */
	uint64_t gen;         /* bumped when h changes (under hl+mu) */
	unsigned inflight;    /* commands in sent (mu) */
	struct ne_cmd sent;   /* list head, oldest first (mu) */
};

struct ne_ctx {
	char *uri;
	unsigned nconn, depth, flags, tries;
	int64_t timeout_ns;
	uint64_t export_size;
	size_t cmd_max;
	bool can_flush, can_zero, durable;
	const void *zeros; /* cmd_max zero bytes, when the server cannot
			    * write zeroes itself */

	pthread_mutex_t reconnect;
	int64_t retry_after_ns; /* under reconnect */
	atomic_uint ndead;      /* connections closed */

	pthread_mutex_t mu;
	pthread_cond_t cond;    /* internal requests finished, deliveries */
	struct ne_cmd *pend_head, *pend_tail;
	struct ne_rq *done_head, *done_tail;
	uint64_t outstanding;   /* folio_io requests not yet delivered */
	uint64_t plain_done;    /* plain writes that succeeded */
	uint64_t stable_mark;   /* plain_done covered by a barrier */
	uint64_t zero_from;     /* export bytes past this are zero */
	bool lost;              /* a connection dropped since the last
				 * barrier: the next one fails */
	bool stop;
	bool driving;           /* a thread drives the connections */
	unsigned want_drive;    /* wait() callers that want to */
	uint64_t delivered;     /* folio_io requests completed */
	struct folio_nbd_info st;

	int wake_fd;
	pthread_t thread;
	struct ne_conn conn[];
};

/* The engine whose connections this thread is driving (polling). */
static _Thread_local const struct ne_ctx *ne_self;
/* Requests this thread is delivering (a wait() inside their completion
 * must not wait for them). */
static _Thread_local struct engine_own ne_own;

/* Signed: deadlines and hold-offs are compared by subtraction. */
static int64_t now_ns(void)
{
	return (int64_t)base_now_ns();
}

static int nbd_err(int dflt)
{
	int e = nbd_get_errno();
	return e > 0 ? -e : dflt;
}

static void ne_kick(struct ne_ctx *c)
{
	if (ne_self == c)
		return;
	uint64_t one = 1;
	ssize_t r = write(c->wake_fd, &one, sizeof(one));
	(void)r; /* a full counter wakes the thread just the same */
}

/* ---- copying between a request's segments and a bounce buffer ------- */

static void iov_copy(const struct folio_io *io, size_t off, void *buf,
		     size_t len, bool to_iov)
{
	char *b = buf;
	for (int i = 0; i < io->iovcnt && len; i++) {
		size_t l = io->iov[i].iov_len;
		if (off >= l) {
			off -= l;
			continue;
		}
		size_t n = MIN(l - off, len);
		char *p = (char *)io->iov[i].iov_base + off;
		if (to_iov)
			memcpy(p, b, n);
		else
			memcpy(b, p, n);
		b += n;
		len -= n;
		off = 0;
	}
}

/* The bytes of @io from @off that lie at consecutive addresses (segments
 * that follow each other in memory, as folios of one allocator run often
 * do): their start in *@base and their count. */
static size_t iov_run(const struct folio_io *io, size_t off, char **base)
{
	int i = 0;
	while (i < io->iovcnt && off >= io->iov[i].iov_len)
		off -= io->iov[i++].iov_len;
	if (i == io->iovcnt)
		return 0;
	*base = (char *)io->iov[i].iov_base + off;
	size_t n = io->iov[i].iov_len - off;
	while (++i < io->iovcnt &&
	       (char *)io->iov[i].iov_base == *base + n)
		n += io->iov[i].iov_len;
	return n;
}

/* Commands for the first @in bytes of @io when each goes straight to or
 * from the request's memory, one per run of consecutive segments (split
 * at @max); 0 when the runs are too short on average for that to beat one
 * command over a bounce buffer (a command costs a round trip's share on
 * the server, a copy only memory bandwidth). */
static unsigned direct_cmds(const struct folio_io *io, size_t in, size_t max)
{
	unsigned runs = 0, cmds = 0;
	for (size_t off = 0; off < in;) {
		char *p;
		size_t n = MIN(iov_run(io, off, &p), in - off);
		runs++;
		cmds += (unsigned)((n + max - 1) / max);
		off += n;
	}
	return runs <= 1 + in / NE_RUN_MIN ? cmds : 0;
}

/* ---- finishing commands and requests (mu held) ----------------------- */

static void list_del(struct ne_cmd *x)
{
	x->prev->next = x->next;
	x->next->prev = x->prev;
	x->next = x->prev = NULL;
}

static void rq_put(struct ne_ctx *c, struct ne_rq *rq)
{
	if (--rq->refs)
		return;
	if (!rq->io) {
		rq->done = true;
		pthread_cond_broadcast(&c->cond);
		return;
	}
	rq->next = NULL;
	if (c->done_tail)
		c->done_tail->next = rq;
	else
		c->done_head = rq;
	c->done_tail = rq;
}

static void cmd_finish(struct ne_ctx *c, struct ne_cmd *cmd, int err)
{
	struct ne_rq *rq = cmd->rq;
	if (cmd->state == NE_DONE)
		return;
	if (cmd->state == NE_SENT) {
		list_del(cmd);
		c->conn[cmd->conn].inflight--;
	}
	cmd->state = NE_DONE;
	if (err && !rq->err)
		rq->err = err;
	if (!err) {
		if ((cmd->kind == NE_WRITE || cmd->kind == NE_ZERO) &&
		    !(cmd->flags & LIBNBD_CMD_FLAG_FUA))
			c->plain_done++;
		if (cmd->kind == NE_FLUSH && cmd->mark > c->stable_mark)
			c->stable_mark = cmd->mark;
	}
	rq_put(c, rq);
}

/* libnbd's completion callback: the handle lock is held. */
static int cmd_done_cb(void *arg, int *error)
{
	struct ne_cmd *cmd = arg;
	struct ne_ctx *c = cmd->rq->c;
	int err = *error ? -*error : 0;
	/* A command the connection's end aborted is a dropped connection. */
	if (err == -ENOTCONN || err == -ESHUTDOWN || err == -ECONNRESET ||
	    err == -EPIPE)
		err = -EIO;
	if (!err && cmd->kind == NE_READ && cmd->bounce)
		iov_copy(cmd->rq->io, cmd->io_off, cmd->bounce, cmd->len, true);
	pthread_mutex_lock(&c->mu);
	cmd_finish(c, cmd, err);
	pthread_mutex_unlock(&c->mu);
	ne_kick(c);
	return 1;
}

/* ---- connections ------------------------------------------------------ */

/* Connect a new handle to c->uri within the timeout. */
static int conn_open(struct ne_ctx *c, struct nbd_handle **out)
{
	struct nbd_handle *h = nbd_create();
	if (!h)
		return nbd_err(-ENOMEM);
	int ret = 0;
	if (nbd_aio_connect_uri(h, c->uri) == -1) {
		ret = nbd_err(-EIO);
		goto fail;
	}
	int64_t deadline = now_ns() + c->timeout_ns;
	while (nbd_aio_is_connecting(h) == 1) {
		int64_t left = deadline - now_ns();
		if (left <= 0) {
			ret = -ETIMEDOUT;
			goto fail;
		}
		unsigned dir = nbd_aio_get_direction(h);
		struct pollfd p = {.fd = nbd_aio_get_fd(h)};
		if (p.fd < 0) {
			ret = nbd_err(-EIO);
			goto fail;
		}
		p.events = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
				   (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0));
		int ms = (int)MIN(left / NS_PER_MS + 1, 1000);
		if (poll(&p, 1, ms) < 0 && errno != EINTR) {
			ret = -errno;
			goto fail;
		}
		int r = 0;
		if (p.revents & (POLLIN | POLLHUP | POLLERR))
			r = nbd_aio_notify_read(h);
		else if (p.revents & POLLOUT)
			r = nbd_aio_notify_write(h);
		if (r == -1) {
			ret = nbd_err(-EIO);
			goto fail;
		}
	}
	if (nbd_aio_is_ready(h) != 1) {
		ret = nbd_err(-EIO);
		goto fail;
	}
	*out = h;
	return 0;
fail:
	nbd_close(h);
	return ret;
}

/* Close connection @i (if its generation is still @gen) and fail what it
 * had in flight: the server may have lost writes it acknowledged, so
 * the next barrier fails too. */
static void conn_kill(struct ne_ctx *c, unsigned i, uint64_t gen)
{
	struct ne_conn *cn = &c->conn[i];
	pthread_mutex_lock(&cn->hl);
	struct nbd_handle *h = NULL;
	if (cn->h && cn->gen == gen) {
		pthread_mutex_lock(&c->mu);
		h = cn->h;
		cn->h = NULL;
		cn->gen++;
		pthread_mutex_unlock(&c->mu);
		/* libnbd may still run callbacks here; they take mu. */
		nbd_close(h);
		atomic_fetch_add(&c->ndead, 1);
	}
	pthread_mutex_unlock(&cn->hl);
	if (!h)
		return;
	pthread_mutex_lock(&c->mu);
	c->lost = true;
	c->st.drops++;
	while (cn->sent.next != &cn->sent)
		cmd_finish(c, cn->sent.next, -EIO);
	pthread_mutex_unlock(&c->mu);
	ne_kick(c);
}

/*
 * Reopen closed connections (see the header for the policy). Returns 0
 * when at least one connection is open, else -EIO.
 */
static int conns_ensure(struct ne_ctx *c)
{
	if (!atomic_load(&c->ndead))
		return 0;
	pthread_mutex_lock(&c->reconnect);
	int64_t now = now_ns();
	bool any = false;
	for (unsigned i = 0; i < c->nconn; i++) {
		struct ne_conn *cn = &c->conn[i];
		pthread_mutex_lock(&cn->hl);
		bool open = cn->h != NULL;
		pthread_mutex_unlock(&cn->hl);
		if (open) {
			any = true;
			continue;
		}
		if (now < c->retry_after_ns)
			continue;
		struct nbd_handle *h = NULL;
		long pause = NE_FIRST_PAUSE_NS;
		for (unsigned t = 0; t < c->tries && !h; t++) {
			if (t) {
				struct timespec ts = {0, pause};
				nanosleep(&ts, NULL);
				pause *= 2;
			}
			if (conn_open(c, &h))
				h = NULL;
			else if (nbd_get_size(h) != (int64_t)c->export_size ||
				 nbd_is_read_only(h) == 1) {
				nbd_close(h);
				h = NULL;
			}
		}
		if (!h) {
			c->retry_after_ns = now_ns() + NE_RETRY_HOLDOFF_NS;
			break;
		}
		pthread_mutex_lock(&cn->hl);
		pthread_mutex_lock(&c->mu);
		cn->h = h;
		cn->gen++;
		c->st.reconnects++;
		pthread_mutex_unlock(&c->mu);
		pthread_mutex_unlock(&cn->hl);
		atomic_fetch_sub(&c->ndead, 1);
		any = true;
	}
	pthread_mutex_unlock(&c->reconnect);
	ne_kick(c);
	return any ? 0 : -EIO;
}

/* ---- sending ---------------------------------------------------------- */

/* Give @cmd the open connection with the fewest in flight below depth;
 * false when none has room (mu held). */
static bool cmd_assign(struct ne_ctx *c, struct ne_cmd *cmd)
{
	unsigned best = c->nconn;
	for (unsigned i = 0; i < c->nconn; i++) {
		struct ne_conn *cn = &c->conn[i];
		if (cn->h && cn->inflight < c->depth &&
		    (best == c->nconn || cn->inflight < c->conn[best].inflight))
			best = i;
	}
	if (best == c->nconn)
		return false;
	struct ne_conn *cn = &c->conn[best];
	cmd->conn = best;
	cmd->gen = cn->gen;
	cmd->state = NE_SENT;
	cmd->sent_ns = now_ns();
	cmd->prev = cn->sent.prev;
	cmd->next = &cn->sent;
	cn->sent.prev->next = cmd;
	cn->sent.prev = cmd;
	cn->inflight++;
	c->st.commands++;
	if (cmd->kind == NE_WRITE)
		c->st.bytes_written += cmd->len;
	else if (cmd->kind == NE_READ)
		c->st.bytes_read += cmd->len;
	else if (cmd->kind == NE_FLUSH)
		c->st.flushes++;
	cmd->rq->refs++; /* the issuer's, until ne_issue() is done */
	return true;
}

static bool any_open(const struct ne_ctx *c)
{
	for (unsigned i = 0; i < c->nconn; i++)
		if (c->conn[i].h)
			return true;
	return false;
}

/* Send an assigned command, then drop the issuer's reference. */
static void ne_issue(struct ne_ctx *c, struct ne_cmd *cmd)
{
	struct ne_conn *cn = &c->conn[cmd->conn];
	nbd_completion_callback cb = {.callback = cmd_done_cb,
				      .user_data = cmd};
	int err = 0;
	bool dead = false;
	pthread_mutex_lock(&cn->hl);
	if (!cn->h || cn->gen != cmd->gen) {
		err = -EIO;
	} else {
		int64_t r;
		switch (cmd->kind) {
		case NE_READ:
			r = nbd_aio_pread(cn->h, cmd->buf, cmd->len, cmd->off,
					  cb, 0);
			break;
		case NE_WRITE:
			r = nbd_aio_pwrite(cn->h, cmd->buf, cmd->len, cmd->off,
					   cb, cmd->flags);
			break;
		case NE_ZERO:
			r = nbd_aio_zero(cn->h, cmd->len, cmd->off, cb, 0);
			break;
		default:
			r = nbd_aio_flush(cn->h, cb, 0);
			break;
		}
		if (r == -1) {
			err = nbd_err(-EIO);
			dead = nbd_aio_is_dead(cn->h) == 1 ||
			       nbd_aio_is_closed(cn->h) == 1;
		} else if (nbd_aio_get_direction(cn->h) &
			   LIBNBD_AIO_DIRECTION_WRITE) {
			ne_kick(c); /* the thread must poll for writing */
		}
	}
	pthread_mutex_unlock(&cn->hl);
	if (dead)
		conn_kill(c, cmd->conn, cmd->gen);
	pthread_mutex_lock(&c->mu);
	/* A failed send never reaches the callback. */
	if (err)
		cmd_finish(c, cmd, dead ? -EIO : err);
	bool delivered = c->done_head != NULL;
	rq_put(c, cmd->rq);
	pthread_mutex_unlock(&c->mu);
	if (delivered || err)
		ne_kick(c);
}

/* Queue the commands of a new request behind those waiting, and send what
 * fits. The caller holds a reference to @rq. */
static void rq_start(struct ne_ctx *c, struct ne_rq *rq)
{
	struct ne_cmd *go[8];
	unsigned i = 0;
	while (i < rq->ncmd) {
		unsigned n = 0;
		pthread_mutex_lock(&c->mu);
		for (; i < rq->ncmd && n < 8; i++) {
			struct ne_cmd *cmd = &rq->cmd[i];
			if (!c->pend_head && cmd_assign(c, cmd)) {
				go[n++] = cmd;
			} else if (!any_open(c)) {
				cmd_finish(c, cmd, -EIO);
			} else {
				cmd->next = NULL;
				if (c->pend_tail)
					c->pend_tail->next = cmd;
				else
					c->pend_head = cmd;
				c->pend_tail = cmd;
			}
		}
		pthread_mutex_unlock(&c->mu);
		for (unsigned k = 0; k < n; k++)
			ne_issue(c, go[k]);
	}
}

/* Send queued commands while connections have room (engine thread). */
static void ne_dispatch(struct ne_ctx *c)
{
	for (;;) {
		struct ne_cmd *go[16];
		unsigned n = 0;
		pthread_mutex_lock(&c->mu);
		while (c->pend_head && n < 16) {
			struct ne_cmd *cmd = c->pend_head;
			bool open = any_open(c);
			struct ne_cmd *next = cmd->next;
			if (open && !cmd_assign(c, cmd)) {
				cmd->next = next; /* stays first */
				break;
			}
			c->pend_head = next;
			if (!next)
				c->pend_tail = NULL;
			if (open)
				go[n++] = cmd;
			else
				cmd_finish(c, cmd, -EIO);
		}
		pthread_mutex_unlock(&c->mu);
		if (!n)
			return;
		for (unsigned k = 0; k < n; k++)
			ne_issue(c, go[k]);
	}
}

/* ---- building requests ------------------------------------------------ */

static struct ne_rq *rq_alloc(struct ne_ctx *c, struct folio_io *io,
			      unsigned ncmd)
{
	struct ne_rq *rq = calloc(1, sizeof(*rq) + ncmd * sizeof(rq->cmd[0]));
	if (!rq)
		return NULL;
	rq->c = c;
	rq->io = io;
	rq->ncmd = ncmd;
	rq->refs = ncmd + 1; /* + the builder's */
	return rq;
}

static void rq_free(struct ne_rq *rq)
{
	for (unsigned i = 0; i < rq->ncmd; i++)
		free(rq->cmd[i].bounce);
	free(rq);
}

/* Run an internal request to its end; its error. */
static int rq_run(struct ne_ctx *c, struct ne_rq *rq)
{
	rq_start(c, rq);
	pthread_mutex_lock(&c->mu);
	rq_put(c, rq);
	while (!rq->done)
		pthread_cond_wait(&c->cond, &c->mu);
	int err = rq->err;
	pthread_mutex_unlock(&c->mu);
	rq_free(rq);
	return err;
}

static int ne_submit(void *arg, struct folio_io *io)
{
	struct ne_ctx *c = arg;
	int r = engine_check_io(io);
	if (r)
		return r;
	uint64_t end = io->dev_pos + io->len;
	bool write = io->op == FOLIO_IO_WRITE;
	if (write && end > c->export_size)
		return -ENOSPC;
	if (engine_io_durable(io) && !c->durable)
		return -EINVAL;
	/* What lies in the export; a read past its end is zeros. */
	size_t in = io->dev_pos >= c->export_size ? 0 :
		    (size_t)(MIN(end, c->export_size) - io->dev_pos);
	if (!write && in < io->len)
		engine_iov_zero(io->iov, io->iovcnt, in, io->len);
	if (!in) {
		folio_io_complete(io, (ssize_t)io->len);
		return 0;
	}
	r = conns_ensure(c);
	if (r)
		return r;

	unsigned ndirect = direct_cmds(io, in, c->cmd_max);
	unsigned ndata = ndirect ? ndirect :
			 (unsigned)((in + c->cmd_max - 1) / c->cmd_max);
	bool barrier_lost = false, need_flush = false;
	uint64_t mark = 0;
	if (engine_io_durable(io)) {
		pthread_mutex_lock(&c->mu);
		barrier_lost = c->lost;
		c->lost = false;
		mark = c->plain_done;
		need_flush = !barrier_lost && mark > c->stable_mark;
		pthread_mutex_unlock(&c->mu);
	}
	struct ne_rq *rq = rq_alloc(c, io, ndata + need_flush);
	if (!rq)
		return -ENOMEM;
	size_t off = 0, run = 0;
	char *base = NULL;
	for (unsigned i = 0; i < ndata; i++) {
		struct ne_cmd *cmd = &rq->cmd[i];
		if (ndirect && !run)
			run = MIN(iov_run(io, off, &base), in - off);
		cmd->rq = rq;
		cmd->kind = write ? NE_WRITE : NE_READ;
		cmd->off = io->dev_pos + off;
		cmd->len = MIN(c->cmd_max, ndirect ? run : in - off);
		cmd->io_off = off;
		cmd->flags = engine_io_durable(io) ? LIBNBD_CMD_FLAG_FUA : 0;
		if (ndirect) {
			cmd->buf = base;
			base += cmd->len;
			run -= cmd->len;
		} else {
			cmd->bounce = malloc(cmd->len);
			if (!cmd->bounce) {
				rq_free(rq);
				return -ENOMEM;
			}
			cmd->buf = cmd->bounce;
			if (write)
				iov_copy(io, off, cmd->bounce, cmd->len, false);
		}
		off += cmd->len;
	}
	if (need_flush) {
		struct ne_cmd *cmd = &rq->cmd[ndata];
		cmd->rq = rq;
		cmd->kind = NE_FLUSH;
		cmd->mark = mark;
	}
	pthread_mutex_lock(&c->mu);
	if (write && end > c->zero_from)
		c->zero_from = end;
	if (barrier_lost)
		rq->err = -EIO;
	c->outstanding++;
	pthread_mutex_unlock(&c->mu);
	rq_start(c, rq);
	pthread_mutex_lock(&c->mu);
	rq_put(c, rq);
	bool ready = c->done_head != NULL;
	pthread_mutex_unlock(&c->mu);
	if (ready)
		ne_kick(c);
	return 0;
}

static int ne_flush(void *arg)
{
	struct ne_ctx *c = arg;
	pthread_mutex_lock(&c->mu);
	bool lost = c->lost;
	c->lost = false;
	uint64_t mark = c->plain_done;
	pthread_mutex_unlock(&c->mu);
	if (lost)
		return -EIO;
	if (!c->can_flush)
		return 0;
	int r = conns_ensure(c);
	if (r)
		return r;
	struct ne_rq *rq = rq_alloc(c, NULL, 1);
	if (!rq)
		return -ENOMEM;
	rq->cmd[0] = (struct ne_cmd){.rq = rq, .kind = NE_FLUSH, .mark = mark};
	return rq_run(c, rq);
}

/* Zero export bytes [from, to): write-zeroes, or writes of zeros. */
static int ne_zero(struct ne_ctx *c, uint64_t from, uint64_t to)
{
	size_t step = c->can_zero ? NE_ZERO_MAX : c->cmd_max;
	uint64_t n = (to - from + step - 1) / step;
	for (uint64_t done = 0; done < n;) {
		unsigned batch = (unsigned)MIN(n - done, (uint64_t)c->depth);
		struct ne_rq *rq = rq_alloc(c, NULL, batch);
		if (!rq)
			return -ENOMEM;
		for (unsigned i = 0; i < batch; i++, done++) {
			struct ne_cmd *cmd = &rq->cmd[i];
			cmd->rq = rq;
			cmd->off = from + done * step;
			cmd->len = (size_t)MIN((uint64_t)step, to - cmd->off);
			cmd->kind = c->can_zero ? NE_ZERO : NE_WRITE;
			cmd->buf = (void *)c->zeros;
		}
		int r = rq_run(c, rq);
		if (r)
			return r;
	}
	return 0;
}

static int ne_truncate(void *arg, uint64_t size)
{
	struct ne_ctx *c = arg;
	if (size > c->export_size)
		return -EFBIG;
	pthread_mutex_lock(&c->mu);
	uint64_t to = c->zero_from;
	pthread_mutex_unlock(&c->mu);
	if (size >= to)
		return 0;
	int r = conns_ensure(c);
	if (!r)
		r = ne_zero(c, size, to);
	if (!r) {
		pthread_mutex_lock(&c->mu);
		if (c->zero_from == to)
			c->zero_from = size;
		pthread_mutex_unlock(&c->mu);
	}
	return r;
}

/* ---- the engine thread ------------------------------------------------ */

/* Complete what has finished, with no lock held. */
static void ne_deliver(struct ne_ctx *c)
{
	pthread_mutex_lock(&c->mu);
	struct ne_rq *rq = c->done_head;
	c->done_head = c->done_tail = NULL;
	pthread_mutex_unlock(&c->mu);
	uint64_t n = 0;
	for (struct ne_rq *x = rq; x; x = x->next)
		n++;
	if (!n)
		return;
	struct engine_own saved = engine_own_enter(&ne_own, c, n);
	while (rq) {
		struct ne_rq *next = rq->next;
		struct folio_io *io = rq->io;
		ssize_t res = rq->err ? rq->err : (ssize_t)io->len;
		rq_free(rq);
		folio_io_complete(io, res);
		rq = next;
	}
	engine_own_leave(&ne_own, saved);
	pthread_mutex_lock(&c->mu);
	c->outstanding -= n;
	c->delivered += n;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* Close connections whose oldest command has waited too long. */
static void ne_timeouts(struct ne_ctx *c)
{
	int64_t now = now_ns();
	for (unsigned i = 0; i < c->nconn; i++) {
		pthread_mutex_lock(&c->mu);
		struct ne_conn *cn = &c->conn[i];
		bool late = cn->sent.next != &cn->sent &&
			    now - cn->sent.next->sent_ns > c->timeout_ns;
		uint64_t gen = cn->gen;
		pthread_mutex_unlock(&c->mu);
		if (late)
			conn_kill(c, i, gen);
	}
}

/* One round of driving the connections (the caller holds the driver
 * role): poll their sockets (and the wake-up eventfd) for up to @ms, let
 * libnbd read and write, close dead and late connections, send queued
 * commands. */
static void ne_drive(struct ne_ctx *c, int ms)
{
	struct pollfd pfd[NE_MAX_CONNS + 1];
	uint64_t gen[NE_MAX_CONNS];
	unsigned idx[NE_MAX_CONNS];
	nfds_t n = 0;
	ne_self = c;
	for (unsigned i = 0; i < c->nconn; i++) {
		struct ne_conn *cn = &c->conn[i];
		pthread_mutex_lock(&cn->hl);
		if (cn->h) {
			int fd = nbd_aio_get_fd(cn->h);
			unsigned dir = nbd_aio_get_direction(cn->h);
			if (fd >= 0) {
				pfd[n].fd = fd;
				pfd[n].events = (short)(
					(dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
					(dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0));
				pfd[n].revents = 0;
				gen[n] = cn->gen;
				idx[n++] = i;
			}
		}
		pthread_mutex_unlock(&cn->hl);
	}
	pfd[n] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
	int pr = poll(pfd, n + 1, ms);
	if (pr > 0 && (pfd[n].revents & POLLIN)) {
		uint64_t v;
		ssize_t r = read(c->wake_fd, &v, sizeof(v));
		(void)r;
	}
	for (nfds_t k = 0; pr > 0 && k < n; k++) {
		short ev = pfd[k].revents;
		if (!ev)
			continue;
		struct ne_conn *cn = &c->conn[idx[k]];
		bool dead = false;
		pthread_mutex_lock(&cn->hl);
		if (cn->h && cn->gen == gen[k]) {
			int r = 0;
			if (ev & (POLLIN | POLLHUP | POLLERR | POLLNVAL))
				r = nbd_aio_notify_read(cn->h);
			if (r != -1 && (ev & POLLOUT))
				r = nbd_aio_notify_write(cn->h);
			dead = r == -1 || nbd_aio_is_dead(cn->h) == 1 ||
			       nbd_aio_is_closed(cn->h) == 1;
		}
		pthread_mutex_unlock(&cn->hl);
		if (dead)
			conn_kill(c, idx[k], gen[k]);
	}
	ne_timeouts(c);
	ne_dispatch(c);
	ne_self = NULL;
}

/* Drive once as the driver (mu not held), hand the role back, deliver. */
static void ne_drive_round(struct ne_ctx *c)
{
	ne_drive(c, NE_TICK_MS);
	pthread_mutex_lock(&c->mu);
	c->driving = false;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	ne_deliver(c);
}

/*
 * The engine thread drives the connections while no wait() caller wants
 * to: a thread that waits anyway polls the sockets itself and completes
 * what arrives, so the reply to a sync's write wakes the syncing thread
 * directly instead of the engine thread, which would then wake it (on a
 * busy machine each wake-up is a scheduling delay on the critical path).
 */
static void *ne_thread(void *arg)
{
	struct ne_ctx *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->stop && (c->driving || c->want_drive))
			pthread_cond_wait(&c->cond, &c->mu);
		bool stop = c->stop;
		c->driving = !stop;
		pthread_mutex_unlock(&c->mu);
		if (stop)
			break;
		ne_drive_round(c);
	}
	return NULL;
}

static int ne_wait(void *arg)
{
	struct ne_ctx *c = arg;
	uint64_t own = engine_own_of(&ne_own, c);
	pthread_mutex_lock(&c->mu);
	uint64_t seen = c->delivered;
	c->want_drive++;
	while (c->outstanding > own && c->delivered == seen) {
		if (c->driving) {
			/* Get the driver out of poll(): it hands over. */
			ne_kick(c);
			pthread_cond_wait(&c->cond, &c->mu);
			continue;
		}
		c->driving = true;
		pthread_mutex_unlock(&c->mu);
		ne_drive_round(c);
		pthread_mutex_lock(&c->mu);
	}
	c->want_drive--;
	pthread_cond_broadcast(&c->cond); /* the engine thread may resume */
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* ---- creation and destruction ----------------------------------------- */

static void ne_free_ctx(struct ne_ctx *c)
{
	for (unsigned i = 0; i < NE_MAX_CONNS; i++) {
		if (c->conn[i].h)
			nbd_close(c->conn[i].h);
		pthread_mutex_destroy(&c->conn[i].hl);
	}
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_mutex_destroy(&c->reconnect);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cond);
	free((void *)c->zeros);
	free(c->uri);
	free(c);
}

static void ne_destroy(void *arg)
{
	struct ne_ctx *c = arg;
	pthread_mutex_lock(&c->mu);
	/* Bounded: the thread fails what a dead server holds after the
	 * timeout. */
	while (c->outstanding)
		pthread_cond_wait(&c->cond, &c->mu);
	c->stop = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	ne_kick(c);
	pthread_join(c->thread, NULL);
	ne_free_ctx(c);
}

static int opts_read(const char *uri, const struct folio_nbd_opts *o,
		     struct ne_ctx *c)
{
	struct folio_nbd_opts d;
	int r = nbd_args_read(uri, o, &d);
	if (r)
		return r;
	c->nconn = d.connections;
	c->depth = d.depth;
	c->flags = d.flags;
	c->tries = d.reconnect_tries;
	c->timeout_ns = (int64_t)d.timeout_ms * NS_PER_MS;
	return 0;
}

/* Learn the export from the first connection. */
static int ne_probe(struct ne_ctx *c, struct nbd_handle *h)
{
	int64_t size = nbd_get_size(h);
	if (size < 0)
		return nbd_err(-EIO);
	if (nbd_is_read_only(h) == 1)
		return -EROFS;
	c->export_size = (uint64_t)size;
	c->can_flush = nbd_can_flush(h) == 1;
	c->can_zero = nbd_can_zero(h) == 1;
	c->durable = c->can_flush && nbd_can_fua(h) == 1 &&
		     !(c->flags & FOLIO_NBD_NO_FUA);
	if (nbd_can_multi_conn(h) != 1)
		c->nconn = 1;
	int64_t max = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
	c->cmd_max = max > 0 && (uint64_t)max < NE_CMD_MAX ? (size_t)max :
							     NE_CMD_MAX;
	if (!c->can_zero) {
		c->zeros = calloc(1, c->cmd_max);
		if (!c->zeros)
			return -ENOMEM;
	}
	return 0;
}

static const struct folio_engine_ops ne_ops_base = {
	.sz = sizeof(struct folio_engine_ops),
	.submit = ne_submit,
	.flush = ne_flush,
	.truncate = ne_truncate,
	.wait = ne_wait,
	.destroy = ne_destroy,
};

int folio_engine_nbd(struct folio_engine **out, const char *uri,
		     const struct folio_nbd_opts *opts)
{
	if (!out)
		return -EINVAL;
	struct ne_ctx *c = calloc(1, sizeof(*c) +
				     NE_MAX_CONNS * sizeof(c->conn[0]));
	if (!c)
		return -ENOMEM;
	int r = opts_read(uri, opts, c);
	if (r) {
		free(c);
		return r;
	}
	c->wake_fd = -1;
	pthread_mutex_init(&c->reconnect, NULL);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	for (unsigned i = 0; i < NE_MAX_CONNS; i++) {
		pthread_mutex_init(&c->conn[i].hl, NULL);
		c->conn[i].sent.next = c->conn[i].sent.prev = &c->conn[i].sent;
	}
	c->uri = strdup(uri);
	if (!c->uri) {
		r = -ENOMEM;
		goto fail;
	}
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake_fd < 0) {
		r = -errno;
		goto fail;
	}
	r = conn_open(c, &c->conn[0].h);
	if (!r)
		r = ne_probe(c, c->conn[0].h);
	for (unsigned i = 1; !r && i < c->nconn; i++)
		r = conn_open(c, &c->conn[i].h);
	if (r)
		goto fail;
	c->zero_from = c->export_size;
	c->st.export_size = c->export_size;
	c->st.connections = c->nconn;
	c->st.durable = c->durable;
	if (pthread_create(&c->thread, NULL, ne_thread, c)) {
		r = -EAGAIN;
		goto fail;
	}
	struct folio_engine_ops ops = ne_ops_base;
	ops.caps = c->durable ? FOLIO_ENGINE_CAP_DURABLE : 0;
	r = engine_create(out, &ops, c, ENGINE_NBD);
	if (r) {
		ne_destroy(c);
		return r;
	}
	return 0;
fail:
	ne_free_ctx(c);
	return r;
}

int folio_engine_nbd_info(const struct folio_engine *e,
			  struct folio_nbd_info *info)
{
	if (!e || e->kind != ENGINE_NBD || !info)
		return -EINVAL;
	int r = sized_check(info, info->sz, sizeof(size_t), sizeof(*info));
	if (r)
		return r;
	struct ne_ctx *c = e->ctx;
	pthread_mutex_lock(&c->mu);
	struct folio_nbd_info st = c->st;
	pthread_mutex_unlock(&c->mu);
	st.sz = info->sz;
	memcpy(info, &st, MIN(info->sz, sizeof(st)));
	return 0;
}
