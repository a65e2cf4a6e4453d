/* sys.c — the small system helpers every ckpt/ file uses: error text in the
 * module's style, the monotonic clock, and the O_DIRECT alignment of a
 * file.
 *
 * They sit here, not in faults.c, because they inject nothing: faults.c is
 * the file-operation layer with its named fault points, and these are what
 * the writer, the reader, the commit and the lock call around it.  (A base
 * layer shared by every module is planned; until then ckpt/ keeps its own.)
 */
#include "ckpt_int.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const char *ea__ck_strerror(int err) {
  if (err < 0) err = -err;
  const char *s = strerrordesc_np(err);
  return s ? s : "unknown error";
}

double ea__ck_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ea__ck_dio_align(int fd, uint32_t *align, uint32_t *mem_align) {
  struct statx stx;
  memset(&stx, 0, sizeof stx);
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN)) {
    if (stx.stx_dio_offset_align == 0) return 0;
    *align = stx.stx_dio_offset_align;
    *mem_align = stx.stx_dio_mem_align ? stx.stx_dio_mem_align : stx.stx_dio_offset_align;
    return 1;
  }
  /* No report: 4096 is the largest logical block size of common devices,
   * hence valid for all of them (a 512-byte device accepts 4096 too). */
  *align = 4096;
  *mem_align = 4096;
  return 1;
}
