/* SPDX-License-Identifier: MIT */
/*
 * folio-bench: each workload lives in its own bench_<name>.c and registers
 * itself with BENCH_REGISTER, so adding a workload touches no other file.
 *
 * A workload either sets `exec` (options parsed and results printed by
 * the common code, so it gets --json, the combined default-run table and
 * the shared option set for free) or, the older style, `run`, which gets
 * the raw argv and prints what it likes.
 */
#ifndef FOLIO_BENCH_H
#define FOLIO_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

struct bench_cmd {
	const char *name;
	const char *summary;
	/* Older style: argv[0] is the workload name. Returns a process exit
	 * code: 0 success, 1 failure, 2 bad usage. */
	int (*run)(int argc, char **argv);
	/* Runs as part of the default (no-argument) invocation. */
	bool in_default;
	int order; /* position in listings and in the default run */
	struct bench_cmd *next;

	/* Newer style: c->o holds the parsed options; report through
	 * bench_row()/bench_variant(). Returns 0, 1 after printing why it
	 * failed, or 2 after printing why the options do not fit. */
	int (*exec)(struct bench_ctx *c);
	const char *help;          /* what it measures, for WORKLOAD --help */
	struct bench_opts defaults;
	unsigned uses;             /* BOPT_* that mean something here */
	struct bench_xopt *xopts;  /* own options, ended by a NULL name */
	/* The default run overrides these when non-zero, to stay brief. */
	uint64_t quick_size;
	double quick_runtime;
};

void bench_register(struct bench_cmd *cmd);

#define BENCH_REGISTER(var)                                               \
	__attribute__((constructor)) static void register_##var(void)    \
	{                                                                 \
		bench_register(&var);                                     \
	}

#endif
