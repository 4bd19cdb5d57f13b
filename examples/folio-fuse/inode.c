/* SPDX-License-Identifier: MIT */
/*
 * The inode table. The kernel names inodes by the nodeid we gave in a
 * lookup reply (the address of our struct ff_inode) and gives them back
 * with forget; we find them again by (st_dev, st_ino) of the backing
 * inode, so that hard links and repeated lookups share one inode, and so
 * one mapping, one cache of the file's data.
 *
 * One lock covers the hash table and every lookup and open count:
 * incrementing a count and deciding that an inode has none left must be
 * atomic together, or a lookup could find an inode that a concurrent
 * forget is about to free.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ff.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ff_inode **buckets;
static size_t nbuckets; /* a power of two */
static size_t ninodes;

int ff_table_init(void)
{
	nbuckets = 1024;
	buckets = calloc(nbuckets, sizeof(*buckets));
	return buckets ? 0 : -ENOMEM;
}

void ff_table_destroy(void)
{
	free(buckets);
	buckets = NULL;
	nbuckets = ninodes = 0;
}

void ff_table_lock(void)
{
	pthread_mutex_lock(&table_lock);
}

void ff_table_unlock(void)
{
	pthread_mutex_unlock(&table_lock);
}

static size_t bucket_of(dev_t dev, ino_t ino, size_t n)
{
	uint64_t h = (uint64_t)ino * UINT64_C(0x9e3779b97f4a7c15) ^
		     (uint64_t)dev * UINT64_C(0xc2b2ae3d27d4eb4f);
	return (size_t)(h >> 17) & (n - 1);
}

/* Doubling keeps chains short for trees with many files; a failed
 * allocation only leaves them longer. */
static void maybe_grow(void)
{
	if (ninodes < 2 * nbuckets)
		return;
	size_t n = nbuckets * 2;
	struct ff_inode **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (size_t i = 0; i < nbuckets; i++) {
		struct ff_inode *in = buckets[i], *next;
		for (; in; in = next) {
			next = in->next;
			size_t b = bucket_of(in->dev, in->ino, n);
			in->next = nb[b];
			nb[b] = in;
		}
	}
	free(buckets);
	buckets = nb;
	nbuckets = n;
}

static void unhash(struct ff_inode *in)
{
	struct ff_inode **p = &buckets[bucket_of(in->dev, in->ino, nbuckets)];
	while (*p != in)
		p = &(*p)->next;
	*p = in->next;
	ninodes--;
}

struct ff_inode *ff_inode_get(struct ff_fs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &fs->root;
	return (struct ff_inode *)(uintptr_t)ino;
}

struct ff_inode *ff_inode_lookup(struct ff_fs *fs, int fd,
				 const struct stat *st)
{
	if (st->st_dev == fs->root.dev && st->st_ino == fs->root.ino) {
		close(fd);
		return &fs->root;
	}
	pthread_mutex_lock(&table_lock);
	size_t b = bucket_of(st->st_dev, st->st_ino, nbuckets);
	struct ff_inode *in = buckets[b];
	while (in && (in->dev != st->st_dev || in->ino != st->st_ino))
		in = in->next;
	if (in) {
		in->nlookup++;
		pthread_mutex_unlock(&table_lock);
		close(fd);
		return in;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		pthread_mutex_unlock(&table_lock);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	in->fd = fd;
	in->dev = st->st_dev;
	in->ino = st->st_ino;
	in->type = st->st_mode & S_IFMT;
	in->nlookup = 1;
	in->data_fd = -1;
	pthread_mutex_init(&in->lock, NULL);
	in->next = buckets[b];
	buckets[b] = in;
	ninodes++;
	maybe_grow();
	pthread_mutex_unlock(&table_lock);
	return in;
}

static void inode_free(struct ff_fs *fs, struct ff_inode *in)
{
	ff_data_free(fs, in);
	close(in->fd);
	pthread_mutex_destroy(&in->lock);
	free(in);
}

/* Table lock held: is @in unused, and is the caller the one to retire it? */
static bool claim_unused(struct ff_inode *in)
{
	if (in->nlookup || in->nopen || in->retiring)
		return false;
	in->retiring = true;
	return true;
}

/*
 * The data is synced while the inode is still in the table: a lookup
 * meanwhile finds it and revives it instead of creating a second mapping
 * over the same file that would read what the first has not written yet.
 * Only when no change came in during the sync does it leave the table.
 */
static void retire(struct ff_fs *fs, struct ff_inode *in)
{
	for (;;) {
		uint_fast64_t gen = atomic_load(&in->gen);
		pthread_mutex_lock(&in->lock);
		if (in->map)
			(void)folio_mapping_sync(in->map, &in->cursor);
		pthread_mutex_unlock(&in->lock);

		pthread_mutex_lock(&table_lock);
		if (in->nlookup || in->nopen) {
			in->retiring = false;
			pthread_mutex_unlock(&table_lock);
			return;
		}
		if (gen == atomic_load(&in->gen)) {
			unhash(in);
			pthread_mutex_unlock(&table_lock);
			break;
		}
		pthread_mutex_unlock(&table_lock);
	}
	/* What the sync above could not write is reported here. */
	inode_free(fs, in);
}

void ff_inode_forget(struct ff_fs *fs, struct ff_inode *in, uint64_t n)
{
	if (in == &fs->root)
		return;
	pthread_mutex_lock(&table_lock);
	in->nlookup -= n < in->nlookup ? n : in->nlookup;
	bool go = claim_unused(in);
	pthread_mutex_unlock(&table_lock);
	if (go)
		retire(fs, in);
}

void ff_inode_open(struct ff_inode *in)
{
	pthread_mutex_lock(&table_lock);
	in->nopen++;
	pthread_mutex_unlock(&table_lock);
}

void ff_inode_close(struct ff_fs *fs, struct ff_inode *in)
{
	pthread_mutex_lock(&table_lock);
	in->nopen--;
	bool go = in != &fs->root && claim_unused(in);
	pthread_mutex_unlock(&table_lock);
	if (go)
		retire(fs, in);
}

void ff_inode_for_each(struct ff_fs *fs,
		       void (*fn)(struct ff_inode *in, void *arg), void *arg)
{
	for (size_t i = 0; i < nbuckets; i++)
		for (struct ff_inode *in = buckets[i]; in; in = in->next)
			fn(in, arg);
}

/*
 * Unmount: the kernel sends no forgets for the inodes it still knows, so
 * everything left is synced and freed here. No request runs any more,
 * which is why the table can be emptied without the lookup protocol.
 */
void ff_inode_free_all(struct ff_fs *fs)
{
	pthread_mutex_lock(&table_lock);
	for (size_t i = 0; i < nbuckets; i++) {
		struct ff_inode *in = buckets[i], *next;
		for (; in; in = next) {
			next = in->next;
			inode_free(fs, in);
		}
		buckets[i] = NULL;
	}
	ninodes = 0;
	pthread_mutex_unlock(&table_lock);
}
