/* SPDX-License-Identifier: MIT */
/*
 * The per-folio state lock: test-and-test-and-set. Critical sections are a
 * few word operations, so spinning beats sleeping; but a holder preempted
 * on a busy machine must not make waiters burn whole time slices, so after
 * a bounded spin a waiter yields the CPU.
 */
#ifndef FOLIO_SPINLOCK_H
#define FOLIO_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SPIN_BEFORE_YIELD 128

typedef struct {
	atomic_bool held;
} spinlock_t;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

static inline void spin_init(spinlock_t *l)
{
	atomic_init(&l->held, false);
}

static inline void spin_lock(spinlock_t *l)
{
	for (;;) {
		if (!atomic_exchange_explicit(&l->held, true,
					      memory_order_acquire))
			return;
		unsigned spins = 0;
		while (atomic_load_explicit(&l->held, memory_order_relaxed)) {
			if (++spins < SPIN_BEFORE_YIELD) {
				cpu_relax();
			} else {
				sched_yield();
				spins = 0;
			}
		}
	}
}

static inline void spin_unlock(spinlock_t *l)
{
	atomic_store_explicit(&l->held, false, memory_order_release);
}

#endif
