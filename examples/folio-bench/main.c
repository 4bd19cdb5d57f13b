/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>
#include <time.h>

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

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: folio-bench [WORKLOAD [OPTIONS]]\n"
		     "Without a workload, runs the default set briefly.\n\n"
		     "Workloads:\n");
	for (struct bench_cmd *c = commands; c; c = c->next)
		fprintf(out, "  %-18s %s\n", c->name, c->summary);
	fprintf(out, "\nfolio-bench WORKLOAD --help shows its options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		int rc = 0;
		for (struct bench_cmd *c = commands; c; c = c->next) {
			if (!c->in_default)
				continue;
			char *args[] = {(char *)c->name, NULL};
			int r = c->run(1, args);
			if (r)
				rc = r;
		}
		return rc;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	for (struct bench_cmd *c = commands; c; c = c->next)
		if (!strcmp(c->name, argv[1]))
			return c->run(argc - 1, argv + 1);
	fprintf(stderr, "folio-bench: unknown workload '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
