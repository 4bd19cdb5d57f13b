/* SPDX-License-Identifier: MIT */
/*
 * The base layer: compiler helpers, arithmetic and the sized-struct check
 * that every other layer uses. Not installed; the layers and what each
 * may include are listed in doc/design.md.
 */
#ifndef FOLIO_BASE_H
#define FOLIO_BASE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "folio_state.h"

#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/*
 * Thread-local variables on the hot path. The default model for a shared
 * library reaches them through a __tls_get_addr() call (a third of the
 * overhead of a 1 KiB cached write); initial-exec is a plain %fs-relative
 * load. It takes a few bytes of the static TLS space that glibc keeps
 * spare for libraries loaded later with dlopen().
 */
#if defined(__GNUC__) || defined(__clang__)
#define TLS_FAST __attribute__((tls_model("initial-exec")))
#else
#define TLS_FAST
#endif

/*
 * Library-internal globals the hot paths read. The library is compiled
 * with hidden visibility, but a declaration does not say so, and the
 * compiler then loads the variable's address from the GOT first (an
 * instruction per access that the linker only shrinks to a lea). Marked
 * on the declaration, the access is one %rip-relative load.
 */
#if defined(__GNUC__) || defined(__clang__)
#define HIDDEN __attribute__((visibility("hidden")))
#else
#define HIDDEN
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static inline bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static inline unsigned ilog2_u64(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}


/*
 * The sized-struct idiom of every options, ops and stats struct (libbpf's
 * OPTS_VALID): a caller built against an older header passes a smaller sz
 * and gets defaults for the fields it lacks; a newer caller's larger
 * struct is accepted when every byte past what this library knows is
 * zero, and refused with -E2BIG otherwise, so a field the library does
 * not know is never silently ignored. Below `min` (the fields every
 * caller must have) is -EINVAL.
 */
static inline int sized_check(const void *p, size_t sz, size_t min,
			      size_t known)
{
	if (!p || sz < min)
		return -EINVAL;
	for (size_t i = known; i < sz; i++)
		if (((const unsigned char *)p)[i])
			return -E2BIG;
	return 0;
}

/* offsetof + sizeof of a member: the size a struct must have to hold it.
 * A sized struct's minimum (sized_check()'s `min`) is the SIZEOF_THROUGH
 * of its last required field. */
#define SIZEOF_THROUGH(type, member) \
	(offsetof(type, member) + sizeof(((type *)0)->member))

/* Does the caller's sized struct *p (p->sz bytes, checked by
 * sized_check()) reach `member`? An older caller's struct ends before
 * the members added after it was built. */
#define OPTS_HAS(p, member) \
	((p)->sz >= SIZEOF_THROUGH(__typeof__(*(p)), member))

/* `member` of the caller's sized struct *p, or `fallback` when the
 * struct ends before it. */
#define OPTS_GET(p, member, fallback) \
	(OPTS_HAS(p, member) ? (p)->member : (fallback))

#endif
