/* SPDX-License-Identifier: MIT */
/*
 * randread: 4 KiB reads at uniformly random, seeded offsets of a file.
 *
 * Hot: every block already cached, so a read is a lookup and a copy. The
 * library (the whole file read into a mapping first) against pread() on
 * the same file with its pages in the kernel page cache, pread() on a
 * tmpfs copy (the kernel's cache with no device behind it: the issue's
 * target is the library at >= 1.5x that) and memcpy() from a flat buffer
 * (the limit). The timed loops are functions of their own for callgrind
 * (folio-bench callgrind read counts instructions per read).
 *
 * Cold: both caches dropped (as in seqread), a new mapping, and reads for
 * --runtime seconds or until a quarter of the file's blocks were asked
 * for, whichever is first (more and repeats would make the figures
 * hot ones). Besides reads/s it reports the bytes the engine read
 * per byte asked: readahead must not turn random 4 KiB reads into large
 * ones (target <= 1.1), and the device's own count (/proc/self/io) shows
 * what the kernel's readahead does for pread.
 *
 * With --engine nbd or rados the library's variants read a remote store,
 * filled once; hot pread of the file and the cold kernel variant have no
 * file to read and are skipped (the table says so); tmpfs and memcpy stay
 * as the local references.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static const char *only;
static const char *phase = "both";
static uint64_t iters;
static uint64_t seed = 0x5eed;

static const char *const only_choices[] = {"lib", "pread", "tmpfs", "memcpy",
					   NULL};
static const char *const phase_choices[] = {"hot", "cold", "both", NULL};

static struct bench_xopt xopts[] = {
	{.name = "phase", .type = BENCH_X_STR, .var = &phase,
	 .metavar = "WHICH", .choices = phase_choices,
	 .help = "hot, cold or both"},
	{.name = "only", .type = BENCH_X_STR, .var = &only,
	 .metavar = "WHICH", .choices = only_choices,
	 .help = "one hot variant only: lib, pread, tmpfs or memcpy"},
	{.name = "iters", .type = BENCH_X_UINT, .var = &iters, .metavar = "N",
	 .help = "exactly N timed hot reads per variant instead of --runtime "
		 "(for callgrind)"},
	{.name = "seed", .type = BENCH_X_UINT, .var = &seed, .metavar = "N",
	 .help = "seed of the offsets (the same in every variant)"},
	{0},
};

/* The offsets: uniform over the file's bs-aligned slots. */
struct cursor {
	uint64_t state, slots, bs;
};

static inline uint64_t next_off(struct cursor *c)
{
	return bench_rand(&c->state) % c->slots * c->bs;
}

BENCH_NOINLINE static int randread_loop_lib(struct folio_mapping *m,
					    char *buf, struct cursor *c,
					    uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (folio_mapping_read(m, buf, c->bs, next_off(c)) !=
		    (ssize_t)c->bs)
			return -EIO;
	return 0;
}

BENCH_NOINLINE static int randread_loop_pread(int fd, char *buf,
					      struct cursor *c, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		ssize_t r = pread(fd, buf, c->bs, (off_t)next_off(c));
		if (r != (ssize_t)c->bs)
			return r < 0 ? -errno : -EIO;
	}
	return 0;
}

BENCH_NOINLINE static int randread_loop_memcpy(const char *flat, char *buf,
					       struct cursor *c, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		memcpy(buf, flat + next_off(c), c->bs);
		/* Keep the compiler from dropping copies nobody reads. */
		__asm__ __volatile__("" : : "r"(buf) : "memory");
	}
	return 0;
}

/* Where a variant reads from: a mapping, a descriptor or a flat buffer. */
struct source {
	struct folio_mapping *m;
	int fd;
	const char *flat;
};

/* What one batch of the timed loop needs (bench_timed_batches). */
struct run_state {
	const struct source *s;
	char *buf;
	struct cursor cur;
};

static int loop(void *arg, uint64_t n)
{
	struct run_state *r = arg;
	if (r->s->m)
		return randread_loop_lib(r->s->m, r->buf, &r->cur, n);
	if (r->s->flat)
		return randread_loop_memcpy(r->s->flat, r->buf, &r->cur, n);
	return randread_loop_pread(r->s->fd, r->buf, &r->cur, n);
}

struct result {
	double ops, ns;
	uint64_t reads;
	bool done;
};

/* The timed loop for `seconds` or `cap` reads (see bench_timed_batches);
 * every variant and round draws the same offsets. */
static int timed(struct bench_ctx *c, const struct source *s,
		 const char *name, uint64_t cap, double seconds,
		 uint64_t *reads, double *secs)
{
	const struct bench_opts *o = &c->o;
	struct run_state rs = {s, aligned_alloc(4096, (o->bs + 4095) / 4096 *
							      4096),
			       {seed, o->size / o->bs, o->bs}};
	if (!rs.buf)
		return -ENOMEM;
	char what[80];
	snprintf(what, sizeof(what), "randread [%s]", name);
	int err = bench_timed_batches(what, seconds, cap, 1024, loop, &rs,
				      reads, secs);
	free(rs.buf);
	return err;
}

/* A variant's figures from `ops` reads per second (the median round). */
static struct bench_variant *record(struct bench_ctx *c, const char *name,
				    uint64_t reads, double ops,
				    struct result *res)
{
	res->reads = reads;
	res->ops = ops;
	res->ns = ops > 0 ? 1e9 / ops : 0;
	res->done = true;
	struct bench_variant *v = bench_variant(c, name);
	bench_num(v, "reads", (double)reads);
	bench_num(v, "reads_per_s", res->ops);
	bench_num(v, "ns_per_read", res->ns);
	return v;
}

/* ---- hot ----------------------------------------------------------------- */

enum hot { H_LIB, H_PREAD, H_TMPFS, H_MEMCPY, H_N };

static const char *const hot_name[H_N] = {
	"hot lib", "hot pread (ext4 page cache)", "hot pread (tmpfs)",
	"hot memcpy",
};
static const char *const hot_only[H_N] = {"lib", "pread", "tmpfs", "memcpy"};

#define HOT_ROUNDS 5

/* A hot variant's source and what it owns. */
struct hot_src {
	struct source s;
	struct bench_reader r;
	char *flat;
	int tfd;
};

/* Make h's copy of the file hot. In enum order: the library's populate
 * drops the kernel's pages of fd (the posix engine's one-copy default),
 * so the pread variant warms them after it. */
static int hot_open(struct bench_ctx *c, enum hot h, int fd,
		    struct hot_src *hs)
{
	const struct bench_opts *o = &c->o;
	*hs = (struct hot_src){.s = {.fd = -1}, .tfd = -1};
	int err = 0;
	switch (h) {
	case H_LIB:
		err = bench_reader_open(c, &hs->r,
					bench_engine_remote(o->engine)
						? o->engine
						: BENCH_ENGINE_POSIX,
					fd, o->size);
		if (!err)
			err = bench_populate(hs->r.m, o->size, o->folio_size);
		hs->s.m = hs->r.m;
		break;
	case H_PREAD: {
		double in = bench_warm_kernel_cache(fd, o->size);
		if (in < 0)
			return (int)in;
		if (in < 0.99)
			bench_note(c, "only %.1f%% of the file stayed in the "
				      "kernel page cache: hot pread is partly "
				      "cold", in * 100);
		bench_param_num(c, "hot_pread_resident", in);
		hs->s.fd = fd;
		break;
	}
	case H_TMPFS:
		hs->tfd = bench_tmpfile("/dev/shm");
		if (hs->tfd < 0)
			return -EIO;
		err = bench_prefill(hs->tfd, o->size);
		hs->s.fd = hs->tfd;
		break;
	default:
		hs->flat = malloc(o->size);
		if (!hs->flat)
			return -ENOMEM;
		memset(hs->flat, 'r', o->size);
		hs->s.flat = hs->flat;
		break;
	}
	return err;
}

static int hot_close(struct hot_src *hs)
{
	int err = hs->r.m ? bench_reader_close(&hs->r) : 0;
	if (hs->tfd >= 0)
		close(hs->tfd);
	free(hs->flat);
	return err;
}

static void hot_rows(struct bench_ctx *c, const struct result *res)
{
	char fig[80];
	const struct result *lib = &res[H_LIB];
	for (enum hot h = 0; h < H_N; h++) {
		if (!res[h].done)
			continue;
		if (h != H_LIB && lib->done) {
			snprintf(fig, sizeof(fig), "hot lib vs %s",
				 hot_name[h] + 4);
			bench_row(c, &(struct bench_row){
					     .figure = fig, .value = lib->ops,
					     .unit = "reads/s",
					     .cmp = hot_name[h],
					     .ratio = lib->ops / res[h].ops,
					     .flags = h == H_TMPFS
							      ? BENCH_ROW_HEADLINE
							      : 0});
		}
		snprintf(fig, sizeof(fig), "%s reads/s", hot_name[h]);
		bench_row(c, &(struct bench_row){.figure = fig,
						 .value = res[h].ops,
						 .unit = "reads/s"});
		snprintf(fig, sizeof(fig), "%s time per read", hot_name[h]);
		bench_row(c, &(struct bench_row){.figure = fig,
						 .value = res[h].ns,
						 .unit = "ns"});
	}
	if (lib->done && res[H_TMPFS].done) {
		double x = lib->ops / res[H_TMPFS].ops;
		bench_note(c, "target hot lib >= 1.5x tmpfs pread: %.2fx, %s", x,
			   x >= 1.5 ? "met" : "NOT met");
	}
}

/* Every selected variant hot at once, then HOT_ROUNDS rounds of all of
 * them in turn (--runtime split over the rounds), so that load from
 * other tenants of the machine spreads over all variants; the median
 * round counts. With --iters, one round of exactly that many reads. */
static int run_hot(struct bench_ctx *c, int fd)
{
	struct hot_src hs[H_N];
	bool on[H_N];
	unsigned nr = iters ? 1 : HOT_ROUNDS;
	double ops[H_N][HOT_ROUNDS];
	uint64_t reads[H_N] = {0};
	int err = 0;
	for (enum hot h = 0; h < H_N; h++) {
		on[h] = !only || !strcmp(only, hot_only[h]);
		if (h == H_PREAD && fd < 0)
			on[h] = false; /* a remote store: no file */
		hs[h] = (struct hot_src){.s = {.fd = -1}, .tfd = -1};
		if (on[h] && !err)
			err = hot_open(c, h, fd, &hs[h]);
		if (err && on[h]) {
			fprintf(stderr, "folio-bench randread: %s: %s\n",
				hot_name[h], strerror(-err));
			on[h] = false;
		}
	}
	for (unsigned i = 0; i < nr && !err; i++) {
		for (enum hot h = 0; h < H_N && !err; h++) {
			if (!on[h])
				continue;
			uint64_t n = 0;
			double secs = 0;
			err = timed(c, &hs[h].s, hot_name[h], iters,
				    iters ? 0 : c->o.runtime / nr, &n, &secs);
			reads[h] += n;
			ops[h][i] = secs > 0 ? (double)n / secs : 0;
			if (err)
				fprintf(stderr, "folio-bench randread: %s: "
						"%s\n",
					hot_name[h], strerror(-err));
		}
	}
	struct result res[H_N];
	memset(res, 0, sizeof(res));
	for (enum hot h = 0; h < H_N && !err; h++) {
		if (!on[h])
			continue;
		struct bench_variant *v =
			record(c, hot_name[h], reads[h],
			       bench_median(ops[h], nr), &res[h]);
		bench_num(v, "rounds", nr);
		/* bench_median() sorted the rounds. */
		bench_num(v, "min_reads_per_s", ops[h][0]);
		bench_num(v, "max_reads_per_s", ops[h][nr - 1]);
		if (h == H_LIB) {
			struct folio_mapping_stats st = {.sz = sizeof(st)};
			folio_mapping_stats(hs[h].r.m, &st);
			bench_num(v, "folios", (double)st.folios);
			bench_num(v, "cached_bytes", (double)st.cached_bytes);
		}
	}
	for (enum hot h = 0; h < H_N; h++) {
		int e = hot_close(&hs[h]);
		if (!err)
			err = e;
	}
	if (!err)
		hot_rows(c, res);
	return err;
}

/* ---- cold ---------------------------------------------------------------- */

/* Bytes this process made the block layer read (all threads, including
 * io_uring's workers), or 0 when /proc/self/io is not there. */
static uint64_t device_read_bytes(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	if (!f)
		return 0;
	char line[128];
	uint64_t v = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read_bytes: %" SCNu64, &v) == 1)
			break;
	fclose(f);
	return v;
}

struct cold_result {
	struct result r;
	double engine_amp, device_amp;
};

static int cold_variant(struct bench_ctx *c, enum bench_cold k, int fd,
			int dfd, struct cold_result *res)
{
	const struct bench_opts *o = &c->o;
	struct bench_reader r;
	double left;
	int err = bench_cold_start(c, k, fd, dfd, &r, &left);
	if (err)
		return err;
	char name[64];
	snprintf(name, sizeof(name), "cold %s", bench_cold_label(c, k));
	struct source s = {.m = r.m, .fd = fd};
	uint64_t dev0 = device_read_bytes();
	uint64_t n = 0;
	double secs = 0;
	/* At most a quarter of the blocks, so that few reads (about one in
	 * eight) hit a block read before: the figures stay cold ones. */
	err = timed(c, &s, name, o->size / o->bs / 4, o->runtime, &n, &secs);
	uint64_t dev = device_read_bytes() - dev0;
	if (!err) {
		struct bench_variant *v =
			record(c, name, n, secs > 0 ? (double)n / secs : 0,
			       &res->r);
		bench_num(v, "seconds", secs);
		double asked = (double)res->r.reads * (double)o->bs;
		bench_num(v, "resident_before", left);
		bench_num(v, "device_read_bytes", (double)dev);
		/* A remote store's reads are no block-layer reads here. */
		res->device_amp = k == BENCH_COLD_REMOTE ? 0
							 : (double)dev / asked;
		bench_num(v, "device_bytes_per_byte_asked", res->device_amp);
		if (r.m) {
			struct folio_mapping_stats st = {.sz = sizeof(st)};
			folio_mapping_stats(r.m, &st);
			res->engine_amp = (double)st.read_bytes / asked;
			bench_num(v, "read_requests", (double)st.read_requests);
			bench_num(v, "read_bytes", (double)st.read_bytes);
			bench_num(v, "engine_bytes_per_byte_asked",
				  res->engine_amp);
		}
	}
	if (r.m) {
		int f = bench_reader_close(&r);
		if (!err)
			err = f;
	}
	return err;
}

static int run_cold(struct bench_ctx *c, int fd)
{
	bool uring = false;
	int dfd = fd >= 0 ? bench_direct_fd(c, fd, &uring) : -1;
	struct cold_result res[BENCH_COLD_N];
	memset(res, 0, sizeof(res));
	int err = 0;
	for (enum bench_cold k = 0; k < BENCH_COLD_N && !err; k++) {
		if (!bench_cold_runs(c, k, dfd, uring))
			continue;
		err = cold_variant(c, k, fd, dfd, &res[k]);
		if (err)
			fprintf(stderr, "folio-bench randread: %s: %s\n",
				bench_cold_label(c, k), strerror(-err));
	}
	if (dfd >= 0)
		close(dfd);
	if (err)
		return err;
	double worst = 0;
	char fig[80], base_name[64];
	snprintf(base_name, sizeof(base_name), "cold %s",
		 bench_cold_label(c, BENCH_COLD_PREAD));
	for (enum bench_cold k = 0; k < BENCH_COLD_N; k++) {
		if (!res[k].r.done)
			continue;
		bool base = k == BENCH_COLD_PREAD;
		bool vs_base = !base && res[BENCH_COLD_PREAD].r.done;
		unsigned headline = k == BENCH_COLD_POSIX_DIRECT ||
					    k == BENCH_COLD_REMOTE
				    ? BENCH_ROW_HEADLINE
				    : 0;
		snprintf(fig, sizeof(fig), "cold %s reads/s",
			 bench_cold_label(c, k));
		bench_row(c, &(struct bench_row){
				     .figure = fig, .value = res[k].r.ops,
				     .unit = "reads/s",
				     .cmp = vs_base ? base_name : NULL,
				     .ratio = vs_base
						      ? res[k].r.ops /
								res[BENCH_COLD_PREAD].r.ops
						      : 0,
				     .flags = headline});
		if (!base) {
			snprintf(fig, sizeof(fig),
				 "cold %s engine bytes / bytes asked",
				 bench_cold_label(c, k));
			bench_row(c, &(struct bench_row){
					     .figure = fig,
					     .value = res[k].engine_amp,
					     .unit = "x",
					     .flags = headline});
			if (res[k].engine_amp > worst)
				worst = res[k].engine_amp;
		}
		if (res[k].device_amp > 0) {
			snprintf(fig, sizeof(fig),
				 "cold %s device bytes / bytes asked",
				 bench_cold_label(c, k));
			bench_row(c, &(struct bench_row){
					     .figure = fig,
					     .value = res[k].device_amp,
					     .unit = "x"});
		}
	}
	bench_note(c, "target cold engine bytes / bytes asked <= 1.1: worst "
		      "%.3f, %s (below 1: offsets that repeat hit)",
		   worst, worst <= 1.1 ? "met" : "NOT met");
	return 0;
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	if (o->bs > o->size || o->bs % FOLIO_ENGINE_DIRECT_ALIGN) {
		fprintf(stderr, "folio-bench randread: --bs must be a multiple "
				"of 512 and at most --size\n");
		return 2;
	}
	bool hot = strcmp(phase, "cold") != 0;
	bool cold = strcmp(phase, "hot") != 0 && !only && !iters;
	char s1[32], s2[32];
	bench_title(c, "%s reads at uniformly random offsets of a %s file "
		       "(seed %" PRIu64 "), %s",
		    bench_fmt_size(s1, sizeof(s1), o->bs),
		    bench_fmt_size(s2, sizeof(s2), o->size), seed,
		    hot && cold ? "hot then cold" : hot ? "hot" : "cold");
	fprintf(stderr, "folio-bench randread: seed %" PRIu64 "\n", seed);
	bench_param_num(c, "seed", (double)seed);
	if (iters)
		bench_param_num(c, "iters", (double)iters);
	int fd;
	int err = bench_read_data(c, "hot pread and cold kernel pread", &fd);
	if (!err && hot)
		err = run_hot(c, fd);
	if (!err && cold)
		err = run_cold(c, fd);
	bench_note_coldness(c);
	bench_remote_drop(c);
	if (fd >= 0)
		close(fd);
	if (err) {
		fprintf(stderr, "folio-bench randread: %s\n", strerror(-err));
		return 1;
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "randread",
	.summary = "4 KiB random reads, hot (vs pread on ext4 and tmpfs, "
		   "memcpy) and cold",
	.exec = run,
	.in_default = true,
	.order = 36,
	.help =
	"Fills a --size file in --dir, then reads --bs blocks at uniformly\n"
	"random offsets (--seed; the same offsets in every variant) for\n"
	"--runtime seconds per variant (hot: in 5 interleaved rounds, median).\n"
	"Hot (every block cached first):\n"
	"  lib     folio_mapping_read() on a mapping holding the whole file\n"
	"  pread   pread() on the file, its pages in the kernel page cache\n"
	"  tmpfs   pread() on a copy in /dev/shm (target: lib >= 1.5x this)\n"
	"  memcpy  memcpy() from a flat buffer (the limit)\n"
	"Cold (kernel pages dropped and checked with mincore, new mapping;\n"
	"--runtime or reads of a quarter of the blocks, whichever is first):\n"
	"  kernel pread, lib over posix (buffered fd), posix and io_uring\n"
	"  (O_DIRECT fd): reads/s, engine bytes per byte asked (target <= 1.1)\n"
	"  and the block layer's bytes per byte asked (/proc/self/io).\n"
	"--engine nbd --uri URI or --engine rados: lib reads that store (filled\n"
	"once); hot pread and cold kernel pread are skipped (no file).\n"
	"For instruction counts, run one hot variant a fixed number of times:\n"
	"  valgrind --tool=callgrind --toggle-collect='randread_loop_lib*' \\\n"
	"      folio-bench randread --only lib --iters 100000\n"
	"(folio-bench callgrind read does it for lib, pread and memcpy).",
	.defaults = {.size = 1 * GIB, .bs = 4 * KIB, .runtime = 2,
		     .folio_size = FOLIO_MAX_SIZE, .block_size = 4 * KIB,
		     .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_RUNTIME | BOPT_FOLIO_SIZE |
		BOPT_BLOCK_SIZE | BOPT_DIR | BOPT_ENGINE | BOPT_URI,
	.xopts = xopts,
	.quick_size = 64 * MIB,
	.quick_runtime = 0.5,
};
BENCH_REGISTER(cmd)
