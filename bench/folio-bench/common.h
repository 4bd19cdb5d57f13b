/* SPDX-License-Identifier: MIT */
/*
 * folio-bench helpers shared by every workload: options, size suffixes,
 * timing, latency percentiles, temporary files, engines by name (with the
 * device model), worker threads, and the result table / JSON output.
 * Workloads report results through a struct bench_ctx and never print
 * their own tables, so the text and JSON outputs always agree.
 */
#ifndef FOLIO_BENCH_COMMON_H
#define FOLIO_BENCH_COMMON_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "folio_state.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* BENCH_NOINLINE keeps a measured loop a function of its own, under its
 * own name, for callgrind --toggle-collect: gcc's noipa also stops clones
 * (foo.isra.0) and identical-code folding; clang has no noipa. */
#if defined(__GNUC__) && !defined(__clang__)
#define BENCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define BENCH_NOINLINE __attribute__((noipa))
#elif defined(__clang__)
#define BENCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define BENCH_NOINLINE __attribute__((noinline))
#else
#define BENCH_PRINTF(a, b)
#define BENCH_NOINLINE
#endif

struct bench_ctx;
struct bench_cmd;

/* ---- options ------------------------------------------------------------ */

enum bench_engine_kind {
	BENCH_ENGINE_POSIX,
	BENCH_ENGINE_URING,
	BENCH_ENGINE_MEM,
	BENCH_ENGINE_RADOS, /* bench_rados.c */
	BENCH_ENGINE_NBD,   /* bench_remote.c: --uri */
};

/* Whether the engine keeps its data away from the workload's file (no
 * file to pwrite or pread: the kernel variants have nothing to run on). */
static inline bool bench_engine_remote(enum bench_engine_kind k)
{
	return k == BENCH_ENGINE_RADOS || k == BENCH_ENGINE_NBD;
}

enum bench_tracking {
	BENCH_TRACK_BLOCK, /* per-block dirty state (the library's point) */
	BENCH_TRACK_FOLIO, /* FOLIO_MAPPING_FOLIO_DIRTY */
};

/* --device-model */
struct bench_devmodel_params {
	bool on;
	uint64_t bw;     /* bytes per second; 0: unlimited */
	uint64_t lat_ns; /* per request */
};

/* Bits of bench_opts.given and bench_cmd.uses: one per common option. */
enum {
	BOPT_SIZE = 1u << 0,
	BOPT_BS = 1u << 1,
	BOPT_JOBS = 1u << 2,
	BOPT_RUNTIME = 1u << 3,
	BOPT_FOLIO_SIZE = 1u << 4,
	BOPT_BLOCK_SIZE = 1u << 5,
	BOPT_ENGINE = 1u << 6,
	BOPT_TRACKING = 1u << 7,
	BOPT_DIR = 1u << 8,
	BOPT_DEVMODEL = 1u << 9,
	BOPT_URI = 1u << 10,
};

struct bench_opts {
	uint64_t size;
	uint64_t bs;
	unsigned jobs;
	double runtime; /* seconds */
	uint64_t folio_size;
	uint64_t block_size;
	enum bench_engine_kind engine;
	enum bench_tracking tracking;
	const char *dir;
	struct bench_devmodel_params dm;
	const char *uri; /* --engine nbd */
	bool json;
	unsigned given; /* BOPT_* set on the command line */
};

/* Workload-specific options: parsed into the variable `var` points to,
 * whose initial value is the default shown by --help. */
enum bench_xopt_type {
	BENCH_X_FLAG,   /* bool */
	BENCH_X_UINT,   /* uint64_t, plain number */
	BENCH_X_SIZE,   /* uint64_t, K/M/G suffixes */
	BENCH_X_STR,    /* const char *, one of `choices` when set */
	BENCH_X_SIZES,  /* struct bench_list, K/M/G suffixes */
	BENCH_X_COUNTS, /* struct bench_list, plain numbers */
};

#define BENCH_LIST_MAX 16
struct bench_list {
	unsigned n;
	uint64_t v[BENCH_LIST_MAX];
};

struct bench_xopt {
	const char *name; /* without the leading "--" */
	enum bench_xopt_type type;
	void *var;
	const char *metavar;
	const char *help;
	const char *const *choices; /* BENCH_X_STR: NULL-terminated */
	bool given;
};

/* Parse "123", "4K", "64M", "2G" (powers of 1024; "KiB"/"k" work too).
 * Returns 0 or -EINVAL. */
int bench_parse_size(const char *s, uint64_t *out);

const char *bench_engine_name(enum bench_engine_kind k);
/* "4K", "64K", "2M", "1.5G", or plain bytes. */
const char *bench_fmt_size(char *buf, size_t len, uint64_t v);

/* ---- time --------------------------------------------------------------- */

/* Monotonic time in nanoseconds. */
uint64_t bench_now_ns(void);
/* The process's resident bytes now (/proc/self/statm), 0 when
 * unreadable. */
double bench_rss_bytes(void);
/* Anonymous resident bytes only (RssAnon in /proc/self/status): what the
 * process allocated, without the code and file pages it happened to
 * touch meanwhile; 0 when unreadable. */
double bench_rss_anon_bytes(void);
/* Sleep until bench_now_ns() >= t. */
void bench_sleep_until(uint64_t t);

/*
 * Call fn(arg, n) with n up to `batch`, reading the clock between calls,
 * until `seconds` have passed (0: no deadline) or `cap` units are done
 * (0: no cap), whichever comes first: a cap without a deadline gives the
 * fixed count callgrind wants. The progress line shows `what`. Sets
 * *done and *secs; returns 0 or the first non-zero result of fn.
 */
int bench_timed_batches(const char *what, double seconds, uint64_t cap,
			uint64_t batch, int (*fn)(void *arg, uint64_t n),
			void *arg, uint64_t *done, double *secs);

/* ---- latencies ---------------------------------------------------------- */

struct bench_lat {
	uint64_t *v;
	size_t n, cap;
	bool oom; /* a push failed: percentiles are over a prefix */
};

void bench_lat_push(struct bench_lat *l, uint64_t ns);
/* Move every sample of `from` into `to`. */
void bench_lat_merge(struct bench_lat *to, struct bench_lat *from);
/* Sorts in place; p in [0, 100]. 0 when empty. */
double bench_lat_pct(struct bench_lat *l, double p);
void bench_lat_free(struct bench_lat *l);

/* Small fast PRNG (xorshift64*); the same seed gives the same offsets in
 * every variant of a workload. */
static inline uint64_t bench_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

double bench_median(double *v, size_t n); /* sorts v */

/* ---- files and engines -------------------------------------------------- */

/* A temporary file in `dir`, already unlinked so no run (even a killed
 * one) leaves it behind. Returns an fd or -1 after printing why. */
int bench_tmpfile(const char *dir);

/* Fill fd with `size` bytes of pseudo-random data and fdatasync it, so
 * the blocks are allocated and later writes are overwrites. 0 / -errno. */
int bench_prefill(int fd, uint64_t size);

/* posix_threads.c: the workers the posix engines get (--posix-threads). */
int bench_posix_open(struct folio_engine **out, int fd);

struct devmodel;

struct bench_engine {
	struct folio_engine *engine;
	struct folio_engine *mem; /* the store under a modelled mem engine */
	struct devmodel *dm;      /* NULL without --device-model */
	bool keep_store; /* a RADOS object bench_remote_fill() made: the
			  * workload removes it, not the close */
};

/*
 * Create the engine `kind` over `fd` (posix, uring), in memory (mem,
 * `capacity` bytes), over the export c->o.uri (nbd) or over a RADOS
 * object (c->store when a read workload filled one, else a fresh one
 * removed on close); fd is ignored but for posix and uring. Wrapped by
 * the device model when c->o.dm.on (which then marks c as modelled).
 * Prints why on failure. Returns 0 / -errno.
 */
int bench_engine_open(struct bench_ctx *c, struct bench_engine *be,
		      enum bench_engine_kind kind, int fd, uint64_t capacity);
void bench_engine_close(struct bench_engine *be);
/* --engine rados (bench_rados.c): an engine over the striped object
 * `prefix`, or a fresh one when NULL (its name then goes to name_out when
 * given, name_len bytes); removing what a RADOS engine stored (nothing
 * for other engines). */
int bench_rados_engine(struct folio_engine **out, const char *prefix,
		       char *name_out, size_t name_len);
/* An engine that completes each request inside submit() and moves no
 * bytes to any store: reads see zeros, writes vanish, flushes succeed. What
 * a workload over it costs is the library's own work. 0 / -errno. */
int bench_inline_engine(struct folio_engine **out);
void bench_rados_engine_remove(struct folio_engine *e);

/* ---- remote stores (bench_remote.c) ------------------------------------ */

/* --engine nbd: an engine over the export c->o.uri, refused (-EFBIG,
 * printed) when the export is smaller than `capacity`. */
int bench_nbd_engine(struct bench_ctx *c, struct folio_engine **out,
		     uint64_t capacity);

/*
 * For the read workloads on a remote engine: write [0, size) of the store
 * once through the library (a RADOS object made for the purpose, named in
 * c->store, or the NBD export), so that each later bench_engine_open()
 * reads data that is there. 0 / -errno (printed).
 */
int bench_remote_fill(struct bench_ctx *c, uint64_t size);
/* Remove what bench_remote_fill() made (the RADOS object). */
void bench_remote_drop(struct bench_ctx *c);

/*
 * What a read workload reads: with a remote engine its store, filled once
 * by bench_remote_fill() (*fd = -1; a note says that `skipped`, the
 * variants that need a file, are skipped); otherwise a temporary file of
 * --size in --dir, prefilled (*fd; a note says that a local --engine
 * changes nothing). 0 / -errno.
 */
int bench_read_data(struct bench_ctx *c, const char *skipped, int *fd);

/* ---- files for read workloads ------------------------------------------ */

/* Another open file description of fd's file (through /proc/self/fd)
 * with `flags` (e.g. O_RDWR | O_DIRECT), so O_DIRECT applies to one user
 * of the file only. Returns an fd or -errno. */
int bench_reopen(int fd, int flags);

/* Share of the pages of [0, size) of fd in the kernel page cache (mincore
 * on a read-only shared mmap, which faults nothing in), or -errno. */
double bench_resident_fraction(int fd, uint64_t size);

/*
 * Make the kernel's copy of fd cold: fsync (dirty pages cannot be
 * dropped), posix_fadvise(POSIX_FADV_DONTNEED), then check with mincore.
 * Returns the resident fraction left, or -errno; above 1% it adds a note
 * to c (once) saying that the figures are not cold.
 */
double bench_drop_kernel_cache(struct bench_ctx *c, int fd, uint64_t size);

/* A note with the most of a file that bench_drop_kernel_cache() found
 * still cached, so that every cold table says how cold it was; also the
 * parameter max_resident_before_cold. Nothing when it was never called. */
void bench_note_coldness(struct bench_ctx *c);

/* Read the whole file through `fd` once, so the kernel caches it; returns
 * the resident fraction afterwards (mincore), or -errno. */
double bench_warm_kernel_cache(int fd, uint64_t size);

/*
 * The O_DIRECT descriptor the cold read variants use: a read-only
 * O_DIRECT reopen of fd, or -1 (with a note) where the filesystem refuses
 * O_DIRECT. *uring tells whether folio_engine_uring() works on it here
 * (built with liburing and allowed by the kernel); when not, it says so
 * on stderr and in a note, and the uring variant is to be skipped.
 */
int bench_direct_fd(struct bench_ctx *c, int fd, bool *uring);

/* An engine and a cold mapping of `size` bytes over it. */
struct bench_reader {
	struct bench_engine be;
	struct folio_mapping *m;
};

/* Engine `kind` on fd (O_DIRECT is detected from fd), mapping with the
 * max folio and block sizes of c->o. 0 / -errno (printed by the engine
 * part; nothing is left open on failure). */
int bench_reader_open(struct bench_ctx *c, struct bench_reader *r,
		      enum bench_engine_kind kind, int fd, uint64_t size);
/* Free the mapping (it only has clean folios) and the engine. */
int bench_reader_close(struct bench_reader *r);

/* The cold read variants shared by the read workloads. */
enum bench_cold {
	BENCH_COLD_PREAD,        /* pread() on the buffered fd */
	BENCH_COLD_POSIX,        /* the library, posix engine, buffered fd */
	BENCH_COLD_POSIX_DIRECT, /* the library, posix engine, O_DIRECT fd */
	BENCH_COLD_URING_DIRECT, /* the library, io_uring engine, O_DIRECT */
	BENCH_COLD_REMOTE,       /* the library, --engine nbd or rados: the
				  * one variant then */
	BENCH_COLD_N,
};

/* The variant's name ("kernel pread", "lib posix O_DIRECT", "lib nbd"). */
const char *bench_cold_label(const struct bench_ctx *c, enum bench_cold k);

/* Whether variant k runs: with a remote engine only BENCH_COLD_REMOTE;
 * otherwise the file variants the dfd and *uring of bench_direct_fd
 * allow. */
bool bench_cold_runs(const struct bench_ctx *c, enum bench_cold k, int dfd,
		     bool uring);

/*
 * Start a cold round of variant k: drop the kernel's pages of fd (see
 * bench_drop_kernel_cache; *resident gets what stayed) and, for a library
 * variant, open a new reader on fd or dfd (r->m stays NULL for pread).
 * BENCH_COLD_REMOTE has no file (fd and dfd unused, *resident 0): a new
 * engine and mapping over the filled remote store. 0 / -errno.
 */
int bench_cold_start(struct bench_ctx *c, enum bench_cold k, int fd,
		     int dfd, struct bench_reader *r, double *resident);

/* Read [0, size) of m in `chunk` pieces so every block is cached (and in
 * folios of up to `chunk` bytes). 0 / -errno. */
int bench_populate(struct folio_mapping *m, uint64_t size, size_t chunk);

/* ---- the device model (devmodel.c) -------------------------------------- */

/*
 * A device that serves one request at a time in arrival order: each write
 * costs lat + len / bw of device time on one device clock, and its
 * submitter sleeps until the request's completion time.
 */
int devmodel_new(struct devmodel **out, const struct bench_devmodel_params *p);
void devmodel_free(struct devmodel *d);
/* Charge one write request of `len` bytes (0: a flush) and sleep until it
 * completes on the modelled device. */
void devmodel_charge(struct devmodel *d, uint64_t len);
/* An engine that moves the data itself (pwritev/preadv on fd, or into the
 * mem engine `mem` when fd < 0) and charges every write on the model. */
int devmodel_engine(struct devmodel *d, int fd, struct folio_engine *mem,
		    struct folio_engine **out);
struct devmodel_stats {
	uint64_t requests, bytes, flushes;
	uint64_t busy_ns; /* modelled device time consumed */
};
void devmodel_stats(struct devmodel *d, struct devmodel_stats *st);
/* "bw=200M,lat=50" -> params. 0 / -EINVAL. */
int devmodel_parse(const char *s, struct bench_devmodel_params *p);

/* ---- threads ------------------------------------------------------------ */

/*
 * Start n threads running fn(arg + i * arg_size), let them run for
 * `seconds` (refreshing the progress line with `what`), set *stop and
 * join them. Returns the measured wall time in seconds, or -1 when a
 * thread could not start (the started ones are stopped and joined).
 */
double bench_run_threads(const char *what, unsigned n, void *(*fn)(void *),
			 void *arg, size_t arg_size, double seconds,
			 atomic_bool *stop);

/* ---- results ------------------------------------------------------------ */

#define BENCH_MAX_KV 40
#define BENCH_MAX_VARIANTS 32
#define BENCH_MAX_ROWS 40
#define BENCH_MAX_NOTES 8

struct bench_kv {
	char key[40];
	bool is_str;
	double num;
	char str[96];
};

/* One measured configuration: its figures go into the JSON output. */
struct bench_variant {
	char name[64];
	unsigned n;
	struct bench_kv kv[BENCH_MAX_KV];
};

/* Row flags */
#define BENCH_ROW_HEADLINE 0x1u /* also in the default run's combined table */

/* One line of the table: figure, value, comparison, ratio (and write
 * amplification when it applies). ratio/wa <= 0: not shown. */
struct bench_row {
	const char *figure;
	double value;
	const char *unit;
	const char *cmp;
	double ratio;
	double wa;
	unsigned flags;
};

struct bench_ctx {
	const struct bench_cmd *cmd;
	struct bench_opts o;
	bool quick;    /* part of the default run */
	bool modelled; /* used the device model: label everything */
	char title[256];
	struct bench_variant params;
	unsigned nvariants;
	struct bench_variant variants[BENCH_MAX_VARIANTS];
	unsigned nrows;
	struct bench_row_store {
		char figure[80];
		double value;
		char unit[16];
		char cmp[64];
		double ratio, wa;
		unsigned flags;
	} rows[BENCH_MAX_ROWS];
	unsigned nnotes;
	char notes[BENCH_MAX_NOTES][200];
	bool warned_not_cold; /* bench_drop_kernel_cache() said so */
	bool dropped_cache;   /* bench_drop_kernel_cache() was called */
	double max_resident;  /* the most of the file it found left */
	char store[64]; /* the RADOS object bench_remote_fill() made */
	int exit_code; /* of a legacy run(argc, argv) workload */
	bool legacy;
};

void bench_title(struct bench_ctx *c, const char *fmt, ...) BENCH_PRINTF(2, 3);
void bench_note(struct bench_ctx *c, const char *fmt, ...) BENCH_PRINTF(2, 3);
void bench_param_num(struct bench_ctx *c, const char *key, double v);
void bench_param_str(struct bench_ctx *c, const char *key, const char *v);
/* A new variant named `name` (NULL when the table is full). */
struct bench_variant *bench_variant(struct bench_ctx *c, const char *name);
void bench_num(struct bench_variant *v, const char *key, double val);
void bench_str(struct bench_variant *v, const char *key, const char *val);
void bench_row(struct bench_ctx *c, const struct bench_row *r);
/* Record the common options a workload used as parameters. */
void bench_params_common(struct bench_ctx *c);
/* Record the mapping statistics delta `after - before` in v, plus
 * write_amplification = wb_bytes / bytes_written; returns the latter. */
double bench_mapping_stats(struct bench_variant *v,
			   const struct folio_mapping_stats *before,
			   const struct folio_mapping_stats *after);
/* Record the device model's counters in v (no-op without a model). */
void bench_devmodel_stats(struct bench_variant *v, struct devmodel *d);

/* The \r-updated progress line on stderr, only when it is a terminal. */
void bench_progress(const char *fmt, ...) BENCH_PRINTF(1, 2);
void bench_progress_done(void);

/*
 * Fill c->o from the workload's defaults (and its default-run sizes when
 * c->quick), then from argv (argv[0] is skipped). With common_only, the
 * workload's own options are refused (the default run has no workload).
 * Returns 0, 2 after printing a usage error, or -1 when --help was asked
 * (the caller prints help and exits 0).
 */
int bench_parse_args(struct bench_ctx *c, int argc, char **argv,
		     bool common_only);
/* The option list for --help, with this workload's defaults (cmd may be
 * NULL: the common options with generic defaults). */
void bench_print_options(FILE *f, const struct bench_cmd *cmd);

/* One workload's results as a table. */
void bench_print_table(FILE *f, const struct bench_ctx *c);
/* The default run: the headline rows of every workload in one table. */
void bench_print_combined(FILE *f, struct bench_ctx *const *cs, unsigned n);
/* Everything as one JSON object. */
void bench_print_json(FILE *f, struct bench_ctx *const *cs, unsigned n,
		      bool default_run);

#endif
