/* SPDX-License-Identifier: MIT */
/*
 * folio-fuse [options] BACKING_DIR MOUNTPOINT: mount, run the
 * multi-threaded session loop, and at unmount make every cached change
 * durable. Exit status: 0; 1 when something failed at run time (the mount,
 * a sync at unmount, the stats file); 2 for a bad command line (FUSE's -o
 * options included), backing directory or mount point.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ff.h"

static void ff_init(void *userdata, struct fuse_conn_info *conn)
{
	/* The kernel's writeback cache would put a second dirty cache in
	 * front of ours and hide write errors from flush. */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

/* Unmount: the kernel forgets nothing it still knows, so every inode is
 * synced and freed here; failures were printed and counted. */
static void ff_destroy(void *userdata)
{
	ff_inode_free_all(userdata);
}

/* SIGUSR1 is blocked in every thread, so only this one takes it, outside
 * any signal handler (writing the file takes locks and allocates). */
struct stats_thread {
	struct ff_fs *fs;
	pthread_t thread;
	atomic_bool stop;
};

static void *stats_main(void *arg)
{
	struct stats_thread *t = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	for (;;) {
		int sig;
		if (sigwait(&set, &sig) || atomic_load(&t->stop))
			break;
		(void)ff_stats_write(t->fs, t->fs->opt.stats_file);
	}
	return NULL;
}

static int make_pool(struct ff_fs *fs)
{
	struct folio_pool_opts po = {
		.sz = sizeof(po),
		.budget = fs->opt.budget,
		.dirty_expire_ms = fs->opt.dirty_expire_ms,
		.flusher_threads = fs->opt.flushers,
	};
	int err = folio_pool_new(&fs->pool, &po);
	if (err)
		fprintf(stderr, "folio-fuse: cannot create the pool: %s\n",
			strerror(-err));
	return err;
}

static int open_root(struct ff_fs *fs)
{
	const char *dir = fs->opt.backing_dir;
	struct stat st;
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "folio-fuse: %s: %s\n", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fs->root = (struct ff_inode){
		.fd = fd,
		.dev = st.st_dev,
		.ino = st.st_ino,
		.type = S_IFDIR,
		.nlookup = 2,
		.data_fd = -1,
	};
	pthread_mutex_init(&fs->root.lock, NULL);
	return 0;
}

/* Caught here, a missing mount point is a usage error like a missing
 * backing directory, not a failed mount. */
static int check_mountpoint(const char *dir)
{
	struct stat st;
	const char *why = stat(dir, &st) ? strerror(errno)
		: !S_ISDIR(st.st_mode) ? "not a directory" : NULL;
	if (why)
		fprintf(stderr, "folio-fuse: %s: %s\n", dir, why);
	return why ? -1 : 0;
}

/* FUSE's own arguments: ours were taken out by ff_parse_options(). */
static int fuse_argv(const struct ff_options *o, const char *argv0,
		     struct fuse_args *args)
{
	int err = fuse_opt_add_arg(args, argv0);
	if (!err && o->debug)
		err = fuse_opt_add_arg(args, "-d");
	/* The kernel checks permissions against the modes we report; we
	 * open everything read-write ourselves, whoever asks. */
	if (!err)
		err = fuse_opt_add_arg(args,
				       "-odefault_permissions,fsname=folio-fuse,"
				       "subtype=folio-fuse");
	if (!err && o->fuse_opts) {
		err = fuse_opt_add_arg(args, "-o");
		if (!err)
			err = fuse_opt_add_arg(args, o->fuse_opts);
	}
	return err ? -ENOMEM : 0;
}

/* Mounted: serve until unmounted. Returns the loop's result. */
static int serve(struct fuse_session *se, struct ff_fs *fs)
{
	if (fuse_daemonize(fs->opt.foreground))
		return -1;
	/* After daemonizing, which forks: threads do not survive a fork.
	 * Before any thread, so that every one inherits the mask. */
	struct stats_thread st = {.fs = fs};
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (make_pool(fs))
		return -1;
	bool stats = fs->opt.stats_file &&
		     !pthread_create(&st.thread, NULL, stats_main, &st);

	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (cfg && fs->opt.max_threads)
		fuse_loop_cfg_set_max_threads(cfg, fs->opt.max_threads);
	int ret = cfg ? fuse_session_loop_mt(se, cfg) : -1;
	fuse_loop_cfg_destroy(cfg);

	if (stats) {
		atomic_store(&st.stop, true);
		pthread_kill(st.thread, SIGUSR1);
		pthread_join(st.thread, NULL);
	}
	return ret;
}

int main(int argc, char **argv)
{
	static struct ff_fs fs;
	int r = ff_parse_options(argc, argv, &fs.opt);
	if (r)
		return r > 0 ? 0 : 2;
	if (check_mountpoint(fs.opt.mountpoint) || open_root(&fs))
		return 2;
	fs.timeout = 1.0;
	fs.chown_new = geteuid() == 0;
	pthread_mutex_init(&fs.retired_lock, NULL);
	fs.retired.sz = sizeof(fs.retired);
	/* The kernel applied the caller's umask to every mode it sends. */
	umask(0);
	if (!fs.opt.stats_file)
		signal(SIGUSR1, SIG_IGN);

	struct fuse_lowlevel_ops ops = {.init = ff_init, .destroy = ff_destroy};
	ff_dir_ops(&ops);
	ff_file_ops(&ops);
	ff_space_ops(&ops);

	int status = 1;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	if (ff_table_init() || fuse_argv(&fs.opt, argv[0], &args))
		goto out;
	se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
	if (!se) {
		status = 2; /* libfuse said which -o it did not take */
		goto out;
	}
	if (fuse_set_signal_handlers(se))
		goto out;
	if (fuse_session_mount(se, fs.opt.mountpoint) == 0) {
		/* A positive result is the signal that ended the loop
		 * (SIGINT, SIGTERM): an unmount like any other. */
		int ret = serve(se, &fs);
		fuse_session_unmount(se);
		status = ret < 0 ? 1 : 0;
	}
	fuse_remove_signal_handlers(se);
out:
	if (se)
		fuse_session_destroy(se); /* calls ff_destroy() once mounted */
	ff_inode_free_all(&fs);
	if (atomic_load(&fs.sync_failures))
		status = 1;
	if (fs.opt.stats_file && fs.pool &&
	    ff_stats_write(&fs, fs.opt.stats_file))
		status = 1;
	if (fs.pool && folio_pool_free(fs.pool))
		status = 1;
	ff_table_destroy();
	fuse_opt_free_args(&args);
	close(fs.root.fd);
	free(fs.opt.fuse_opts);
	free(fs.opt.stats_file);
	return status;
}
