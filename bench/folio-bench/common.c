/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "folio_state_mem.h"

/* ---- sizes and names ---------------------------------------------------- */

int bench_parse_size(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	uint64_t mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = KIB; end++; break;
	case 'm': case 'M': mult = MIB; end++; break;
	case 'g': case 'G': mult = GIB; end++; break;
	case 't': case 'T': mult = GIB * 1024; end++; break;
	default: break;
	}
	if (mult > 1 && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	if (*end)
		return -EINVAL;
	double bytes = v * (double)mult;
	/* A fraction of a byte means the user mistyped something. */
	if (bytes >= 0x1p63 || bytes != floor(bytes))
		return -EINVAL;
	*out = (uint64_t)bytes;
	return 0;
}

const char *bench_fmt_size(char *buf, size_t len, uint64_t v)
{
	static const char suffix[] = "KMGT";
	/* The largest unit that divides exactly: 2000K stays 2000K. */
	int i = -1;
	uint64_t x = v;
	while (x && x % 1024 == 0 && i < 3) {
		x /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)x, suffix[i]);
	return buf;
}

const char *bench_engine_name(enum bench_engine_kind k)
{
	switch (k) {
	case BENCH_ENGINE_POSIX: return "posix";
	case BENCH_ENGINE_URING: return "uring";
	case BENCH_ENGINE_MEM: return "mem";
	case BENCH_ENGINE_RADOS: return "rados";
	case BENCH_ENGINE_NBD: return "nbd";
	}
	return "?";
}

/* ---- time --------------------------------------------------------------- */

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, rss = 0;
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

double bench_rss_anon_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long kib = 0;
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = sscanf(line, "RssAnon: %lu kB", &kib) == 1;
	if (f)
		fclose(f);
	return found ? (double)kib * 1024.0 : 0.0;
}

void bench_sleep_until(uint64_t t)
{
	struct timespec ts = {(time_t)(t / 1000000000u),
			      (long)(t % 1000000000u)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

int bench_timed_batches(const char *what, double seconds, uint64_t cap,
			uint64_t batch, int (*fn)(void *arg, uint64_t n),
			void *arg, uint64_t *done, double *secs)
{
	uint64_t n_done = 0, t0 = bench_now_ns(), now = t0;
	uint64_t deadline = t0 + (uint64_t)(seconds * 1e9);
	int err = 0;
	while (!err) {
		uint64_t n = cap ? cap - n_done : batch;
		if (n > batch)
			n = batch;
		if (!n)
			break;
		err = fn(arg, n);
		n_done += n;
		now = bench_now_ns();
		if (seconds > 0 && now >= deadline)
			break;
		bench_progress("%s: %.1f s", what, (double)(now - t0) / 1e9);
	}
	bench_progress_done();
	*done = n_done;
	*secs = (double)(now - t0) / 1e9;
	return err;
}

/* ---- latencies ---------------------------------------------------------- */

void bench_lat_push(struct bench_lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4096;
		uint64_t *v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			l->oom = true;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ns;
}

void bench_lat_merge(struct bench_lat *to, struct bench_lat *from)
{
	for (size_t i = 0; i < from->n; i++)
		bench_lat_push(to, from->v[i]);
	to->oom |= from->oom;
	bench_lat_free(from);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double bench_lat_pct(struct bench_lat *l, double p)
{
	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
	/* Nearest rank: the smallest sample with at least p% at or below. */
	size_t rank = (size_t)ceil(p / 100.0 * (double)l->n);
	return (double)l->v[rank ? rank - 1 : 0];
}

void bench_lat_free(struct bench_lat *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

double bench_median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- files and engines -------------------------------------------------- */

int bench_tmpfile(const char *dir)
{
	char path[4096];
	int n = snprintf(path, sizeof(path), "%s/folio-bench.XXXXXX", dir);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		fprintf(stderr, "folio-bench: --dir path too long\n");
		return -1;
	}
	int fd = mkstemp(path);
	if (fd < 0) {
		fprintf(stderr,
			"folio-bench: cannot create a temporary file in %s: "
			"%s\n",
			dir, strerror(errno));
		return -1;
	}
	unlink(path);
	return fd;
}

int bench_prefill(int fd, uint64_t size)
{
	size_t chunk = 1u << 20;
	unsigned char *buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	uint64_t seed = 0x9e3779b97f4a7c15u;
	for (size_t i = 0; i < chunk; i += 8) {
		uint64_t r = bench_rand(&seed);
		memcpy(buf + i, &r, 8);
	}
	int err = 0;
	if (ftruncate(fd, 0))
		err = -errno;
	for (uint64_t done = 0; !err && done < size;) {
		size_t n = (size_t)(size - done < chunk ? size - done : chunk);
		ssize_t r = pwrite(fd, buf, n, (off_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			err = r < 0 ? -errno : -EIO;
		else
			done += (uint64_t)r;
		bench_progress("preparing the file: %llu/%llu MiB",
			       (unsigned long long)(done / MIB),
			       (unsigned long long)(size / MIB));
	}
	if (!err && fdatasync(fd))
		err = -errno;
	bench_progress_done();
	free(buf);
	return err;
}

static int inline_submit(void *ctx, struct folio_io *io)
{
	(void)ctx;
	if (io->op == FOLIO_IO_READ)
		for (int i = 0; i < io->iovcnt; i++)
			memset(io->iov[i].iov_base, 0, io->iov[i].iov_len);
	folio_io_complete(io, (ssize_t)io->len);
	return 0;
}

static int inline_nop(void *ctx)
{
	(void)ctx;
	return 0;
}

static int inline_truncate(void *ctx, uint64_t size)
{
	(void)ctx;
	(void)size;
	return 0;
}

int bench_inline_engine(struct folio_engine **out)
{
	struct folio_engine_ops ops = {
		.sz = sizeof(ops),
		.submit = inline_submit,
		.flush = inline_nop,
		.truncate = inline_truncate,
	};
	return folio_engine_new(out, &ops, NULL);
}

int bench_engine_open(struct bench_ctx *c, struct bench_engine *be,
		      enum bench_engine_kind kind, int fd, uint64_t capacity)
{
	memset(be, 0, sizeof(*be));
	const char *what = bench_engine_name(kind);
	int r;
	if (c->o.dm.on) {
		what = "device-model";
		r = devmodel_new(&be->dm, &c->o.dm);
		if (!r && kind == BENCH_ENGINE_MEM)
			r = folio_engine_mem(&be->mem, capacity);
		if (!r)
			r = devmodel_engine(be->dm, kind == BENCH_ENGINE_MEM
						    ? -1 : fd,
					    be->mem, &be->engine);
		if (!r && !c->modelled) {
			c->modelled = true;
			if (kind == BENCH_ENGINE_URING)
				bench_note(c, "the device model moves data "
					      "with pwritev itself: the uring "
					      "engine is not used under it");
		}
	} else {
		switch (kind) {
		case BENCH_ENGINE_POSIX:
			r = bench_posix_open(&be->engine, fd);
			break;
		case BENCH_ENGINE_URING:
			r = folio_engine_uring(&be->engine, fd, 256, 0);
			break;
		case BENCH_ENGINE_RADOS:
			be->keep_store = c->store[0] != 0;
			r = bench_rados_engine(&be->engine,
					       c->store[0] ? c->store : NULL,
					       NULL, 0);
			break;
		case BENCH_ENGINE_NBD:
			r = bench_nbd_engine(c, &be->engine, capacity);
			break;
		default:
			r = folio_engine_mem(&be->engine, capacity);
			break;
		}
	}
	if (r) {
		fprintf(stderr, "folio-bench %s: cannot create the %s engine: "
				"%s\n",
			c->cmd ? c->cmd->name : "", what, strerror(-r));
		bench_engine_close(be);
	}
	return r;
}

void bench_engine_close(struct bench_engine *be)
{
	if (!be->keep_store)
		bench_rados_engine_remove(be->engine);
	folio_engine_free(be->engine);
	folio_engine_free(be->mem);
	devmodel_free(be->dm);
	memset(be, 0, sizeof(*be));
}

/* ---- files for read workloads ------------------------------------------ */

int bench_reopen(int fd, int flags)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int r = open(path, flags | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

double bench_resident_fraction(int fd, uint64_t size)
{
	if (!size)
		return 0;
	long page = sysconf(_SC_PAGESIZE);
	size_t pages = (size_t)((size + (uint64_t)page - 1) / (uint64_t)page);
	void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	unsigned char *vec = malloc(pages);
	double res = -ENOMEM;
	if (vec && !mincore(p, (size_t)size, vec)) {
		size_t in = 0;
		for (size_t i = 0; i < pages; i++)
			in += vec[i] & 1;
		res = (double)in / (double)pages;
	} else if (vec) {
		res = -errno;
	}
	free(vec);
	munmap(p, (size_t)size);
	return res;
}

double bench_drop_kernel_cache(struct bench_ctx *c, int fd, uint64_t size)
{
	if (fsync(fd))
		return -errno;
	int r = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (r)
		return -r;
	double res = bench_resident_fraction(fd, size);
	if (res > c->max_resident)
		c->max_resident = res;
	c->dropped_cache = true;
	/* Pages some other process maps (or that writeback still holds)
	 * survive DONTNEED: then the "cold" figures are partly hot. */
	if (res > 0.01 && !c->warned_not_cold) {
		c->warned_not_cold = true;
		bench_note(c, "WARNING: %.1f%% of the file stayed in the "
			      "kernel page cache after fsync + "
			      "FADV_DONTNEED: cold figures are partly hot",
			   res * 100);
	}
	return res;
}

void bench_note_coldness(struct bench_ctx *c)
{
	if (!c->dropped_cache)
		return;
	bench_param_num(c, "max_resident_before_cold", c->max_resident);
	bench_note(c, "cold check (mincore after fsync + FADV_DONTNEED): at "
		      "most %.2f%% of the file in the kernel page cache before "
		      "a cold round",
		   c->max_resident * 100);
}

double bench_warm_kernel_cache(int fd, uint64_t size)
{
	size_t chunk = MIB;
	char *buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	int err = 0;
	for (uint64_t at = 0; at < size && !err;) {
		ssize_t n = pread(fd, buf, chunk, (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			err = n < 0 ? -errno : -EIO;
		else
			at += (uint64_t)n;
	}
	free(buf);
	return err ? err : bench_resident_fraction(fd, size);
}

int bench_direct_fd(struct bench_ctx *c, int fd, bool *uring)
{
	*uring = false;
	int dfd = bench_reopen(fd, O_RDONLY | O_DIRECT);
	if (dfd < 0) {
		bench_note(c, "O_DIRECT refused in %s (%s): direct variants "
			      "skipped",
			   c->o.dir, strerror(-dfd));
		return -1;
	}
	struct folio_engine *e;
	if (!folio_engine_uring(&e, dfd, 8, 0)) {
		folio_engine_free(e);
		*uring = true;
	} else {
		fprintf(stderr, "folio-bench %s: io_uring unavailable (not "
				"built or refused by the kernel): the uring "
				"variant is skipped\n",
			c->cmd->name);
		bench_note(c, "io_uring unavailable: uring variant skipped");
	}
	return dfd;
}

int bench_reader_open(struct bench_ctx *c, struct bench_reader *r,
		      enum bench_engine_kind kind, int fd, uint64_t size)
{
	r->m = NULL;
	int err = bench_engine_open(c, &r->be, kind, fd, size);
	if (err)
		return err;
	struct folio_mapping_opts mo = {
		.sz = sizeof(mo),
		.block_size = c->o.block_size,
		.max_folio_size = c->o.folio_size,
		.size = size,
		.engine = r->be.engine,
	};
	err = folio_mapping_new(&r->m, &mo);
	if (err)
		bench_engine_close(&r->be);
	return err;
}

int bench_reader_close(struct bench_reader *r)
{
	int err = folio_mapping_free(r->m);
	r->m = NULL;
	bench_engine_close(&r->be);
	return err;
}

const char *bench_cold_label(const struct bench_ctx *c, enum bench_cold k)
{
	static const char *const name[BENCH_COLD_N] = {
		"kernel pread",
		"lib posix buffered",
		"lib posix O_DIRECT",
		"lib uring O_DIRECT",
		"lib remote",
	};
	if (k == BENCH_COLD_REMOTE)
		return c->o.engine == BENCH_ENGINE_NBD ? "lib nbd" : "lib rados";
	return name[k];
}

bool bench_cold_runs(const struct bench_ctx *c, enum bench_cold k, int dfd,
		     bool uring)
{
	if (bench_engine_remote(c->o.engine))
		return k == BENCH_COLD_REMOTE;
	if (k == BENCH_COLD_REMOTE)
		return false;
	if (k >= BENCH_COLD_POSIX_DIRECT && dfd < 0)
		return false;
	return k != BENCH_COLD_URING_DIRECT || uring;
}

int bench_cold_start(struct bench_ctx *c, enum bench_cold k, int fd,
		     int dfd, struct bench_reader *r, double *resident)
{
	memset(r, 0, sizeof(*r));
	if (k == BENCH_COLD_REMOTE) {
		*resident = 0;
		return bench_reader_open(c, r, c->o.engine, -1, c->o.size);
	}
	*resident = bench_drop_kernel_cache(c, fd, c->o.size);
	if (*resident < 0)
		return (int)*resident;
	if (k == BENCH_COLD_PREAD)
		return 0;
	return bench_reader_open(c, r,
				 k == BENCH_COLD_URING_DIRECT
					 ? BENCH_ENGINE_URING
					 : BENCH_ENGINE_POSIX,
				 k == BENCH_COLD_POSIX ? fd : dfd, c->o.size);
}

int bench_populate(struct folio_mapping *m, uint64_t size, size_t chunk)
{
	unsigned char *buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	int err = 0;
	for (uint64_t at = 0; at < size && !err; at += chunk) {
		size_t n = (size_t)(size - at < chunk ? size - at : chunk);
		ssize_t r = folio_mapping_read(m, buf, n, at);
		if (r != (ssize_t)n)
			err = r < 0 ? (int)r : -EIO;
		bench_progress("caching the file: %llu/%llu MiB",
			       (unsigned long long)(at / MIB),
			       (unsigned long long)(size / MIB));
	}
	bench_progress_done();
	free(buf);
	return err;
}

/* ---- threads ------------------------------------------------------------ */

double bench_run_threads(const char *what, unsigned n, void *(*fn)(void *),
			 void *arg, size_t arg_size, double seconds,
			 atomic_bool *stop)
{
	pthread_t *tid = calloc(n, sizeof(*tid));
	if (!tid)
		return -1;
	atomic_store(stop, false);
	uint64_t start = bench_now_ns();
	unsigned started = 0;
	for (; started < n; started++) {
		void *a = (char *)arg + started * arg_size;
		if (pthread_create(&tid[started], NULL, fn, a))
			break;
	}
	if (started == n) {
		uint64_t end = start + (uint64_t)(seconds * 1e9);
		for (uint64_t now; (now = bench_now_ns()) < end;) {
			uint64_t step = 100000000u;
			bench_sleep_until(now + (end - now < step ? end - now
								  : step));
			bench_progress("%s: %.1f/%.1f s", what,
				       (double)(bench_now_ns() - start) / 1e9,
				       seconds);
		}
	}
	atomic_store(stop, true);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	double elapsed = (double)(bench_now_ns() - start) / 1e9;
	bench_progress_done();
	free(tid);
	if (started < n) {
		fprintf(stderr, "folio-bench: cannot start %u threads\n", n);
		return -1;
	}
	return elapsed;
}

/* ---- progress ----------------------------------------------------------- */

static int progress_tty = -1;
static bool progress_shown;
static uint64_t progress_last;

void bench_progress(const char *fmt, ...)
{
	if (progress_tty < 0)
		progress_tty = isatty(STDERR_FILENO);
	if (!progress_tty)
		return;
	uint64_t now = bench_now_ns();
	if (progress_shown && now - progress_last < 100000000u)
		return;
	progress_last = now;
	va_list ap;
	va_start(ap, fmt);
	fputs("\r\033[K", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
	progress_shown = true;
}

void bench_progress_done(void)
{
	if (progress_shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		progress_shown = false;
	}
}

/* ---- results ------------------------------------------------------------ */

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

void bench_title(struct bench_ctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->title, sizeof(c->title), fmt, ap);
	va_end(ap);
}

void bench_note(struct bench_ctx *c, const char *fmt, ...)
{
	if (c->nnotes == BENCH_MAX_NOTES)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->notes[c->nnotes++], sizeof(c->notes[0]), fmt, ap);
	va_end(ap);
}

static struct bench_kv *kv_slot(struct bench_variant *v, const char *key)
{
	if (!v)
		return NULL;
	for (unsigned i = 0; i < v->n; i++)
		if (!strcmp(v->kv[i].key, key))
			return &v->kv[i];
	if (v->n == BENCH_MAX_KV)
		return NULL;
	struct bench_kv *kv = &v->kv[v->n++];
	copy_str(kv->key, sizeof(kv->key), key);
	return kv;
}

void bench_num(struct bench_variant *v, const char *key, double val)
{
	struct bench_kv *kv = kv_slot(v, key);
	if (kv) {
		kv->is_str = false;
		kv->num = val;
	}
}

void bench_str(struct bench_variant *v, const char *key, const char *val)
{
	struct bench_kv *kv = kv_slot(v, key);
	if (kv) {
		kv->is_str = true;
		copy_str(kv->str, sizeof(kv->str), val);
	}
}

void bench_param_num(struct bench_ctx *c, const char *key, double v)
{
	bench_num(&c->params, key, v);
}

void bench_param_str(struct bench_ctx *c, const char *key, const char *v)
{
	bench_str(&c->params, key, v);
}

struct bench_variant *bench_variant(struct bench_ctx *c, const char *name)
{
	if (c->nvariants == BENCH_MAX_VARIANTS)
		return NULL;
	struct bench_variant *v = &c->variants[c->nvariants++];
	memset(v, 0, sizeof(*v));
	copy_str(v->name, sizeof(v->name), name);
	return v;
}

void bench_row(struct bench_ctx *c, const struct bench_row *r)
{
	if (c->nrows == BENCH_MAX_ROWS)
		return;
	struct bench_row_store *row = &c->rows[c->nrows++];
	copy_str(row->figure, sizeof(row->figure), r->figure);
	row->value = r->value;
	copy_str(row->unit, sizeof(row->unit), r->unit);
	copy_str(row->cmp, sizeof(row->cmp), r->cmp);
	row->ratio = r->ratio;
	row->wa = r->wa;
	row->flags = r->flags;
}

/* Sum of the cpu line of /proc/stat: busy and total ticks. */
static int cpu_ticks(uint64_t *busy, uint64_t *total)
{
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return -1;
	unsigned long long v[10] = {0};
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
			  "%llu",
		       &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
		       &v[8], &v[9]);
	fclose(f);
	if (n < 5)
		return -1;
	*total = 0;
	for (int i = 0; i < 8; i++) /* guest time is already in user */
		*total += v[i];
	*busy = *total - v[3] - v[4]; /* minus idle and iowait */
	return 0;
}

/* Share of all CPUs busy over the next 200 ms (this program is idle
 * then, so it is everybody else), or -1 when /proc/stat is unreadable. */
static double cpu_busy_fraction(void)
{
	uint64_t b0, t0, b1, t1;
	if (cpu_ticks(&b0, &t0))
		return -1;
	bench_sleep_until(bench_now_ns() + 200000000u);
	if (cpu_ticks(&b1, &t1) || t1 <= t0)
		return -1;
	return (double)(b1 - b0) / (double)(t1 - t0);
}

void bench_params_common(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	unsigned uses = c->cmd ? c->cmd->uses : 0;
	if (uses & BOPT_SIZE)
		bench_param_num(c, "size", (double)o->size);
	if (uses & BOPT_BS)
		bench_param_num(c, "bs", (double)o->bs);
	if (uses & BOPT_JOBS)
		bench_param_num(c, "jobs", o->jobs);
	if (uses & BOPT_RUNTIME)
		bench_param_num(c, "runtime", o->runtime);
	if (uses & BOPT_FOLIO_SIZE)
		bench_param_num(c, "folio_size", (double)o->folio_size);
	if (uses & BOPT_BLOCK_SIZE)
		bench_param_num(c, "block_size", (double)o->block_size);
	if (uses & BOPT_ENGINE)
		bench_param_str(c, "engine", bench_engine_name(o->engine));
	if ((uses & BOPT_ENGINE) && o->engine == BENCH_ENGINE_NBD)
		bench_param_str(c, "uri", o->uri);
	if ((uses & BOPT_TRACKING) && (o->given & BOPT_TRACKING))
		bench_param_str(c, "tracking", o->tracking == BENCH_TRACK_BLOCK
						       ? "block" : "folio");
	if (uses & BOPT_DIR)
		bench_param_str(c, "dir", o->dir);
	/* Other processes competing for the CPUs skew every figure: say so
	 * next to the figures rather than let them pass for the machine's.
	 * (The load average would also count this program's own threads of
	 * the workload before, and tasks sleeping in fdatasync.) */
	double busy = cpu_busy_fraction();
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	bench_param_num(c, "cpus", (double)cpus);
	if (busy >= 0) {
		bench_param_num(c, "cpu_busy_before", busy);
		if (busy >= 0.25)
			bench_note(c, "other processes kept %.0f%% of the %ld "
				      "CPUs busy just before this run: figures "
				      "may be noisy",
				   busy * 100, cpus);
	}
}

double bench_mapping_stats(struct bench_variant *v,
			   const struct folio_mapping_stats *b,
			   const struct folio_mapping_stats *a)
{
	uint64_t written = a->bytes_written - b->bytes_written;
	uint64_t wb = a->wb_bytes - b->wb_bytes;
	bench_num(v, "bytes_written", (double)written);
	bench_num(v, "wb_bytes", (double)wb);
	bench_num(v, "wb_requests", (double)(a->wb_requests - b->wb_requests));
	bench_num(v, "wb_merges", (double)(a->wb_merges - b->wb_merges));
	bench_num(v, "read_bytes", (double)(a->read_bytes - b->read_bytes));
	bench_num(v, "flushes", (double)(a->flushes - b->flushes));
	bench_num(v, "errors", (double)(a->errors - b->errors));
	double wa = written ? (double)wb / (double)written : 0;
	bench_num(v, "write_amplification", wa);
	return wa;
}

void bench_devmodel_stats(struct bench_variant *v, struct devmodel *d)
{
	if (!d)
		return;
	struct devmodel_stats st;
	devmodel_stats(d, &st);
	bench_num(v, "device_requests", (double)st.requests);
	bench_num(v, "device_bytes", (double)st.bytes);
	bench_num(v, "device_flushes", (double)st.flushes);
	bench_num(v, "device_busy_s", (double)st.busy_ns / 1e9);
}

/* ---- option parsing ----------------------------------------------------- */

struct common_opt {
	const char *name;
	unsigned bit;
	const char *metavar;
	const char *help;
};

static const struct common_opt common_opts[] = {
	{"size", BOPT_SIZE, "SIZE", "data size (file, region or cache)"},
	{"bs", BOPT_BS, "SIZE", "bytes per call (write or read)"},
	{"jobs", BOPT_JOBS, "N", "threads"},
	{"runtime", BOPT_RUNTIME, "SEC", "seconds per measured variant "
					 "(fractional ok)"},
	{"folio-size", BOPT_FOLIO_SIZE, "SIZE", "max folio size"},
	{"block-size", BOPT_BLOCK_SIZE, "SIZE", "block size (dirty/uptodate "
						"granularity)"},
	{"engine", BOPT_ENGINE, "NAME", "I/O engine: posix, uring, mem, nbd (--uri) or rados\n"
	 "                             ($FOLIO_BENCH_CEPH_CONF)"},
	{"uri", BOPT_URI, "URI", "--engine nbd: the export (nbd://HOST[:PORT][/NAME] or\n"
	 "                             nbd+unix:///?socket=PATH)"},
	{"tracking", BOPT_TRACKING, "MODE", "dirty tracking: block (per "
					    "block) or folio (whole folio)"},
	{"dir", BOPT_DIR, "DIR", "directory for temporary files"},
	{"device-model", BOPT_DEVMODEL, "bw=B,lat=US",
	 "model a device: each write request costs lat us + len/bw "
	 "(bw in bytes/s, K/M/G ok)"},
};

#define NCOMMON (sizeof(common_opts) / sizeof(common_opts[0]))

/* Used when a workload (or the default run) leaves a field at 0. */
static const struct bench_opts generic_defaults = {
	.size = 64 * MIB,
	.bs = 4 * KIB,
	.jobs = 1,
	.runtime = 1,
	.folio_size = 64 * KIB,
	.block_size = 4 * KIB,
	.engine = BENCH_ENGINE_MEM,
	.dir = "/var/tmp",
};

static void defaults_for(const struct bench_cmd *cmd, struct bench_opts *o)
{
	*o = generic_defaults;
	if (!cmd)
		return;
	const struct bench_opts *d = &cmd->defaults;
	if (d->size)
		o->size = d->size;
	if (d->bs)
		o->bs = d->bs;
	if (d->jobs)
		o->jobs = d->jobs;
	if (d->runtime > 0)
		o->runtime = d->runtime;
	if (d->folio_size)
		o->folio_size = d->folio_size;
	if (d->block_size)
		o->block_size = d->block_size;
	o->engine = d->engine;
	o->tracking = d->tracking;
	if (d->dir)
		o->dir = d->dir;
}

static const char *cmd_name(const struct bench_ctx *c)
{
	return c->cmd ? c->cmd->name : NULL;
}

BENCH_PRINTF(2, 3)
static int usage_error(const struct bench_ctx *c, const char *fmt, ...)
{
	const char *name = cmd_name(c);
	fprintf(stderr, "folio-bench%s%s: ", name ? " " : "", name ? name : "");
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'folio-bench%s%s --help'.\n", name ? " " : "",
		name ? name : "");
	return 2;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int parse_uint(const char *s, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_list(const char *s, bool sizes, struct bench_list *l)
{
	char buf[512];
	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	l->n = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		int r = sizes ? bench_parse_size(t, &v) : parse_uint(t, &v);
		if (r || !v || l->n == BENCH_LIST_MAX)
			return -EINVAL;
		l->v[l->n++] = v;
	}
	return l->n ? 0 : -EINVAL;
}

static int set_common(struct bench_ctx *c, const struct common_opt *co,
		      const char *val)
{
	struct bench_opts *o = &c->o;
	const char *n = co->name;
	uint64_t v = 0;
	switch (co->bit) {
	case BOPT_SIZE:
	case BOPT_BS:
	case BOPT_FOLIO_SIZE:
	case BOPT_BLOCK_SIZE:
		if (bench_parse_size(val, &v) || !v)
			return usage_error(c, "--%s: '%s' is not a size (use "
					      "e.g. 4096, 4K, 64M, 1G)",
					   n, val);
		if (co->bit == BOPT_SIZE) {
			if (v > (UINT64_C(1) << 50))
				return usage_error(c, "--size: %s is too "
						      "large", val);
			o->size = v;
		} else if (co->bit == BOPT_BS) {
			if (v > GIB)
				return usage_error(c, "--bs: at most 1G");
			o->bs = v;
		} else if (co->bit == BOPT_FOLIO_SIZE) {
			if (!is_pow2(v) || v < FOLIO_MIN_BLOCK_SIZE ||
			    v > FOLIO_MAX_SIZE)
				return usage_error(c, "--folio-size: a power "
						      "of two from 512 to 2M");
			o->folio_size = v;
		} else {
			if (!is_pow2(v) || v < FOLIO_MIN_BLOCK_SIZE ||
			    v > FOLIO_MAX_BLOCK_SIZE)
				return usage_error(c, "--block-size: a power "
						      "of two from 512 to 64K");
			o->block_size = v;
		}
		break;
	case BOPT_JOBS:
		if (parse_uint(val, &v) || v < 1 || v > 1024)
			return usage_error(c, "--jobs: a number from 1 to "
					      "1024, not '%s'", val);
		o->jobs = (unsigned)v;
		break;
	case BOPT_RUNTIME: {
		char *end;
		errno = 0;
		double d = strtod(val, &end);
		if (errno || end == val || *end || !isfinite(d) || d <= 0 ||
		    d > 86400)
			return usage_error(c, "--runtime: seconds > 0 (e.g. "
					      "2 or 0.5), not '%s'", val);
		o->runtime = d;
		break;
	}
	case BOPT_ENGINE:
		if (!strcmp(val, "posix"))
			o->engine = BENCH_ENGINE_POSIX;
		else if (!strcmp(val, "uring"))
			o->engine = BENCH_ENGINE_URING;
		else if (!strcmp(val, "mem"))
			o->engine = BENCH_ENGINE_MEM;
		else if (!strcmp(val, "rados"))
			o->engine = BENCH_ENGINE_RADOS;
		else if (!strcmp(val, "nbd"))
			o->engine = BENCH_ENGINE_NBD;
		else
			return usage_error(c, "--engine: posix, uring, mem, "
					      "nbd or rados, not '%s'", val);
		break;
	case BOPT_URI:
		if (!*val)
			return usage_error(c, "--uri: an NBD URI, not ''");
		o->uri = val;
		break;
	case BOPT_TRACKING:
		if (!strcmp(val, "block"))
			o->tracking = BENCH_TRACK_BLOCK;
		else if (!strcmp(val, "folio"))
			o->tracking = BENCH_TRACK_FOLIO;
		else
			return usage_error(c, "--tracking: block or folio, "
					      "not '%s'", val);
		break;
	case BOPT_DIR: {
		struct stat st;
		if (stat(val, &st) || !S_ISDIR(st.st_mode) ||
		    access(val, W_OK | X_OK))
			return usage_error(c, "--dir: '%s' is not a writable "
					      "directory", val);
		o->dir = val;
		break;
	}
	case BOPT_DEVMODEL:
		if (devmodel_parse(val, &o->dm))
			return usage_error(c, "--device-model: expected "
					      "bw=<bytes/s>,lat=<usec> (e.g. "
					      "bw=200M,lat=100), not '%s'",
					   val);
		break;
	}
	o->given |= co->bit;
	return 0;
}

static int set_xopt(struct bench_ctx *c, struct bench_xopt *x,
		    const char *val)
{
	uint64_t v;
	switch (x->type) {
	case BENCH_X_FLAG:
		*(bool *)x->var = true;
		break;
	case BENCH_X_UINT:
		if (parse_uint(val, &v))
			return usage_error(c, "--%s: a number, not '%s'",
					   x->name, val);
		*(uint64_t *)x->var = v;
		break;
	case BENCH_X_SIZE:
		if (bench_parse_size(val, &v))
			return usage_error(c, "--%s: '%s' is not a size",
					   x->name, val);
		*(uint64_t *)x->var = v;
		break;
	case BENCH_X_STR: {
		bool ok = !x->choices;
		for (const char *const *ch = x->choices; ch && *ch; ch++)
			ok |= !strcmp(*ch, val);
		if (!ok)
			return usage_error(c, "--%s: unknown value '%s'",
					   x->name, val);
		*(const char **)x->var = val;
		break;
	}
	case BENCH_X_SIZES:
	case BENCH_X_COUNTS:
		if (parse_list(val, x->type == BENCH_X_SIZES, x->var))
			return usage_error(c, "--%s: a comma-separated list "
					      "of up to %d non-zero %s, not "
					      "'%s'",
					   x->name, BENCH_LIST_MAX,
					   x->type == BENCH_X_SIZES ? "sizes"
								    : "numbers",
					   val);
		break;
	}
	x->given = true;
	return 0;
}

int bench_parse_args(struct bench_ctx *c, int argc, char **argv,
		     bool common_only)
{
	const struct bench_cmd *cmd = c->cmd;
	defaults_for(cmd, &c->o);
	if (c->quick && cmd) {
		if (cmd->quick_size)
			c->o.size = cmd->quick_size;
		if (cmd->quick_runtime > 0)
			c->o.runtime = cmd->quick_runtime;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!strcmp(arg, "-h"))
			return -1;
		if (strncmp(arg, "--", 2) || !arg[2])
			return usage_error(c, "unexpected argument '%s'", arg);
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const char *val = eq ? eq + 1 : NULL;

		if (nlen == 4 && !strncmp(name, "help", 4))
			return -1;
		if (nlen == 4 && !strncmp(name, "json", 4)) {
			if (val)
				return usage_error(c, "--json takes no value");
			c->o.json = true;
			continue;
		}
		const struct common_opt *co = NULL;
		for (size_t k = 0; k < NCOMMON; k++)
			if (strlen(common_opts[k].name) == nlen &&
			    !strncmp(common_opts[k].name, name, nlen))
				co = &common_opts[k];
		struct bench_xopt *xo = NULL;
		for (struct bench_xopt *x = cmd && !common_only ? cmd->xopts
								: NULL;
		     x && x->name; x++)
			if (strlen(x->name) == nlen &&
			    !strncmp(x->name, name, nlen))
				xo = x;
		if (!co && !xo)
			return usage_error(c, "unknown option '--%.*s'",
					   (int)nlen, name);
		if (xo && xo->type == BENCH_X_FLAG) {
			if (val)
				return usage_error(c, "--%s takes no value",
						   xo->name);
			set_xopt(c, xo, NULL);
			continue;
		}
		if (!val) {
			if (i + 1 == argc)
				return usage_error(c, "--%.*s needs a value",
						   (int)nlen, name);
			val = argv[++i];
		}
		int r = co ? set_common(c, co, val) : set_xopt(c, xo, val);
		if (r)
			return r;
	}
	if ((!cmd || (cmd->uses & BOPT_BLOCK_SIZE)) &&
	    c->o.block_size > c->o.folio_size) {
		/* Only one side was given: follow it rather than refuse. */
		if (!(c->o.given & BOPT_FOLIO_SIZE))
			c->o.folio_size = c->o.block_size;
		else if (!(c->o.given & BOPT_BLOCK_SIZE))
			c->o.block_size = c->o.folio_size;
		else
			return usage_error(c, "--block-size must not exceed "
					      "--folio-size");
	}
	if (!cmd || (cmd->uses & BOPT_ENGINE)) {
		const struct bench_opts *o = &c->o;
		if (o->engine == BENCH_ENGINE_NBD && cmd &&
		    !(cmd->uses & BOPT_URI))
			return usage_error(c, "--engine nbd: not for this "
					      "workload (randwrite-sync, "
					      "seqread, randread take it)");
		if (o->engine == BENCH_ENGINE_NBD && !o->uri)
			return usage_error(c, "--engine nbd needs --uri URI");
		if (bench_engine_remote(o->engine) && o->dm.on)
			return usage_error(c, "--device-model models a local "
					      "device: not with --engine %s",
					   bench_engine_name(o->engine));
	}
	/* In the default run a common option is meant for whichever
	 * workloads use it: no point telling the others. */
	unsigned unused = cmd && !common_only ? c->o.given & ~cmd->uses : 0;
	for (size_t k = 0; k < NCOMMON; k++)
		if (unused & common_opts[k].bit)
			fprintf(stderr, "folio-bench %s: note: --%s has no "
					"effect on this workload\n",
				cmd->name, common_opts[k].name);
	return 0;
}

static void print_opt(FILE *f, const char *name, const char *metavar,
		      const char *help, const char *dflt)
{
	char left[64];
	snprintf(left, sizeof(left), "--%s%s%s", name, metavar ? " " : "",
		 metavar ? metavar : "");
	fprintf(f, "  %-26s ", left);
	/* A help text's own line breaks continue in the help column. */
	for (const char *h = help; *h; h++) {
		fputc(*h, f);
		if (*h != '\n')
			continue;
		fprintf(f, "%29s", "");
		while (h[1] == ' ')
			h++;
	}
	if (dflt && *dflt)
		fprintf(f, " [%s]", dflt);
	fputc('\n', f);
}

void bench_print_options(FILE *f, const struct bench_cmd *cmd)
{
	struct bench_opts d;
	defaults_for(cmd, &d);
	char buf[64];
	for (size_t k = 0; k < NCOMMON; k++) {
		const struct common_opt *co = &common_opts[k];
		if (cmd && !(cmd->uses & co->bit))
			continue;
		buf[0] = 0;
		/* Show only defaults the workload chose: a generic value it
		 * does not use as such would mislead. */
		const struct bench_opts *cd = cmd ? &cmd->defaults : NULL;
		bool own = cd && ((co->bit == BOPT_SIZE && cd->size) ||
				  (co->bit == BOPT_BS && cd->bs) ||
				  (co->bit == BOPT_JOBS && cd->jobs) ||
				  (co->bit == BOPT_RUNTIME && cd->runtime > 0) ||
				  (co->bit == BOPT_FOLIO_SIZE &&
				   cd->folio_size) ||
				  (co->bit == BOPT_BLOCK_SIZE &&
				   cd->block_size) ||
				  co->bit == BOPT_ENGINE || co->bit == BOPT_DIR);
		if (own) {
			switch (co->bit) {
			case BOPT_SIZE: bench_fmt_size(buf, 64, d.size); break;
			case BOPT_BS: bench_fmt_size(buf, 64, d.bs); break;
			case BOPT_JOBS: snprintf(buf, 64, "%u", d.jobs); break;
			case BOPT_RUNTIME:
				snprintf(buf, 64, "%g", d.runtime);
				break;
			case BOPT_FOLIO_SIZE:
				bench_fmt_size(buf, 64, d.folio_size);
				break;
			case BOPT_BLOCK_SIZE:
				bench_fmt_size(buf, 64, d.block_size);
				break;
			case BOPT_ENGINE:
				snprintf(buf, 64, "%s",
					 bench_engine_name(d.engine));
				break;
			case BOPT_DIR: snprintf(buf, 64, "%s", d.dir); break;
			default: break;
			}
		}
		print_opt(f, co->name, co->metavar, co->help, buf);
	}
	print_opt(f, "json", NULL, "print one JSON object with all results "
				   "on stdout", NULL);
	print_opt(f, "help", NULL, "show this help", NULL);
	for (struct bench_xopt *x = cmd ? cmd->xopts : NULL; x && x->name;
	     x++) {
		buf[0] = 0;
		switch (x->type) {
		case BENCH_X_UINT: {
			/* 0 means "not set" for these: nothing to show. */
			unsigned long long v = *(uint64_t *)x->var;
			if (v)
				snprintf(buf, 64, "%llu", v);
			break;
		}
		case BENCH_X_SIZE:
			bench_fmt_size(buf, 64, *(uint64_t *)x->var);
			break;
		case BENCH_X_STR:
			if (*(const char **)x->var)
				snprintf(buf, 64, "%s",
					 *(const char **)x->var);
			break;
		case BENCH_X_SIZES:
		case BENCH_X_COUNTS: {
			const struct bench_list *l = x->var;
			size_t at = 0;
			for (unsigned i = 0; i < l->n && at < 60; i++) {
				char one[24];
				if (x->type == BENCH_X_SIZES)
					bench_fmt_size(one, sizeof(one),
						       l->v[i]);
				else
					snprintf(one, sizeof(one), "%llu",
						 (unsigned long long)l->v[i]);
				at += (size_t)snprintf(buf + at, 64 - at,
						       "%s%s", i ? "," : "",
						       one);
			}
			break;
		}
		default:
			break;
		}
		print_opt(f, x->name, x->metavar, x->help, buf);
	}
	fprintf(f, "Sizes take K, M, G suffixes (powers of 1024).\n");
}

/* ---- text output -------------------------------------------------------- */

/* Enough digits to read, never an exponent. */
static const char *fmt_num(char *buf, size_t len, double v)
{
	double a = fabs(v);
	const char *fmt = a >= 1000 ? "%.0f" : a >= 100 ? "%.1f"
					     : a >= 1 ? "%.2f" : "%.3f";
	snprintf(buf, len, fmt, v);
	return buf;
}

struct cell_row {
	char c[6][96];
};

static void print_cells(FILE *f, const struct cell_row *rows, unsigned n,
			unsigned ncol, const bool *right)
{
	size_t w[6] = {0};
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < ncol; k++)
			if (strlen(rows[i].c[k]) > w[k])
				w[k] = strlen(rows[i].c[k]);
	for (unsigned i = 0; i < n; i++) {
		char line[6 * 100];
		size_t at = 0;
		for (unsigned k = 0; k < ncol; k++)
			at += (size_t)snprintf(line + at, sizeof(line) - at,
					       right[k] ? "  %*s" : "  %-*s",
					       (int)w[k], rows[i].c[k]);
		while (at && line[at - 1] == ' ')
			line[--at] = 0;
		fprintf(f, "%s\n", line);
	}
}

static void row_cells(const struct bench_ctx *c, unsigned i, bool label,
		      char *fig, char *val, char *cmp, char *ratio, char *wa,
		      size_t len)
{
	char num[48];
	snprintf(fig, len, "%s%s", c->rows[i].figure,
		 label && c->modelled ? " (modelled device)" : "");
	snprintf(val, len, "%s %s", fmt_num(num, sizeof(num), c->rows[i].value),
		 c->rows[i].unit);
	snprintf(cmp, len, "%s", c->rows[i].cmp[0] ? c->rows[i].cmp : "-");
	if (c->rows[i].ratio > 0)
		snprintf(ratio, len, "%sx",
			 fmt_num(num, sizeof(num), c->rows[i].ratio));
	else
		snprintf(ratio, len, "-");
	if (c->rows[i].wa > 0)
		snprintf(wa, len, "%.2f", c->rows[i].wa);
	else
		snprintf(wa, len, "-");
}

static void print_model_line(FILE *f, const struct bench_ctx *c)
{
	if (!c->modelled)
		return;
	char bw[32];
	if (c->o.dm.bw)
		bench_fmt_size(bw, sizeof(bw), c->o.dm.bw);
	else
		snprintf(bw, sizeof(bw), "unlimited");
	fprintf(f, "  (modelled device) bw=%s B/s, lat=%g us per write "
		   "request, one request at a time\n",
		bw, (double)c->o.dm.lat_ns / 1000);
}

void bench_print_table(FILE *f, const struct bench_ctx *c)
{
	fprintf(f, "\n%s: %s%s\n", c->cmd->name, c->title,
		c->modelled ? " (modelled device)" : "");
	print_model_line(f, c);
	bool any_wa = false;
	for (unsigned i = 0; i < c->nrows; i++)
		any_wa |= c->rows[i].wa > 0;
	struct cell_row *rows = calloc(c->nrows + 1, sizeof(*rows));
	if (!rows)
		return;
	const char *head[] = {"figure", "value", "comparison", "ratio",
			      "write amp"};
	for (unsigned k = 0; k < 5; k++)
		snprintf(rows[0].c[k], sizeof(rows[0].c[k]), "%s", head[k]);
	for (unsigned i = 0; i < c->nrows; i++) {
		struct cell_row *r = &rows[i + 1];
		row_cells(c, i, false, r->c[0], r->c[1], r->c[2], r->c[3], r->c[4],
			  sizeof(r->c[0]));
	}
	static const bool right[] = {false, true, false, true, true};
	print_cells(f, rows, c->nrows + 1, any_wa ? 5 : 4, right);
	fprintf(f, "  (ratio = value / the comparison's value)\n");
	for (unsigned i = 0; i < c->nnotes; i++)
		fprintf(f, "  note: %s\n", c->notes[i]);
	free(rows);
}

void bench_print_combined(FILE *f, struct bench_ctx *const *cs, unsigned n)
{
	unsigned total = 1;
	for (unsigned j = 0; j < n; j++)
		total += cs[j]->legacy ? 1 : cs[j]->nrows;
	struct cell_row *rows = calloc(total, sizeof(*rows));
	if (!rows)
		return;
	const char *head[] = {"workload", "figure", "value", "comparison",
			      "ratio", "write amp"};
	for (unsigned k = 0; k < 6; k++)
		snprintf(rows[0].c[k], sizeof(rows[0].c[k]), "%s", head[k]);
	unsigned m = 1;
	for (unsigned j = 0; j < n; j++) {
		const struct bench_ctx *c = cs[j];
		if (c->legacy) {
			struct cell_row *r = &rows[m++];
			snprintf(r->c[0], sizeof(r->c[0]), "%s", c->cmd->name);
			snprintf(r->c[1], sizeof(r->c[1]), "(printed above, "
							   "exit %d)",
				 c->exit_code);
			for (unsigned k = 2; k < 6; k++)
				snprintf(r->c[k], sizeof(r->c[k]), "-");
			continue;
		}
		for (unsigned i = 0; i < c->nrows; i++) {
			if (!(c->rows[i].flags & BENCH_ROW_HEADLINE))
				continue;
			struct cell_row *r = &rows[m++];
			snprintf(r->c[0], sizeof(r->c[0]), "%s", c->cmd->name);
			row_cells(c, i, true, r->c[1], r->c[2], r->c[3], r->c[4],
				  r->c[5], sizeof(r->c[0]));
		}
	}
	fprintf(f, "\nfolio-bench: default run (brief; 'folio-bench "
		   "WORKLOAD' runs one at full size)\n");
	static const bool right[] = {false, false, true, false, true, true};
	print_cells(f, rows, m, 6, right);
	for (unsigned j = 0; j < n; j++) {
		print_model_line(f, cs[j]);
		for (unsigned i = 0; i < cs[j]->nnotes; i++)
			fprintf(f, "  %s: %s\n", cs[j]->cmd->name,
				cs[j]->notes[i]);
	}
	free(rows);
}

/* ---- JSON output -------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (!isfinite(v))
		fputs("null", f);
	else if (v == floor(v) && fabs(v) < 1e15)
		fprintf(f, "%.0f", v);
	else
		fprintf(f, "%.6g", v);
}

static void json_kvs(FILE *f, const struct bench_variant *v, bool with_name)
{
	fputc('{', f);
	bool first = true;
	if (with_name) {
		fputs("\"name\": ", f);
		json_str(f, v->name);
		first = false;
	}
	for (unsigned i = 0; i < v->n; i++) {
		fputs(first ? "" : ", ", f);
		first = false;
		json_str(f, v->kv[i].key);
		fputs(": ", f);
		if (v->kv[i].is_str)
			json_str(f, v->kv[i].str);
		else
			json_num(f, v->kv[i].num);
	}
	fputc('}', f);
}

static void json_ctx(FILE *f, const struct bench_ctx *c)
{
	fputs("    {\"name\": ", f);
	json_str(f, c->cmd->name);
	if (c->legacy) {
		fprintf(f, ", \"legacy\": true, \"exit_code\": %d}",
			c->exit_code);
		return;
	}
	fputs(", \"title\": ", f);
	json_str(f, c->title);
	fprintf(f, ",\n     \"modelled_device\": %s, \"device_model\": ",
		c->modelled ? "true" : "false");
	if (c->modelled) {
		fputs("{\"bw_bytes_per_s\": ", f);
		json_num(f, c->o.dm.bw ? (double)c->o.dm.bw : NAN);
		fputs(", \"lat_us\": ", f);
		json_num(f, (double)c->o.dm.lat_ns / 1000);
		fputs(", \"label\": \"(modelled device)\"}", f);
	} else {
		fputs("null", f);
	}
	fputs(",\n     \"params\": ", f);
	json_kvs(f, &c->params, false);
	fputs(",\n     \"variants\": [", f);
	for (unsigned i = 0; i < c->nvariants; i++) {
		fputs(i ? ",\n       " : "\n       ", f);
		json_kvs(f, &c->variants[i], true);
	}
	fputs("],\n     \"table\": [", f);
	for (unsigned i = 0; i < c->nrows; i++) {
		fputs(i ? ",\n       " : "\n       ", f);
		fputs("{\"figure\": ", f);
		json_str(f, c->rows[i].figure);
		fputs(", \"value\": ", f);
		json_num(f, c->rows[i].value);
		fputs(", \"unit\": ", f);
		json_str(f, c->rows[i].unit);
		fputs(", \"comparison\": ", f);
		if (c->rows[i].cmp[0])
			json_str(f, c->rows[i].cmp);
		else
			fputs("null", f);
		fputs(", \"ratio\": ", f);
		json_num(f, c->rows[i].ratio > 0 ? c->rows[i].ratio : NAN);
		fputs(", \"write_amplification\": ", f);
		json_num(f, c->rows[i].wa > 0 ? c->rows[i].wa : NAN);
		fprintf(f, ", \"headline\": %s}",
			c->rows[i].flags & BENCH_ROW_HEADLINE ? "true"
							      : "false");
	}
	fputs("],\n     \"notes\": [", f);
	for (unsigned i = 0; i < c->nnotes; i++) {
		fputs(i ? ", " : "", f);
		json_str(f, c->notes[i]);
	}
	fputs("]}", f);
}

void bench_print_json(FILE *f, struct bench_ctx *const *cs, unsigned n,
		      bool default_run)
{
	fprintf(f, "{\"tool\": \"folio-bench\", \"library_version\": "
		   "\"%d.%d\", \"default_run\": %s,\n \"workloads\": [\n",
		FOLIO_STATE_VERSION_MAJOR, FOLIO_STATE_VERSION_MINOR,
		default_run ? "true" : "false");
	for (unsigned i = 0; i < n; i++) {
		json_ctx(f, cs[i]);
		fputs(i + 1 < n ? ",\n" : "\n", f);
	}
	fputs(" ]}\n", f);
}
