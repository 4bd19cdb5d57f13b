/* SPDX-License-Identifier: MIT */
/*
 * Thread-exit hooks (tls.h): a pthread key per hook, created once.
 */
#include <errno.h>

#include "base/tls.h"

/* Serializes key creation of every hook: each is created once in the
 * life of the process, so one lock costs nothing and needs no per-hook
 * pthread_once_t (whose init function takes no argument). */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static int create_key(struct tls_exit *h)
{
	pthread_mutex_lock(&create_lock);
	int st = atomic_load_explicit(&h->state, memory_order_relaxed);
	if (st == TLS_EXIT_NEW) {
		st = pthread_key_create(&h->key, h->destructor)
			     ? TLS_EXIT_FAILED
			     : TLS_EXIT_READY;
		/* Release: a thread that sees READY sees the key. */
		atomic_store_explicit(&h->state, st, memory_order_release);
	}
	pthread_mutex_unlock(&create_lock);
	return st;
}

int tls_exit_arm(struct tls_exit *h, void *value)
{
	int st = atomic_load_explicit(&h->state, memory_order_acquire);
	if (st == TLS_EXIT_NEW)
		st = create_key(h);
	if (st != TLS_EXIT_READY)
		return -EAGAIN;
	return pthread_setspecific(h->key, value) ? -ENOMEM : 0;
}
