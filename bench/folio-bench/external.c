/* SPDX-License-Identifier: MIT */
/*
 * folio-bench as the one entry point to every benchmark: the white-box
 * micro-benchmarks (linked with the internal archive, so they cannot be
 * workloads of this public-API program) and the callgrind and FUSE
 * scripts are separate programs, built or copied beside folio-bench in
 * the build tree (bench/ of the build directory). These commands find
 * them there and exec them with the caller's arguments.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* What an external program wants in front of the caller's arguments. */
enum ext_arg {
	EXT_ARG_NONE,
	EXT_ARG_SELF,     /* the folio-bench binary (FOLIO_BENCH) */
	EXT_ARG_BUILDDIR, /* the build directory holding bench/ (BUILDDIR) */
};

struct ext_prog {
	const char *group; /* the folio-bench command */
	const char *name;  /* its sub-command; NULL: the command itself */
	const char *path;  /* relative to folio-bench's directory */
	enum ext_arg arg;
	const char *what;
};

static const struct ext_prog progs[] = {
	{"micro", "index", "index-bench", EXT_ARG_NONE,
	 "radix index insert/lookup/remove ns and node memory [ENTRIES]"},
	{"micro", "alloc", "alloc-rss", EXT_ARG_NONE,
	 "folio allocator against malloc + posix_memalign: RSS and speed"},
	{"micro", "onecopy", "onecopy", EXT_ARG_NONE,
	 "library RSS and kernel page cache of one file over posix"},
	{"micro", "epoch", "epoch-bench", EXT_ARG_NONE,
	 "lock-free lookup read side against a rwlock (and urcu-bp)"},
	{"micro", "hit-scale", "hit-scale", EXT_ARG_NONE,
	 "cached 4 KiB read hits, 1 and 2 threads, against memcpy [ITERS] "
	 "[HOT] [FOLIO] [ROUNDS]"},
	{"callgrind", "fstime", "callgrind/fstime.sh", EXT_ARG_SELF,
	 "instructions per 1 KiB buffered write [ITERS] [-- OPTIONS]"},
	{"callgrind", "read", "callgrind/read.sh", EXT_ARG_SELF,
	 "instructions per hot 4 KiB read [ITERS] [-- OPTIONS]"},
	{"callgrind", "writeback", "callgrind/writeback.sh", EXT_ARG_SELF,
	 "instructions per dirty folio written back [DIRTY] [-- OPTIONS]"},
	{"callgrind", "sync", "callgrind/sync.sh", EXT_ARG_SELF,
	 "instructions per dirty folio of a whole sync [DIRTY] [-- OPTIONS]"},
	{"callgrind", "state", "callgrind/state.sh", EXT_ARG_BUILDDIR,
	 "instructions per per-block state operation [OPS]"},
	{"callgrind", "alloc", "callgrind/alloc.sh", EXT_ARG_BUILDDIR,
	 "instructions per folio allocation + free [OPS]"},
	{"fuse-fio", NULL, "fuse/fuse-fio.sh", EXT_ARG_NONE,
	 "fio on ext4 and through folio-fuse (root, fio, /dev/fuse)"},
};

#define NPROGS (sizeof(progs) / sizeof(progs[0]))

static void group_help(FILE *out, const char *group)
{
	fprintf(out, "usage: folio-bench %s NAME [ARGUMENTS]\n"
		     "Runs a program built beside folio-bench in the build "
		     "tree with ARGUMENTS\n('folio-bench %s NAME --help' "
		     "shows its own usage where it has one).\n\n",
		group, group);
	for (size_t i = 0; i < NPROGS; i++)
		if (!strcmp(progs[i].group, group) && progs[i].name)
			fprintf(out, "  %-10s %s\n", progs[i].name,
				progs[i].what);
}

/* The directory holding this binary; false when it cannot be read. */
static bool self_dir(char *buf, size_t len, char *self, size_t self_len)
{
	ssize_t n = readlink("/proc/self/exe", self, self_len - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	if ((size_t)n >= len)
		return false;
	memcpy(buf, self, (size_t)n + 1);
	char *slash = strrchr(buf, '/');
	if (!slash)
		return false;
	*slash = '\0';
	return true;
}

static int exec_prog(const struct ext_prog *p, int argc, char **argv)
{
	char dir[PATH_MAX], self[PATH_MAX], path[PATH_MAX], build[PATH_MAX];
	if (!self_dir(dir, sizeof(dir), self, sizeof(self))) {
		fprintf(stderr, "folio-bench: cannot find its own directory\n");
		return 1;
	}
	int n = snprintf(path, sizeof(path), "%s/%s", dir, p->path);
	if (n < 0 || (size_t)n >= sizeof(path))
		return 1;
	if (access(path, X_OK)) {
		fprintf(stderr, "folio-bench: %s not found beside folio-bench "
				"(%s): run the folio-bench of a build tree\n",
			p->path, dir);
		return 1;
	}
	/* dir is <build>/bench: the build directory is its parent. */
	memcpy(build, dir, sizeof(build));
	char *slash = strrchr(build, '/');
	if (slash)
		*slash = '\0';

	char **args = calloc((size_t)argc + 3, sizeof(*args));
	if (!args)
		return 1;
	int k = 0;
	args[k++] = path;
	if (p->arg == EXT_ARG_SELF)
		args[k++] = self;
	else if (p->arg == EXT_ARG_BUILDDIR)
		args[k++] = build;
	for (int i = 0; i < argc; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	fflush(stdout);
	execv(path, args);
	fprintf(stderr, "folio-bench: cannot run %s: %s\n", path,
		strerror(errno));
	free(args);
	return 1;
}

/* argv[0] is the group; argv[1] the program's name unless the group is
 * one program. */
static int run_group(const char *group, int argc, char **argv)
{
	for (size_t i = 0; i < NPROGS; i++)
		if (!strcmp(progs[i].group, group) && !progs[i].name)
			return exec_prog(&progs[i], argc - 1, argv + 1);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		group_help(argc < 2 ? stderr : stdout, group);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < NPROGS; i++)
		if (!strcmp(progs[i].group, group) && progs[i].name &&
		    !strcmp(progs[i].name, argv[1]))
			return exec_prog(&progs[i], argc - 2, argv + 2);
	fprintf(stderr, "folio-bench %s: unknown name '%s'\n"
			"Try 'folio-bench %s --help'.\n",
		group, argv[1], group);
	return 2;
}

/* argv[0] is the command's own name, which is its group's. */
static int run_cmd(int argc, char **argv)
{
	return run_group(argv[0], argc, argv);
}

/* The folio-bench commands: one per group of progs[]. */
static struct bench_cmd cmds[] = {
	{.name = "micro",
	 .summary = "white-box micro-benchmarks: index, alloc, onecopy, "
		    "epoch",
	 .run = run_cmd, .order = 900},
	{.name = "callgrind",
	 .summary = "instruction counts under valgrind: fstime, read, "
		    "writeback, state, alloc",
	 .run = run_cmd, .order = 901},
	{.name = "fuse-fio",
	 .summary = "fio on ext4 and through folio-fuse (root, fio)",
	 .run = run_cmd, .order = 902},
};

__attribute__((constructor)) static void register_cmds(void)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		bench_register(&cmds[i]);
}
