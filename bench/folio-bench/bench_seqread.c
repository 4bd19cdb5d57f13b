/* SPDX-License-Identifier: MIT */
/*
 * seqread: a cold file read sequentially, front to back, in --bs calls:
 * the kernel's pread() on a buffered descriptor (its readahead is the
 * baseline) against the library over the posix engine on a buffered
 * descriptor, the posix engine on an O_DIRECT one, and the io_uring
 * engine on an O_DIRECT one. Without readahead in the library, a 4 KiB
 * read of a cold mapping is one 4 KiB engine request: on O_DIRECT that
 * is one device round trip per call, which the requests-per-MiB figure
 * shows; once the library reads ahead the same runs show the effect.
 *
 * Cold means cold at both levels: before every round the file's kernel
 * pages are dropped (fsync + FADV_DONTNEED) and mincore() checks that
 * they went, and every library round starts from a new mapping. Rounds
 * interleave the variants so that drift of the machine (other tenants,
 * the host's cache) spreads over all of them; the median round counts.
 *
 * With --engine nbd or rados the library reads a remote store instead,
 * filled once before the rounds, each round over a new engine and
 * mapping; there is no file, so no kernel variant to compare with (the
 * table says so), and the engine requests per MiB are the figure to
 * watch: each is a network round trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "posix_threads.h"

static uint64_t rounds = 3;
static const char *posix_threads = "default";
static const char *memory = "warm";
static bool warm_memory;

static struct bench_xopt xopts[] = {
	{.name = "rounds", .type = BENCH_X_UINT, .var = &rounds,
	 .metavar = "N", .help = "cold rounds per variant (median counts)"},
	{.name = "posix-threads", .type = BENCH_X_STR, .var = &posix_threads,
	 .metavar = "LIST", .help = BENCH_POSIX_THREADS_HELP},
	{.name = "memory", .type = BENCH_X_STR, .var = &memory,
	 .metavar = "warm|fresh",
	 .help = "warm: an untimed pass of each variant before its round"},
	{0},
};

/* The posix engine settings (--posix-threads): the posix variants run
 * once per setting, named after it when more than the default runs. */
static struct bench_posix_list pt;
static bool pt_named;

static bool is_posix(enum bench_cold k)
{
	return k == BENCH_COLD_POSIX || k == BENCH_COLD_POSIX_DIRECT;
}

#define MAX_ROUNDS 32

struct series {
	double mbs[MAX_ROUNDS];
	double max_resident;
	struct folio_mapping_stats st; /* of the last round */
	unsigned n;
};

/* Reads [0, size) front to back in bs calls through pread or the mapping
 * and sets *secs to the time taken. 0 / -errno. */
static int read_all(int fd, struct folio_mapping *m, char *buf,
		    uint64_t size, uint64_t bs, double *secs)
{
	uint64_t t0 = bench_now_ns();
	for (uint64_t pos = 0; pos < size;) {
		size_t n = (size_t)(size - pos < bs ? size - pos : bs);
		ssize_t r;
		if (m) {
			r = folio_mapping_read(m, buf, n, pos);
		} else {
			r = pread(fd, buf, n, (off_t)pos);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				r = -errno;
		}
		if (r <= 0)
			return r < 0 ? (int)r : -EIO;
		pos += (uint64_t)r;
	}
	*secs = (double)(bench_now_ns() - t0) / 1e9;
	return 0;
}

/*
 * One pass of variant k over the file, recorded in s; s NULL: untimed,
 * recording nothing. --memory warm runs such a pass just before each
 * timed one, so that each side reads the cold data into memory its own
 * kind has just freed: the kernel the pages the drop gave back, the
 * library what its allocator kept of the freed mapping. Without it the
 * kernel's figure depends on the rounds before: on this VM free memory
 * the host has taken back faults on first touch (a 1 GiB pread after 5 s
 * idle: 0.9 GB/s, right after another: 5.4), so whichever side freed
 * memory last handed the other a warm start (doc/benchmarks.md, "Cold
 * sequential reads").
 */
static int one_round(struct bench_ctx *c, enum bench_cold k, int fd,
		     int dfd, uint64_t bs, char *buf, struct series *s)
{
	struct bench_reader r;
	double res;
	int err = bench_cold_start(c, k, fd, dfd, &r, &res);
	if (err)
		return err;
	if (s && res > s->max_resident)
		s->max_resident = res;
	double secs = 0;
	err = read_all(fd, r.m, buf, c->o.size, bs, &secs);
	if (r.m) {
		if (s) {
			s->st.sz = sizeof(s->st);
			folio_mapping_stats(r.m, &s->st);
		}
		int f = bench_reader_close(&r);
		if (!err)
			err = f;
	}
	if (!err && s)
		s->mbs[s->n++] = (double)c->o.size / secs / 1e6;
	return err;
}

/* The figures of one variant at one read size, recorded and returned. */
static double report(struct bench_ctx *c, enum bench_cold k, uint64_t bs,
		     struct series *s, double base_mbs, int workers)
{
	char name[64], sz[32], vname[48], wb[24];
	snprintf(vname, sizeof(vname), "%s", bench_cold_label(c, k));
	if (is_posix(k) && pt_named)
		snprintf(vname, sizeof(vname), "%s %s", bench_cold_label(c, k),
			 bench_posix_label(workers, wb, sizeof(wb)));
	snprintf(name, sizeof(name), "%s %s", vname,
		 bench_fmt_size(sz, sizeof(sz), bs));
	bool is_base = k == BENCH_COLD_PREAD;
	bool cmp_base = !is_base && base_mbs > 0;
	double mbs = bench_median(s->mbs, s->n);
	struct bench_variant *v = bench_variant(c, name);
	bench_str(v, "variant", vname);
	if (is_posix(k))
		bench_num(v, "posix_workers", workers);
	bench_num(v, "bs", (double)bs);
	bench_num(v, "rounds", s->n);
	bench_num(v, "mb_per_s", mbs);
	/* bench_median() sorted the rounds. */
	bench_num(v, "min_mb_per_s", s->mbs[0]);
	bench_num(v, "max_mb_per_s", s->mbs[s->n - 1]);
	bench_num(v, "max_resident_before", s->max_resident);
	double mib = (double)c->o.size / (double)MIB;
	double req_per_mib = (double)s->st.read_requests / mib;
	if (!is_base) {
		bench_num(v, "read_requests", (double)s->st.read_requests);
		bench_num(v, "read_bytes", (double)s->st.read_bytes);
		bench_num(v, "read_requests_per_mib", req_per_mib);
		bench_num(v, "bytes_per_request",
			  s->st.read_requests ? (double)s->st.read_bytes /
							(double)s->st.read_requests
					      : 0);
		bench_num(v, "folios", (double)s->st.folios);
	}
	char fig[128], cmp[64];
	snprintf(fig, sizeof(fig), "%s: %s reads", vname, sz);
	snprintf(cmp, sizeof(cmp), "kernel pread %s", sz);
	bench_row(c, &(struct bench_row){
			     .figure = fig, .value = mbs, .unit = "MB/s",
			     .cmp = cmp_base ? cmp : NULL,
			     .ratio = cmp_base ? mbs / base_mbs : 0,
			     .flags = is_base ? 0 : BENCH_ROW_HEADLINE});
	if (!is_base) {
		snprintf(fig, sizeof(fig), "%s: %s reads, engine requests",
			 vname, sz);
		bench_row(c, &(struct bench_row){.figure = fig,
						 .value = req_per_mib,
						 .unit = "req/MiB"});
	}
	return mbs;
}

static int run_bs(struct bench_ctx *c, int fd, int dfd, bool uring,
		  uint64_t bs)
{
	char *buf = aligned_alloc(4096, (bs + 4095) / 4096 * 4096);
	if (!buf)
		return -ENOMEM;
	static struct series s[BENCH_COLD_N][BENCH_LIST_MAX];
	memset(s, 0, sizeof(s));
	int err = 0;
	for (unsigned i = 0; i < rounds && !err; i++) {
		for (enum bench_cold k = 0; k < BENCH_COLD_N && !err; k++) {
			if (!bench_cold_runs(c, k, dfd, uring))
				continue;
			for (unsigned t = 0; t < (is_posix(k) ? pt.n : 1) && !err;
			     t++) {
				bench_posix_workers = pt.v[t];
				bench_progress("seqread %llu/%llu [%s]",
					       (unsigned long long)i + 1,
					       (unsigned long long)rounds,
					       bench_cold_label(c, k));
				if (warm_memory)
					err = one_round(c, k, fd, dfd, bs, buf,
							NULL);
				if (!err)
					err = one_round(c, k, fd, dfd, bs, buf,
							&s[k][t]);
				if (err)
					fprintf(stderr,
						"folio-bench seqread: %s: %s\n",
						bench_cold_label(c, k),
						strerror(-err));
			}
		}
	}
	bench_posix_workers = 0;
	bench_progress_done();
	free(buf);
	if (err)
		return err;
	double base = 0;
	if (s[BENCH_COLD_PREAD][0].n)
		base = report(c, BENCH_COLD_PREAD, bs,
			      &s[BENCH_COLD_PREAD][0], 0, 0);
	for (enum bench_cold k = BENCH_COLD_POSIX; k < BENCH_COLD_N; k++)
		for (unsigned t = 0; t < (is_posix(k) ? pt.n : 1); t++)
			if (s[k][t].n)
				report(c, k, bs, &s[k][t], base, pt.v[t]);
	return 0;
}

static int run(struct bench_ctx *c)
{
	const struct bench_opts *o = &c->o;
	if (!rounds || rounds > MAX_ROUNDS) {
		fprintf(stderr, "folio-bench seqread: --rounds: 1 to %d\n",
			MAX_ROUNDS);
		return 2;
	}
	if (bench_posix_parse("seqread", posix_threads, &pt))
		return 2;
	if (strcmp(memory, "warm") && strcmp(memory, "fresh")) {
		fprintf(stderr, "folio-bench seqread: --memory: warm or fresh\n");
		return 2;
	}
	warm_memory = !strcmp(memory, "warm");
	bench_param_str(c, "memory", memory);
	pt_named = pt.n > 1 || pt.v[0];
	bench_param_str(c, "posix_threads", posix_threads);
	struct bench_list bss = {2, {4 * KIB, 128 * KIB}};
	if (o->given & BOPT_BS) {
		bss.n = 1;
		bss.v[0] = o->bs;
	}
	char s1[32];
	bench_title(c, "cold %s file read front to back (4K and 128K calls "
		       "unless --bs), kernel and library caches dropped "
		       "before each round, median of %llu interleaved rounds",
		    bench_fmt_size(s1, sizeof(s1), o->size),
		    (unsigned long long)rounds);
	bench_param_num(c, "rounds", (double)rounds);
	int fd, dfd = -1;
	bool uring = false;
	int err = bench_read_data(c, "kernel pread variant", &fd);
	if (!err && fd >= 0)
		dfd = bench_direct_fd(c, fd, &uring);
	for (unsigned i = 0; i < bss.n && !err; i++)
		err = run_bs(c, fd, dfd, uring, bss.v[i]);
	bench_note_coldness(c);
	bench_remote_drop(c);
	if (dfd >= 0)
		close(dfd);
	if (fd >= 0)
		close(fd);
	if (err) {
		fprintf(stderr, "folio-bench seqread: %s\n", strerror(-err));
		return 1;
	}
	return 0;
}

static struct bench_cmd cmd = {
	.name = "seqread",
	.summary = "cold sequential reads (4 KiB, 128 KiB): library engines "
		   "vs kernel pread",
	.exec = run,
	.in_default = true,
	.order = 35,
	.help =
	"Fills a --size file in --dir, then reads it front to back in --bs\n"
	"calls (default: a 4K pass and a 128K pass) with each variant:\n"
	"  kernel pread        pread() on a buffered descriptor (baseline)\n"
	"  lib posix buffered  folio_mapping_read(), posix engine, buffered fd\n"
	"  lib posix O_DIRECT  the same on an O_DIRECT descriptor\n"
	"  lib uring O_DIRECT  the io_uring engine on an O_DIRECT descriptor\n"
	"                      (skipped when io_uring is unavailable)\n"
	"--posix-threads default,inline,2 runs the posix variants once per\n"
	"setting of the posix engine's threads, side by side.\n"
	"--engine nbd --uri URI or --engine rados: the library over that store\n"
	"instead (filled once, a new engine and mapping each round), the one\n"
	"variant: no file, so no kernel pread to compare with.\n"
	"Before every round the kernel's pages of the file are dropped (fsync\n"
	"+ FADV_DONTNEED, checked with mincore: a note warns when they stay)\n"
	"and each library round uses a new mapping. With --memory warm (the\n"
	"default) an untimed pass of the same variant runs just before each\n"
	"round, so both sides read into memory their own kind just freed\n"
	"(fresh: no such pass). --rounds rounds run the\n"
	"variants interleaved; the median is reported with its ratio to\n"
	"kernel pread and, for the library, engine read requests per MiB.\n"
	"The default run reads a 64M file: each cold 4K O_DIRECT read costs a\n"
	"device round trip (about 50 us here) until the library reads ahead.",
	.defaults = {.size = 1 * GIB, .folio_size = FOLIO_MAX_SIZE,
		     .block_size = 4 * KIB, .engine = BENCH_ENGINE_POSIX},
	.uses = BOPT_SIZE | BOPT_BS | BOPT_FOLIO_SIZE | BOPT_BLOCK_SIZE |
		BOPT_DIR | BOPT_ENGINE | BOPT_URI,
	.xopts = xopts,
	.quick_size = 64 * MIB,
};
BENCH_REGISTER(cmd)
