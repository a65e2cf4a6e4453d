/* faults.h — the file-operation layer of ckpt/ (internal).
 *
 * Every operation of ckpt/ that changes the disk goes through one of these
 * wrappers, so that the fault-injection points ("open", "write", "fsync",
 * "rename", "torn") are counted in one place and the crash simulator (see
 * ea_ckpt_sim_begin in ea_ckpt.h) sees every write, fsync, creation and
 * rename.  Outside tests and chaos runs each wrapper costs one uncontended
 * mutex and a counter increment, noise next to the system call it wraps.
 *
 * All return 0 (or an fd) or a negative errno.  In the crashed state (after a
 * torn write) every wrapper that would change the disk fails with -EIO and
 * does nothing; close still closes.
 *
 * Also here, because the module has one internal header: small helpers
 * shared by the ckpt/ files (error text, paths, clock, O_DIRECT alignment,
 * the XXH3 block hasher, the directory lock).
 */
#ifndef EA_CKPT_FAULTS_H
#define EA_CKPT_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <xxhash.h>

/* ---- helpers ------------------------------------------------------------ */

/* Text for an errno (positive or negative); thread-safe. */
const char *ea__ck_strerror(int err);
/* snprintf into err (NULL or cap 0: ignored). */
void ea__ck_seterr(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* out = dir + "/" + name, with dir's trailing slashes dropped.  0 or
 * -ENAMETOOLONG. */
int ea__ck_join(char *out, size_t cap, const char *dir, const char *name);
/* Monotonic seconds. */
double ea__ck_now(void);

/* O_DIRECT alignment of an open file: statx(STATX_DIOALIGN) when the kernel
 * reports it (Linux 6.1+), else 4096 (a multiple of every logical block
 * size in use).  Returns 1 and sets *align (offset and length granularity)
 * and *mem_align (buffer address), or 0 when the file system reports that
 * it does not support O_DIRECT on this file. */
int ea__ck_dio_align(int fd, uint32_t *align, uint32_t *mem_align);

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

/* flock(DIR/.lock, LOCK_EX|LOCK_NB) retried with backoff until the lock
 * timeout (EA_CKPT_LOCK_TIMEOUT_MS), creating the file; returns the fd
 * (close to unlock) or -ETIMEDOUT naming the holder.  Defined in store.c. */
int ea__ck_lock_dir(const char *dir, char *err, size_t cap);

/* ---- wrapped operations ------------------------------------------------ */

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
