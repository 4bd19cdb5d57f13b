/* SPDX-License-Identifier: MIT */
/*
 * folio-fuse: a passthrough FUSE file system whose file data cache is
 * libfolio-state. Shared declarations of its parts:
 *
 *   main.c     options, mount, session loop, unmount
 *   options.c  command line parsing
 *   inode.c    the inode table: (st_dev, st_ino) -> inode, lookup counts
 *   data.c     one mapping per inode over the posix engine: its lifetime
 *   attr.c     getattr, setattr
 *   dirops.c   lookup, forget and the name space operations, readdir
 *   fileops.c  open, create, read, write, flush, fsync, release
 *   space.c    fallocate, lseek SEEK_DATA/SEEK_HOLE
 *   stats.c    the --stats JSON file
 */
#ifndef FOLIO_FUSE_FF_H
#define FOLIO_FUSE_FF_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <folio_state.h>

struct ff_options {
	const char *backing_dir;
	const char *mountpoint;
	char *stats_file;       /* absolute (malloc()ed): -f still chdirs */
	char *fuse_opts;        /* -o, passed on to FUSE (malloc()ed) */
	uint64_t budget;
	size_t folio_size;      /* largest folio */
	size_t min_folio_size;  /* smallest folio; 0: the block size */
	size_t block_size;
	unsigned dirty_expire_ms;
	unsigned flushers;
	unsigned max_threads;   /* FUSE workers; 0: libfuse's default */
	bool folio_tracking;    /* --tracking folio */
	bool kernel_cache;
	bool passthrough;       /* no library: data straight to the file */
	bool foreground;
	bool debug;
};

#define FF_MAX_THREADS 1024

/* Parses argv into @o; on a bad command line prints why and returns -1
 * (exit 2), for --help returns 1 (exit 0), else 0. */
int ff_parse_options(int argc, char **argv, struct ff_options *o);

struct ff_inode {
	/* Immutable after creation. */
	int fd;                 /* O_PATH, names the backing inode */
	dev_t dev;
	ino_t ino;
	mode_t type;            /* S_IFMT bits */

	/* Under the table lock: the kernel's references (lookups not yet
	 * forgotten) and our open handles. The inode goes when both are 0. */
	uint64_t nlookup;
	unsigned nopen;
	bool retiring;          /* a thread is syncing it on its way out */
	struct ff_inode *next;  /* hash chain */

	/* Under @lock: the file's data (see data.c). O_APPEND writes and
	 * truncates hold it too, so that "the current size" stays current
	 * for the length of the write. */
	pthread_mutex_t lock;
	struct folio_mapping *map;
	struct folio_engine *engine;
	int data_fd;            /* read-write descriptor of the backing file */
	/* Bumped by every change of the data; retiring compares it before
	 * and after its sync to know that nothing came in between. */
	atomic_uint_fast64_t gen;
	/* The cursor of syncs made for the inode rather than for a handle
	 * (setattr of times, retiring, unmount); under @lock. */
	folio_errseq_t cursor;
};

/* Everything one mount shares; the session's userdata. */
struct ff_fs {
	struct ff_options opt;
	struct folio_pool *pool;
	struct ff_inode root;
	double timeout;         /* entry and attribute timeout, seconds */
	bool chown_new;         /* running as root: give new files to the caller */
	atomic_int sync_failures; /* mappings that could not be made durable */
	/* Stats of mappings already freed, so that the totals survive
	 * forgets. */
	pthread_mutex_t retired_lock;
	struct folio_mapping_stats retired;
};

/* inode.c */
int ff_table_init(void);
void ff_table_destroy(void);
struct ff_inode *ff_inode_get(struct ff_fs *fs, fuse_ino_t ino);
/* Finds or inserts the inode of @st (taking over @fd or closing it),
 * counts one lookup. Returns NULL with errno ENOMEM. */
struct ff_inode *ff_inode_lookup(struct ff_fs *fs, int fd,
				 const struct stat *st);
void ff_inode_forget(struct ff_fs *fs, struct ff_inode *in, uint64_t n);
void ff_inode_open(struct ff_inode *in);
void ff_inode_close(struct ff_fs *fs, struct ff_inode *in);
/* Calls @fn on every inode; the caller holds the table lock (no I/O in
 * @fn). */
void ff_inode_for_each(struct ff_fs *fs,
		       void (*fn)(struct ff_inode *in, void *arg), void *arg);
/* Unmount, when no request runs any more: syncs and frees every inode,
 * reporting failures on stderr. */
void ff_inode_free_all(struct ff_fs *fs);
void ff_table_lock(void);
void ff_table_unlock(void);

/* data.c. Attach with in->lock held: gives @in its mapping unless it has
 * one, over @fd (taken over; closed when not needed) or, for @fd < 0, a
 * descriptor opened here. Returns 0 or a negative errno. */
int ff_data_attach(struct ff_fs *fs, struct ff_inode *in, int fd);
/* Syncs and frees the mapping; failures go to stderr. */
void ff_data_free(struct ff_fs *fs, struct ff_inode *in);
/* The fields of struct folio_mapping_stats that add up over mappings. */
#define FF_MAPPING_COUNTERS(X) \
	X(bytes_written) X(bytes_read) X(read_requests) X(read_bytes) \
	X(wb_requests) X(wb_bytes) X(wb_merges) X(map_calls) X(retries) \
	X(errors) X(flushes) X(cached_bytes) X(dirty_bytes) X(folios) \
	X(unstable_bytes)
void ff_data_add_stats(struct folio_mapping_stats *sum,
		       const struct folio_mapping_stats *st);

/* attr.c */
int ff_stat(struct ff_inode *in, struct stat *st);
void ff_fix_stat(struct ff_inode *in, struct stat *st);
void ff_proc_path(char *buf, size_t len, int fd);
void ff_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ff_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		int to_set, struct fuse_file_info *fi);

/* dirops.c */
int ff_do_lookup(struct ff_fs *fs, struct ff_inode *parent, const char *name,
		 struct fuse_entry_param *e);
void ff_set_owner(fuse_req_t req, struct ff_inode *parent, const char *name);
void ff_dir_ops(struct fuse_lowlevel_ops *ops);

/* fileops.c */
void ff_file_ops(struct fuse_lowlevel_ops *ops);
/* The inode of an open handle. */
struct ff_inode *ff_file_inode(struct fuse_file_info *fi);

/* space.c */
void ff_space_ops(struct fuse_lowlevel_ops *ops);

/* stats.c */
int ff_stats_write(struct ff_fs *fs, const char *path);

static inline struct ff_fs *ff_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

#define FF_PROC_PATH_MAX 64

#endif
