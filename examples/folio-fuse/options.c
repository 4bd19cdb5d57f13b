/* SPDX-License-Identifier: MIT */
/*
 * The command line. Our options are parsed here; -f, -d and -o go to
 * FUSE (see main.c). Every mistake is reported with the option's name
 * before anything is mounted.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ff.h"

static void usage(FILE *out)
{
	fprintf(out,
"usage: folio-fuse [options] BACKING_DIR MOUNTPOINT\n"
"\n"
"Mounts BACKING_DIR at MOUNTPOINT; file data is cached by libfolio-state.\n"
"\n"
"  --budget SIZE        memory for cached file data (default 256M)\n"
"  --folio-size SIZE    largest folio (default 2M)\n"
"  --min-folio-size SIZE  smallest folio (default: the block size; folios\n"
"                       are sized from the writes in between)\n"
"  --block-size SIZE    dirty/uptodate tracking unit (default 4K)\n"
"  --tracking block|folio  dirty state per block (default) or per folio\n"
"  --dirty-expire MS    write back data dirty for longer (default 30000)\n"
"  --flushers N         flusher threads (default 1; 0: writers write back)\n"
"  --threads N          FUSE worker threads at most (default 10); each\n"
"                       fsync in progress holds one\n"
"  --stats FILE         write JSON statistics at unmount and on SIGUSR1\n"
"  --kernel-cache       keep the kernel page cache in front (default:\n"
"                       direct_io, the library is the only cache)\n"
"  --passthrough        no cache: reads, writes and syncs go straight to\n"
"                       the backing file (the bare FUSE baseline of\n"
"                       folio-bench fuse-fio)\n"
"  -f                   stay in the foreground\n"
"  -d                   FUSE debug output (implies -f)\n"
"  -o OPTS              mount options passed to FUSE\n"
"  -h, --help           this text\n"
"\n"
"SIZE takes a K, M or G suffix (powers of 1024).\n");
}

/* Returns 0 and sets *v, or -1 for anything but a number with an
 * optional K/M/G suffix that fits. */
static int parse_size(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end == 'i' && shift && end[1] == 'B')
		end += 2;
	if (*end || n > (UINT64_MAX >> shift))
		return -1;
	*v = (uint64_t)n << shift;
	return 0;
}

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int bad(const char *opt, const char *arg, const char *why)
{
	fprintf(stderr, "folio-fuse: --%s %s: %s\n", opt, arg, why);
	return -1;
}

enum {
	OPT_BUDGET = 256, OPT_FOLIO, OPT_BLOCK, OPT_TRACKING, OPT_EXPIRE,
	OPT_FLUSHERS, OPT_STATS, OPT_KCACHE, OPT_MINFOLIO, OPT_PASSTHROUGH,
	OPT_THREADS,
};

static const struct option longopts[] = {
	{"budget", required_argument, NULL, OPT_BUDGET},
	{"folio-size", required_argument, NULL, OPT_FOLIO},
	{"block-size", required_argument, NULL, OPT_BLOCK},
	{"tracking", required_argument, NULL, OPT_TRACKING},
	{"dirty-expire", required_argument, NULL, OPT_EXPIRE},
	{"flushers", required_argument, NULL, OPT_FLUSHERS},
	{"stats", required_argument, NULL, OPT_STATS},
	{"kernel-cache", no_argument, NULL, OPT_KCACHE},
	{"min-folio-size", required_argument, NULL, OPT_MINFOLIO},
	{"passthrough", no_argument, NULL, OPT_PASSTHROUGH},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* fuse_daemonize() changes to / even in the foreground: a relative
 * name is made absolute before it does. */
static int stats_path(struct ff_options *o, const char *arg)
{
	char cwd[4096];
	free(o->stats_file);
	o->stats_file = NULL;
	if (!*arg)
		return bad("stats", "''", "empty file name");
	if (*arg != '/' && !getcwd(cwd, sizeof(cwd)))
		return bad("stats", arg, strerror(errno));
	if (asprintf(&o->stats_file, "%s%s%s", *arg == '/' ? "" : cwd,
		     *arg == '/' ? "" : "/", arg) < 0) {
		o->stats_file = NULL;
		return bad("stats", arg, strerror(ENOMEM));
	}
	return 0;
}

static int parse_one(int c, const char *arg, struct ff_options *o)
{
	uint64_t v;
	const char *name = "";
	for (const struct option *lo = longopts; lo->name; lo++)
		if (lo->val == c)
			name = lo->name;
	switch (c) {
	case OPT_BUDGET:
	case OPT_FOLIO:
	case OPT_MINFOLIO:
	case OPT_BLOCK:
		if (parse_size(arg, &v))
			return bad(name, arg, "not a size");
		if (c == OPT_BUDGET)
			o->budget = v;
		else if (!pow2(v) || v > FOLIO_MAX_SIZE)
			return bad(name, arg, "not a power of two up to 2M");
		else if (c == OPT_FOLIO)
			o->folio_size = (size_t)v;
		else if (c == OPT_MINFOLIO)
			o->min_folio_size = (size_t)v;
		else
			o->block_size = (size_t)v;
		return 0;
	case OPT_TRACKING:
		if (strcmp(arg, "block") && strcmp(arg, "folio"))
			return bad(name, arg, "want block or folio");
		o->folio_tracking = !strcmp(arg, "folio");
		return 0;
	case OPT_EXPIRE:
	case OPT_FLUSHERS:
		if (parse_size(arg, &v) || v > FOLIO_POOL_MAX_EXPIRE_MS)
			return bad(name, arg, "not a number in range");
		if (c == OPT_EXPIRE)
			o->dirty_expire_ms = (unsigned)v;
		else if (v > FOLIO_POOL_MAX_FLUSHERS)
			return bad(name, arg, "too many flushers");
		else
			o->flushers = (unsigned)v;
		return 0;
	case OPT_THREADS:
		if (parse_size(arg, &v) || v < 1 || v > FF_MAX_THREADS)
			return bad(name, arg, "want 1..1024");
		o->max_threads = (unsigned)v;
		return 0;
	case OPT_STATS:
		return stats_path(o, arg);
	case OPT_KCACHE:
		o->kernel_cache = true;
		return 0;
	case OPT_PASSTHROUGH:
		o->passthrough = true;
		return 0;
	default:
		return -1;
	}
}

/* Ties the sizes together the way the library will check them, so that
 * a bad combination is a usage error rather than a failed first open. */
static int check_geometry(const struct ff_options *o)
{
	if (o->block_size < FOLIO_MIN_BLOCK_SIZE ||
	    o->block_size > FOLIO_MAX_BLOCK_SIZE) {
		fprintf(stderr, "folio-fuse: --block-size must be %u..%u\n",
			FOLIO_MIN_BLOCK_SIZE, FOLIO_MAX_BLOCK_SIZE);
		return -1;
	}
	if (o->folio_size < o->block_size || o->folio_size > FOLIO_MAX_SIZE) {
		fprintf(stderr,
			"folio-fuse: --folio-size must be --block-size..%u\n",
			FOLIO_MAX_SIZE);
		return -1;
	}
	if (o->min_folio_size &&
	    (o->min_folio_size < o->block_size ||
	     o->min_folio_size > o->folio_size)) {
		fprintf(stderr, "folio-fuse: --min-folio-size must be "
				"--block-size..--folio-size\n");
		return -1;
	}
	if (o->budget < o->folio_size) {
		fprintf(stderr,
			"folio-fuse: --budget must hold one folio at least\n");
		return -1;
	}
	return 0;
}

/* -o may be given several times; FUSE takes them as one list. */
static int add_fuse_opts(struct ff_options *o, const char *arg)
{
	char *s;
	if (asprintf(&s, "%s%s%s", o->fuse_opts ? o->fuse_opts : "",
		     o->fuse_opts ? "," : "", arg) < 0)
		return -1;
	free(o->fuse_opts);
	o->fuse_opts = s;
	return 0;
}

int ff_parse_options(int argc, char **argv, struct ff_options *o)
{
	*o = (struct ff_options){
		.budget = UINT64_C(256) << 20,
		.folio_size = FOLIO_MAX_SIZE,
		.block_size = 4096,
		.flushers = 1,
	};
	int c;
	while ((c = getopt_long(argc, argv, "fdho:", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			o->foreground = true;
			break;
		case 'd':
			o->debug = o->foreground = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'o':
			if (add_fuse_opts(o, optarg))
				return -1;
			break;
		case '?':
			usage(stderr);
			return -1;
		default:
			if (parse_one(c, optarg, o))
				return -1;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "folio-fuse: want BACKING_DIR and MOUNTPOINT\n");
		usage(stderr);
		return -1;
	}
	o->backing_dir = argv[optind];
	o->mountpoint = argv[optind + 1];
	return check_geometry(o);
}
