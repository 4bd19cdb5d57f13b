/* SPDX-License-Identifier: MIT */
/*
 * folio-bench: a fio-like driver for the library's workloads. Without a
 * workload it runs every workload marked in_default briefly and prints one
 * combined table. It is also the one entry point to the project's other
 * benchmarks (external.c).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bench.h"

static struct bench_cmd *commands;

void bench_register(struct bench_cmd *cmd)
{
	struct bench_cmd **p = &commands;
	while (*p && (*p)->order <= cmd->order)
		p = &(*p)->next;
	cmd->next = *p;
	*p = cmd;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: folio-bench [WORKLOAD | --workload WORKLOAD] [OPTIONS]\n"
		"Benchmarks of libfolio-state: large folios with per-block "
		"dirty state.\n"
		"Without a workload, runs the default set briefly and prints "
		"one combined\ntable (common options below apply to each "
		"workload of the set).\n\nWorkloads:\n");
	for (struct bench_cmd *c = commands; c; c = c->next)
		fprintf(out, "  %-18s %s%s\n", c->name, c->summary,
			c->in_default ? "" : " (not in the default run)");
	fprintf(out, "\nmicro, callgrind and fuse-fio run the white-box "
		     "benchmarks and scripts built\nbeside folio-bench in "
		     "the build tree: 'folio-bench micro --help' lists "
		     "them.\n");
	fprintf(out, "\nCommon options (defaults differ per workload; "
		     "'folio-bench WORKLOAD --help'\nshows them and the "
		     "workload's own options):\n");
	bench_print_options(out, NULL);
	fprintf(out, "\nExit status: 0 success, 1 a workload failed, 2 bad "
		     "usage.\n");
}

static void workload_help(FILE *out, const struct bench_cmd *c)
{
	fprintf(out, "usage: folio-bench %s [OPTIONS]\n%s.\n", c->name,
		c->summary);
	if (c->help)
		fprintf(out, "\n%s\n", c->help);
	fprintf(out, "\nOptions [default]:\n");
	bench_print_options(out, c);
}

static struct bench_cmd *find_cmd(const char *name)
{
	for (struct bench_cmd *c = commands; c; c = c->next)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

/* An older-style workload prints its own output; in JSON mode it goes to
 * stderr so stdout stays one JSON object. */
static int run_legacy(struct bench_ctx *c, bool json)
{
	char *args[] = {(char *)c->cmd->name, NULL};
	int saved = -1;
	fflush(stdout);
	if (json) {
		saved = dup(STDOUT_FILENO);
		dup2(STDERR_FILENO, STDOUT_FILENO);
	}
	c->exit_code = c->cmd->run(1, args);
	fflush(stdout);
	if (saved >= 0) {
		dup2(saved, STDOUT_FILENO);
		close(saved);
	}
	return c->exit_code ? 1 : 0;
}

static int default_run(int argc, char **argv)
{
	unsigned n = 0;
	for (struct bench_cmd *c = commands; c; c = c->next)
		n += c->in_default;
	struct bench_ctx **cs = calloc(n ? n : 1, sizeof(*cs));
	if (!cs)
		return 1;
	int rc = 0;
	unsigned k = 0;
	bool json = false;
	/* Parse everything before running anything: a typo must not cost a
	 * minute of benchmarks first. */
	for (struct bench_cmd *c = commands; c && !rc; c = c->next) {
		if (!c->in_default)
			continue;
		struct bench_ctx *ctx = calloc(1, sizeof(*ctx));
		if (!ctx) {
			rc = 1;
			break;
		}
		cs[k++] = ctx;
		ctx->cmd = c;
		ctx->quick = true;
		ctx->legacy = !c->exec;
		int r = bench_parse_args(ctx, argc, argv, true);
		if (r < 0) {
			usage(stdout);
			rc = -1;
		} else if (r) {
			rc = r;
		}
		json = ctx->o.json;
	}
	if (rc) {
		for (unsigned i = 0; i < k; i++)
			free(cs[i]);
		free(cs);
		return rc < 0 ? 0 : rc;
	}
	for (unsigned i = 0; i < k; i++) {
		struct bench_ctx *ctx = cs[i];
		int r;
		if (ctx->legacy) {
			r = run_legacy(ctx, json);
		} else {
			bench_params_common(ctx);
			r = ctx->cmd->exec(ctx);
		}
		if (r) {
			fprintf(stderr, "folio-bench: %s failed\n",
				ctx->cmd->name);
			rc = 1;
		}
	}
	if (json)
		bench_print_json(stdout, cs, k, true);
	else
		bench_print_combined(stdout, cs, k);
	for (unsigned i = 0; i < k; i++)
		free(cs[i]);
	free(cs);
	return rc;
}

static int one_workload(struct bench_cmd *c, int argc, char **argv)
{
	if (!c->exec)
		return c->run(argc, argv);
	struct bench_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return 1;
	ctx->cmd = c;
	int rc = bench_parse_args(ctx, argc, argv, false);
	if (rc < 0) {
		workload_help(stdout, c);
		rc = 0;
	} else if (!rc) {
		bench_params_common(ctx);
		rc = c->exec(ctx);
		if (rc != 0 && rc != 2)
			rc = 1;
		if (!rc && ctx->o.json)
			bench_print_json(stdout, &ctx, 1, false);
		else if (!rc)
			bench_print_table(stdout, ctx);
	}
	free(ctx);
	return rc;
}

int main(int argc, char **argv)
{
	/* The device model sleeps until exact completion times; the default
	 * 50 us timer slack would add that much to every request. Threads
	 * inherit the setting. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	/* fio-style `--workload NAME` (anywhere) means the same as a
	 * leading NAME: move it to the front. */
	const char *named = NULL;
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (!strcmp(argv[i], "--workload")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "folio-bench: --workload needs "
						"a name\n");
				return 2;
			}
			v = argv[i + 1];
			memmove(&argv[i], &argv[i + 2],
				(size_t)(argc - i - 2) * sizeof(*argv));
			argc -= 2;
		} else if (!strncmp(argv[i], "--workload=", 11)) {
			v = argv[i] + 11;
			memmove(&argv[i], &argv[i + 1],
				(size_t)(argc - i - 1) * sizeof(*argv));
			argc -= 1;
		}
		if (v) {
			named = v;
			break;
		}
	}
	if (named) {
		argv[0] = (char *)named;
		struct bench_cmd *c = find_cmd(named);
		if (!c) {
			fprintf(stderr, "folio-bench: unknown workload '%s'\n"
					"Try 'folio-bench --help'.\n",
				named);
			return 2;
		}
		return one_workload(c, argc, argv);
	}
	if (argc < 2 || argv[1][0] == '-')
		return default_run(argc, argv);
	struct bench_cmd *c = find_cmd(argv[1]);
	if (!c) {
		fprintf(stderr, "folio-bench: unknown workload '%s'\n"
				"Try 'folio-bench --help'.\n",
			argv[1]);
		return 2;
	}
	return one_workload(c, argc - 1, argv + 1);
}
