/* probe.c — the running agent's side of the checkpoint-directory probe
 * (probe.h): `elastic-agent preflight --join` asks "does your
 * checkpoint.dir hold this token file?", and the answer says whether the
 * two nodes see one directory, which a multi-node job needs (the
 * controller commits every rank's shards from its own view of the
 * directory).
 *
 * The look (open, read a few bytes) is disk I/O on what may be a network
 * file system, so it runs on the libuv thread pool, never on the loop; the
 * answer is sent from the after-work callback with the wall clock read
 * then, as late as possible, so the asker's offset estimate stays inside
 * its round trip.  A request costs one small read: at most
 * PROBE_IN_FLIGHT are served at once and more are dropped (the asker
 * times out and says so), so a flood cannot tie up the thread pool.
 */
#include "agent_int.h"
#include "probe.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A preflight asks each worker agent once; a few dozen at once is a big
 * cluster's preflight from several nodes. */
#define PROBE_IN_FLIGHT 32

typedef struct {
  uv_work_t w;
  ea__agent *a;
  ea__probe_msg req;
  char dir[EA_PATH_MAX];
  uint8_t result;
  int error;
} probe_job;

static int in_flight;

static void probe_work(uv_work_t *w) {
  probe_job *j = w->data;
  char path[EA_PATH_MAX + EA__PROBE_FILE_MAX + 2];
  snprintf(path, sizeof path, "%s/%s", j->dir, j->req.file);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    j->error = errno;
    j->result = j->error == ENOENT || j->error == ENOTDIR ? EA__PROBE_ABSENT : EA__PROBE_ERROR;
    if (j->result == EA__PROBE_ABSENT) j->error = 0;
    return;
  }
  char buf[EA__PROBE_TOKEN_MAX + 1];
  ssize_t n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  if (n < 0) {
    j->result = EA__PROBE_ERROR;
    j->error = e ? e : EIO;
    return;
  }
  size_t tl = strlen(j->req.token);
  j->result =
      (size_t)n == tl && memcmp(buf, j->req.token, tl) == 0 ? EA__PROBE_SEEN : EA__PROBE_DIFFERS;
}

static void probe_after(uv_work_t *w, int status) {
  probe_job *j = w->data;
  ea__agent *a = j->a;
  in_flight--;
  if (status == 0 && a->ctl && a->phase < EA__PHASE_CLOSING) {
    ea__probe_msg ans = {.type = EA__PROBE_ANS, .src = a->id, .nonce = j->req.nonce};
    ans.result = j->result;
    ans.error = j->result == EA__PROBE_ERROR
                    ? (uint32_t)(j->error > 0 && j->error < 4096 ? j->error : EIO)
                    : 0;
    snprintf(ans.node, sizeof ans.node, "%s", a->o->name);
    snprintf(ans.dir, sizeof ans.dir, "%s", a->ckpt_dir);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ans.wall_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    static uint8_t buf[EA__PROBE_WIRE_MAX];
    size_t len;
    if (ea__probe_encode(&ans, buf, sizeof buf, &len) == 0)
      ea__ctl_send_bytes(a->ctl, &j->req.src, &j->req.reply_to, buf, len);
    char who[64];
    ea_addr_str(&j->req.reply_to, who, sizeof who);
    ea_log(EA_LOG_INFO, "preflight", "checkpoint-dir probe from %s: %s in %s", who,
           ea__probe_result_str(j->result), a->ckpt_dir);
  }
  free(j);
}

bool ea__agent_probe_frame(void *ctx, const uint8_t *plain, size_t len) {
  ea__agent *a = ctx;
  if (!ea__probe_wire_is(plain, len)) return false;
  probe_job *j = calloc(1, sizeof *j);
  const char *why = "?";
  if (!j) return true;
  if (ea__probe_decode(plain, len, &j->req, &why) != 0 || j->req.type != EA__PROBE_REQ) {
    ea_log(EA_LOG_WARN, "preflight", "malformed checkpoint-dir probe dropped: %s",
           j->req.type == EA__PROBE_ANS ? "an answer sent to an agent" : why);
    free(j);
    return true;
  }
  if (a->phase >= EA__PHASE_LEAVING || in_flight >= PROBE_IN_FLIGHT) {
    free(j);
    return true;
  }
  j->a = a;
  j->w.data = j;
  snprintf(j->dir, sizeof j->dir, "%s", a->ckpt_dir);
  if (uv_queue_work(&a->loop, &j->w, probe_work, probe_after) != 0) {
    free(j);
    return true;
  }
  in_flight++;
  return true;
}
