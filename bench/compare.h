/* SPDX-License-Identifier: MIT */
/*
 * What the side-by-side comparison programs (nbd-compare, rados-compare)
 * share: the clock, the offsets' generator, medians over rounds and the
 * order in which each round runs its contenders.
 */
#ifndef FOLIO_BENCH_COMPARE_H
#define FOLIO_BENCH_COMPARE_H

#include <stdint.h>

/* Monotonic time in seconds. */
double compare_now(void);

/* xorshift64: the same seed gives every contender the same offsets.
 * *s must not be 0. */
uint64_t compare_rand(uint64_t *s);

/* The median of v[0..n) (n >= 1), v left as it is. */
double compare_median(const double *v, int n);

/* Which of n contenders runs in turn j of round r: each round starts
 * with the next one, so that none always follows the same other (a
 * server's or a cache's state left by one contender would otherwise
 * favour or hurt the next one in every round). */
int compare_turn(int j, int r, int n);

/* Print "PROG: WHAT: strerror(|err|)" and exit(1). */
void compare_die(const char *prog, const char *what, int err)
	__attribute__((noreturn));

#endif
