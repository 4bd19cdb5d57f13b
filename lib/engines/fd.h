/* SPDX-License-Identifier: MIT */
#ifndef FOLIO_ENGINE_FD_H
#define FOLIO_ENGINE_FD_H

#include "engines/builtin.h"

/* Can the engines do positioned I/O on @fd? A regular file or a block
 * device, open for I/O (not O_PATH) and without O_APPEND (pwrite() would
 * append wherever the library asked to write). On success *@fl holds its
 * F_GETFL flags. Returns 0, -EBADF (not open, O_PATH) or -EINVAL (a pipe,
 * socket, directory, ... or O_APPEND). */
int engine_fd_check(int fd, int *fl);

/* preadv/pwritev the whole request at dev_pos, looping on short
 * transfers and EINTR; reads that meet end of file are zero-filled.
 * Returns the bytes done (possibly short for a write) or -errno. */
ssize_t engine_fd_rw(int fd, bool direct, struct folio_io *io);

/* The descriptor for direct writes that end mid-sector: @fd itself when
 * it is not O_DIRECT (@fl: its F_GETFL flags), else a new buffered
 * descriptor of the same file. 0 / -errno (*tail_fd is then -1). */
int engine_tail_fd_open(int fd, int fl, int *tail_fd);
void engine_tail_fd_close(int fd, int tail_fd);

/* Is @io a write that is aligned except for the length of its last
 * segment, i.e. a run that writeback cut at an unaligned end of file? */
bool engine_io_direct_tail(const struct folio_io *io, size_t align);

#endif
