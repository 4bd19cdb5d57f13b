/* SPDX-License-Identifier: MIT */
/*
 * Thread-exit hooks for thread-local state. _Thread_local data has no
 * destructor, so a module that keeps something per thread (a cached
 * folio reference, freed requests, an allocator cache) gives it back when
 * the thread exits through a pthread key's destructor, which runs only for
 * threads that set the key to a non-NULL value. A struct tls_exit is that
 * key, created on first use: tls_exit_arm() creates it once and sets it
 * for the calling thread.
 *
 * Arming fails when the process is out of keys or memory; a thread that
 * could not arm the hook leaks what it keeps at exit and otherwise works
 * on, so callers treat failure as "keep nothing across calls" or ignore
 * it. Arm once per thread (the callers track that in their thread-local
 * state): each call is a pthread_setspecific().
 */
#ifndef FOLIO_TLS_H
#define FOLIO_TLS_H

#include <pthread.h>
#include <stdatomic.h>

struct tls_exit {
	void (*destructor)(void *value);
	/* TLS_EXIT_* below: whether the key was created. */
	atomic_int state;
	pthread_key_t key;
};

enum { TLS_EXIT_NEW, TLS_EXIT_READY, TLS_EXIT_FAILED };

/* A static struct tls_exit whose destructor is `fn`. */
#define TLS_EXIT_INIT(fn) { (fn), TLS_EXIT_NEW, 0 }

/*
 * Run h's destructor with `value` (not NULL) when the calling thread
 * exits. Creates the key on the first call of any thread. Returns 0, or
 * -EAGAIN when no key could be created (every later call fails the same
 * way) or -ENOMEM when this thread's value could not be set.
 */
int tls_exit_arm(struct tls_exit *h, void *value);

#endif
