/* SPDX-License-Identifier: MIT */
/*
 * One copy in RAM: what a file read and written through a mapping over the
 * posix engine leaves resident, in the library (RSS) and in the kernel's
 * page cache (mincore() of the file), and what it costs in throughput,
 * for the engine's default (fadvise DONTNEED after its I/O), with
 * FOLIO_POSIX_KEEP_PAGE_CACHE (the old behaviour) and over an O_DIRECT
 * descriptor.
 *
 *   onecopy [--dir D] [--mib N] [--io BYTES] [--rounds R] [--mode M]
 *       N MiB (default 256) written in BYTES calls (default 1 MiB), then
 *       synced; the kernel's cache of the file dropped; the file read
 *       back cold in BYTES calls through a new mapping. Each mode runs in
 *       a fresh child process, modes interleaved round by round (the
 *       machine is noisy); medians of R rounds (default 5). D must be on
 *       a disk file system (default /var/tmp): tmpfs pages cannot drop.
 *       --mode default|keep|odirect runs that one alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "folio_state.h"
#include "statm.h"

#define MIB ((size_t)1 << 20)

enum mode { M_DEFAULT, M_KEEP, M_DIRECT, M_COUNT };
static const char *const mode_name[M_COUNT] = {"default", "keep", "odirect"};

/* What one child reports through its pipe. */
struct result {
	double write_mbs, read_mbs;
	double kernel_after_sync_mib, kernel_after_read_mib;
	double rss_after_read_mib; /* growth over the process before I/O */
	/* CPU time of this process per MiB (user + system, µs): steadier than
	 * throughput on a shared disk, and where the fadvise calls show. */
	double write_cpu_us, read_cpu_us;
};

static double cpu_now(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
	       (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cached_mib(int fd, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = len / page;
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = malloc(n);
	if (m == MAP_FAILED || !vec || mincore(m, len, vec))
		exit(4);
	size_t in = 0;
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	munmap(m, len);
	free(vec);
	return (double)(in * page) / (double)MIB;
}

static void die(const char *what, long err)
{
	fprintf(stderr, "onecopy: %s: %s\n", what, strerror((int)-err));
	exit(2);
}

static struct folio_mapping *mapping_on(struct folio_engine *e, size_t size)
{
	struct folio_mapping_opts o = {
		.sz = sizeof(o), .size = size, .engine = e};
	struct folio_mapping *m;
	int r = folio_mapping_new(&m, &o);
	if (r)
		die("folio_mapping_new", r);
	return m;
}

static struct folio_engine *engine_on(int fd, enum mode md)
{
	struct folio_engine *e;
	unsigned fl = md == M_KEEP ? FOLIO_POSIX_KEEP_PAGE_CACHE : 0;
	int r = folio_engine_posix(&e, fd, fl);
	if (r)
		die("folio_engine_posix", r);
	return e;
}

static void run(const char *path, enum mode md, size_t len, size_t io,
		struct result *res)
{
	int oflags = O_RDWR | O_CREAT | O_TRUNC | (md == M_DIRECT ? O_DIRECT : 0);
	int fd = open(path, oflags, 0600);
	if (fd < 0)
		die(path, -errno);
	char *buf;
	if (posix_memalign((void **)&buf, 4096, io))
		exit(5);
	memset(buf, 0x5a, io);
	long rss0 = statm_rss_pages();

	struct folio_engine *e = engine_on(fd, md);
	struct folio_mapping *m = mapping_on(e, 0);
	double t = now(), c = cpu_now();
	for (size_t off = 0; off < len; off += io) {
		ssize_t r = folio_mapping_write(m, buf, io, off);
		if (r != (ssize_t)io)
			die("write", r < 0 ? r : -EIO);
	}
	int r = folio_mapping_sync(m, NULL);
	if (r)
		die("sync", r);
	res->write_mbs = (double)len / MIB / (now() - t);
	res->write_cpu_us = (cpu_now() - c) * 1e6 / (double)(len / MIB);
	res->kernel_after_sync_mib = cached_mib(fd, len);
	/* Cold for the read: neither cache holds the file. */
	folio_mapping_free(m);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);

	m = mapping_on(e, len);
	t = now();
	c = cpu_now();
	for (size_t off = 0; off < len; off += io) {
		ssize_t n = folio_mapping_read(m, buf, io, off);
		if (n != (ssize_t)io)
			die("read", n < 0 ? n : -EIO);
	}
	res->read_mbs = (double)len / MIB / (now() - t);
	res->read_cpu_us = (cpu_now() - c) * 1e6 / (double)(len / MIB);
	res->rss_after_read_mib = (double)(statm_rss_pages() - rss0) *
				  (double)sysconf(_SC_PAGESIZE) / (double)MIB;
	res->kernel_after_read_mib = cached_mib(fd, len);
	folio_mapping_free(m);
	folio_engine_free(e);
	close(fd);
	unlink(path);
	free(buf);
}

static int run_child(const char *path, enum mode md, size_t len, size_t io,
		     struct result *res)
{
	int p[2];
	if (pipe(p))
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		close(p[0]);
		struct result r;
		run(path, md, len, io, &r);
		ssize_t w = write(p[1], &r, sizeof(r));
		_exit(w == (ssize_t)sizeof(r) ? 0 : 6);
	}
	close(p[1]);
	ssize_t got = read(p[0], res, sizeof(*res));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return got == (ssize_t)sizeof(*res) && WIFEXITED(st) &&
		       !WEXITSTATUS(st)
		       ? 0
		       : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAX_ROUNDS 64

int main(int argc, char **argv)
{
	const char *dir = "/var/tmp";
	size_t mib = 256, io = MIB;
	int rounds = 5;
	int only = -1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--mib"))
			mib = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--io"))
			io = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--mode")) {
			for (int md = 0; md < M_COUNT; md++)
				if (!strcmp(argv[i + 1], mode_name[md]))
					only = md;
		} else {
			break;
		}
	}
	size_t len = mib * MIB;
	if (rounds < 1 || rounds > MAX_ROUNDS || !io || io % 4096 ||
	    len % io) {
		fprintf(stderr, "usage: onecopy [--dir D] [--mib N] "
				"[--io BYTES, a multiple of 4096 dividing N "
				"MiB] [--rounds 1..%d]\n",
			MAX_ROUNDS);
		return 1;
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/onecopy-%ld", dir, (long)getpid());

	static struct result r[M_COUNT][MAX_ROUNDS];
	for (int k = 0; k < rounds; k++)
		for (int j = 0; j < M_COUNT; j++) {
			/* Rotated, so no mode always follows the same one
			 * (the file system still frees the last file). */
			int md = (j + k) % M_COUNT;
			if (only >= 0 && md != only)
				continue;
			if (run_child(path, (enum mode)md, len, io, &r[md][k])) {
				fprintf(stderr, "onecopy: %s failed\n",
					mode_name[md]);
				return 1;
			}
		}

	printf("%zu MiB file in %s, %zu-byte calls, median of %d rounds\n",
	       mib, dir, io, rounds);
	printf("%-8s %10s %10s %10s %10s %11s %11s %12s\n", "mode",
	       "write MB/s", "read MB/s", "write CPU", "read CPU",
	       "kernel MiB", "kernel MiB", "lib RSS MiB");
	printf("%-8s %10s %10s %10s %10s %11s %11s %12s\n", "", "(+sync)",
	       "(cold)", "µs/MiB", "µs/MiB", "after sync", "after read",
	       "after read");
	for (int md = 0; md < M_COUNT; md++) {
		if (only >= 0 && md != only)
			continue;
		double v[7][MAX_ROUNDS];
		for (int k = 0; k < rounds; k++) {
			v[0][k] = r[md][k].write_mbs;
			v[1][k] = r[md][k].read_mbs;
			v[2][k] = r[md][k].kernel_after_sync_mib;
			v[3][k] = r[md][k].kernel_after_read_mib;
			v[4][k] = r[md][k].rss_after_read_mib;
			v[5][k] = r[md][k].write_cpu_us;
			v[6][k] = r[md][k].read_cpu_us;
		}
		printf("%-8s %10.0f %10.0f %10.0f %10.0f %11.1f %11.1f "
		       "%12.1f\n",
		       mode_name[md], median(v[0], rounds),
		       median(v[1], rounds), median(v[5], rounds),
		       median(v[6], rounds), median(v[2], rounds),
		       median(v[3], rounds), median(v[4], rounds));
	}
	return 0;
}
