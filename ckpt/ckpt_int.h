/* ckpt_int.h — what the files of ckpt/ share (internal; not a public
 * header).  One header for the module, in sections by the file that
 * defines them:
 *
 *   sys.c     error text, the monotonic clock, O_DIRECT alignment
 *   hasher.c  the shard hash (whole + per block)
 *   layout.c  names and paths of everything in a checkpoint directory
 *   lock.c    the bounded flock of DIR/.lock
 *   faults.c  the file-operation layer: every operation of ckpt/ that
 *             changes the disk goes through one of its wrappers, so that
 *             the fault-injection points ("open", "write", "fsync",
 *             "rename", "torn") are counted in one place and the crash
 *             simulator (ea_ckpt_sim_begin in ea_ckpt.h) sees every write,
 *             fsync, creation and rename.  Outside tests and chaos runs each
 *             wrapper costs one uncontended mutex and a counter increment,
 *             noise next to the system call it wraps.
 *
 * All return 0 (or an fd, or a documented count) or a negative errno.  In
 * the fault layer's crashed state (after a torn write) every wrapper that
 * would change the disk fails with -EIO and does nothing; close still
 * closes.
 */
#ifndef EA_CKPT_INT_H
#define EA_CKPT_INT_H

#include "ea_base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <xxhash.h>

/* ---- sys.c -------------------------------------------------------------- */

/* Text for an errno (positive or negative); thread-safe. */
const char *ea__ck_strerror(int err);
/* Monotonic seconds. */
double ea__ck_now(void);

/* O_DIRECT alignment of an open file: statx(STATX_DIOALIGN) when the kernel
 * reports it (Linux 6.1+), else 4096 (a multiple of every logical block
 * size in use).  Returns 1 and sets *align (offset and length granularity)
 * and *mem_align (buffer address), or 0 when the file system reports that
 * it does not support O_DIRECT on this file. */
int ea__ck_dio_align(int fd, uint32_t *align, uint32_t *mem_align);

/* ---- hasher.c ----------------------------------------------------------- */

/* XXH3-64 of a whole shard plus one XXH3-64 per block of
 * ea_ckpt_block_size(length) bytes, fed in order in pieces of any size. */
typedef struct {
  XXH3_state_t *whole, *block;
  uint64_t pos, block_size, length;
  uint32_t n_blocks;
  uint64_t *blocks; /* caller's array of EA_CKPT_MAX_BLOCKS */
} ea__ck_hasher;
int ea__ck_hasher_init(ea__ck_hasher *h, uint64_t length, uint64_t *blocks);
void ea__ck_hasher_feed(ea__ck_hasher *h, const void *p, size_t n);
/* The whole hash; *n_blocks the number of block hashes written. */
uint64_t ea__ck_hasher_final(ea__ck_hasher *h, uint32_t *n_blocks);
void ea__ck_hasher_free(ea__ck_hasher *h);

/* ---- layout.c ----------------------------------------------------------- */

/* File names inside DIR and inside a step directory (ea_ckpt.h draws the
 * tree).  Step directory and shard names: ea_ckpt_dir_name,
 * ea_ckpt_shard_name (public). */
#define EA__CK_LATEST "LATEST"
#define EA__CK_LATEST_TMP "LATEST.tmp"
#define EA__CK_MANIFEST "MANIFEST"
#define EA__CK_MANIFEST_TMP "MANIFEST.tmp"
#define EA__CK_LOCK ".lock"

/* out = dir + "/" + name, with dir's trailing slashes dropped.  0 or
 * -ENAMETOOLONG (as are all the path builders below). */
int ea__ck_join(char *out, size_t cap, const char *dir, const char *name);
/* The directory holding path ("/a/b/" -> "/a", "b" -> ".", "/a" -> "/"). */
int ea__ck_parent(char *out, size_t cap, const char *path);
/* DIR/step-<s>.gen-<g> */
int ea__ck_step_path(char *out, size_t cap, const char *dir, uint64_t step, uint64_t generation);
/* CKPT/MANIFEST, or CKPT/MANIFEST.tmp when tmp (CKPT: a step directory). */
int ea__ck_manifest_path(char *out, size_t cap, const char *ckpt_path, bool tmp);
/* DIR/LATEST, or DIR/LATEST.tmp when tmp. */
int ea__ck_latest_path(char *out, size_t cap, const char *dir, bool tmp);
/* DIR/.lock */
int ea__ck_lock_path(char *out, size_t cap, const char *dir);
/* LATEST's content for a step directory name ("step-<s>.gen-<g>\n"):
 * returns its length, or -ENAMETOOLONG. */
int ea__ck_latest_line(char *out, size_t cap, const char *name);
/* A canonical decimal (as in the directory names: no sign, no leading
 * zero, nothing after it) into *v.  0 or -EINVAL. */
int ea__ck_parse_u64(const char *s, uint64_t *v);

/* ---- lock.c ------------------------------------------------------------- */

/* flock(DIR/.lock, LOCK_EX|LOCK_NB) retried with backoff until the lock
 * timeout (EA_CKPT_LOCK_TIMEOUT_MS), creating the file; returns the fd
 * (close to unlock) or -ETIMEDOUT naming the holder. */
int ea__ck_lock_dir(const char *dir, char *err, size_t cap);

/* ---- faults.c: wrapped operations --------------------------------------- */

/* open(2); counts as "open".  O_CREAT of a new file is recorded for the
 * crash simulator. */
int ea__fs_open(const char *path, int flags, mode_t mode);
/* Opens a directory to fsync it; counts as "open". */
int ea__fs_open_dir(const char *path);
int ea__fs_close(int fd);

/* Before submitting a write of *len bytes to fd: 0 = go ahead; 1 = torn: the
 * caller writes only a prefix (it picks the length, e.g. half, aligned), then
 * calls ea__fs_torn_done(); -errno = fail this write without issuing it. */
int ea__fs_write_check(int fd, size_t len);
/* After a write completed: records the range for the crash simulator. */
void ea__fs_wrote(int fd, uint64_t off, uint64_t len);
/* After the torn prefix was written: SIGKILL (armed with EA_CKPT_FAULT_KILL)
 * or enter the crashed state.  Returns -EIO. */
int ea__fs_torn_done(void);

/* Before an fsync of fd: 0 = do it; 1 = skip it (crash simulation models
 * durability instead); -errno = fail it. */
int ea__fs_fsync_check(int fd);
/* After the fsync succeeded (or was skipped): fd's data, and for a
 * directory its entries, are durable. */
void ea__fs_synced(int fd);
/* check + fsync(2) + synced. */
int ea__fs_fsync(int fd);
/* open_dir + fsync + close; err names the directory and the operation. */
int ea__fs_fsync_dir(const char *path, char *err, size_t cap);

/* pwrite the whole buffer (each pwrite passes write_check). */
int ea__fs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
int ea__fs_ftruncate(int fd, uint64_t len);
/* renameat2(AT_FDCWD, from, AT_FDCWD, to, flags); counts as "rename". */
int ea__fs_rename(const char *from, const char *to, unsigned flags);
int ea__fs_mkdir(const char *path, mode_t mode);
int ea__fs_unlink(const char *path);
int ea__fs_rmdir(const char *path);

/* Create/truncate path, write buf, fsync, close; err names path and the
 * failing operation. */
int ea__fs_write_file(const char *path, const void *buf, size_t len, char *err, size_t cap);

#endif
