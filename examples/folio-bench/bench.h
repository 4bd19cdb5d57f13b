/* SPDX-License-Identifier: MIT */
/*
 * folio-bench: each workload lives in its own bench_<name>.c and registers
 * itself with BENCH_REGISTER, so adding a workload touches no other file.
 */
#ifndef FOLIO_BENCH_H
#define FOLIO_BENCH_H

#include <stdbool.h>
#include <stdint.h>

struct bench_cmd {
	const char *name;
	const char *summary;
	/* argv[0] is the workload name. Returns a process exit code:
	 * 0 success, 1 failure, 2 bad usage. */
	int (*run)(int argc, char **argv);
	/* Runs as part of the default (no-argument) invocation. */
	bool in_default;
	int order; /* position in listings and in the default run */
	struct bench_cmd *next;
};

void bench_register(struct bench_cmd *cmd);

#define BENCH_REGISTER(var)                                               \
	__attribute__((constructor)) static void register_##var(void)    \
	{                                                                 \
		bench_register(&var);                                     \
	}

/* Monotonic time in nanoseconds. */
uint64_t bench_now_ns(void);

#endif
