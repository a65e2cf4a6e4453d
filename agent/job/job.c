/* job.c — when the job is over, and how every agent learns it (job.h has
 * the outcomes, the codes and the messages).
 *
 * The controller decides because only it sees the whole job: every
 * member's DONE, every worker failure, and the rendezvous' own verdicts
 * (restarts used up, min_nodes out of reach; agent/rdzv.c).  A member's
 * report is re-sent every DONE_RESEND_MS until the job ends, since the
 * controller can change under it (the new one starts with nothing
 * collected) and the control channel drops what it cannot deliver.  END is
 * sent to every member seen alive and re-sent every END_RESEND_MS to those
 * still alive; a member passes its first copy on to RELAY_FANOUT others, so
 * the outcome spreads even when the controller dies right after deciding.
 * The controller itself leaves once every other member has left, or after
 * END_LINGER_MS.
 *
 * Churn: the rendezvous counts a streak of generations that fail soon
 * after their commit for the same reason and backs off; this file raises
 * the one alert per streak (CHURN_ALERT_AT generations in), naming the
 * reason, the count and the latest failure's details.
 */
#include "job.h"

#include "ea_base.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A member's DONE again this often until the job ends: REPORT_MS of the
 * rendezvous, the pace at which a controller change is noticed. */
#define DONE_RESEND_MS 1000
/* END again this often to members still alive: five resends within the
 * controller's linger. */
#define END_RESEND_MS 250
/* How long the deciding controller stays for the others to hear END:
 * they leave within milliseconds of it; one second of resends covers a
 * lost frame or a slow connect. */
#define END_LINGER_MS 1500
/* Members each receiver passes END to: with three, an epidemic reaches
 * everyone in a handful of rounds whatever happened to the controller. */
#define RELAY_FANOUT 3
/* The churn alert goes out on the third generation of a streak: two in a
 * row can be bad luck (a node dying just after a commit); three are a
 * loop. */
#define CHURN_ALERT_AT 3
/* A failed final checkpoint is tried again after 1 s, then 2, 4, 8, 10, 10 …
 * (a disk that filled up, a storage server restarting), until
 * o.final_ckpt_timeout_ms after its first failure. */
#define FINAL_RETRY_FIRST_MS 1000
#define FINAL_RETRY_MAX_MS 10000

/* ---- pure helpers ------------------------------------------------------------------- */

int ea__job_exit_code(uint8_t kind) {
  switch (kind) {
    case EA__JOB_SUCCESS:
      return EA__EXIT_OK;
    case EA__JOB_RESTARTS:
      return EA__EXIT_RESTARTS;
    case EA__JOB_MIN_NODES:
      return EA__EXIT_MIN_NODES;
    case EA__JOB_FINAL_CKPT:
      return EA__EXIT_FINAL_CKPT;
    default:
      return EA__EXIT_START;
  }
}

const char *ea__job_kind_str(uint8_t kind) {
  switch (kind) {
    case EA__JOB_SUCCESS:
      return "succeeded";
    case EA__JOB_RESTARTS:
      return "restarts exhausted";
    case EA__JOB_MIN_NODES:
      return "min_nodes not reached";
    case EA__JOB_FINAL_CKPT:
      return "final checkpoint failed";
    default:
      return "?";
  }
}

uint8_t ea__job_kind_of_rdzv(uint8_t f) {
  switch (f) {
    case EA_RDZV_JOB_RESTARTS:
      return EA__JOB_RESTARTS;
    case EA_RDZV_JOB_MIN_NODES:
      return EA__JOB_MIN_NODES;
    default:
      return 0;
  }
}

static void first_line(const char *s, size_t len, char *out, size_t cap) {
  size_t n = 0;
  while (n < len && s[n] != '\n' && s[n] != '\r' && n + 1 < cap) n++;
  memcpy(out, s, n);
  out[n] = 0;
}

/* The last non-empty line of a traceback ("RuntimeError: boom"). */
static void last_line(const char *s, char *out, size_t cap) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
  size_t b = n;
  while (b && s[b - 1] != '\n') b--;
  size_t len = n - b < cap - 1 ? n - b : cap - 1;
  memcpy(out, s + b, len);
  out[len] = 0;
}

int ea__job_parse_error_file(const char *json, size_t len, char *out, size_t cap) {
  if (cap) out[0] = 0;
  json_error_t je;
  json_t *root = json_loadb(json, len, 0, &je);
  const char *text = NULL, *tb = NULL;
  if (root && json_is_object(root)) {
    json_t *m = json_object_get(root, "message");
    if (json_is_string(m)) {
      text = json_string_value(m);
    } else if (json_is_object(m)) {
      json_t *mm = json_object_get(m, "message");
      if (json_is_string(mm)) text = json_string_value(mm);
      json_t *x = json_object_get(m, "extraInfo");
      json_t *cs = json_is_object(x) ? json_object_get(x, "py_callstack") : NULL;
      if (json_is_string(cs)) tb = json_string_value(cs);
    }
  }
  if (!text) {
    first_line(json, len, out, cap);
    if (root) json_decref(root);
    return -EINVAL;
  }
  char last[256] = "";
  if (tb) last_line(tb, last, sizeof last);
  if (last[0] && !strstr(text, last))
    snprintf(out, cap, "%s\n%s", text, last);
  else
    snprintf(out, cap, "%s", text);
  json_decref(root);
  return 0;
}

void ea__job_failure_str(const ea__job_failure *f, char *out, size_t cap) {
  char how[96];
  if (f->has_code)
    snprintf(how, sizeof how, "exited with code %u", f->code);
  else
    snprintf(how, sizeof how, "was killed by signal %u (%s)", f->signal,
             f->signal < 65 ? strsignal((int)f->signal) : "?");
  char msg[EA__JOB_MSG_MAX + 64];
  size_t n = 0;
  for (const char *p = f->message; *p && n + 4 < sizeof msg; p++) {
    if (*p == '\n') {
      memcpy(msg + n, " | ", 3);
      n += 3;
    } else {
      msg[n++] = *p;
    }
  }
  msg[n] = 0;
  snprintf(out, cap, "rank %u on %s %s%s%s%s", f->rank, f->node[0] ? f->node : "?", how,
           msg[0] ? ": " : "", msg,
           f->source == EA__JOB_SRC_STDERR ? " (last lines of its stderr)" : "");
}

/* ---- the lifecycle ------------------------------------------------------------------------ */

struct ea__job {
  uv_loop_t *loop;
  ea__job_opts o;
  char *command, *name;
  ea__job_cbs cb;
  void *ctx;
  uv_timer_t timer;
  bool closing;
  ea_rng rng; /* which peers relay the END */

  /* the view, as of the last update */
  bool controller, have_controller;
  ea_node_id controller_id;
  uint64_t formed;
  bool ever_formed; /* this node has known a formed generation of the job */
  uint32_t formed_nodes;
  uint64_t restarts;
  ea_member *members;
  size_t nmembers, capmembers;
  uint64_t ckpt_step;
  bool ckpt_known;
  ea_rdzv_status st; /* the rendezvous, as of the last update */

  /* this node */
  uint64_t done_gen, done_step; /* all local workers finished in done_gen */
  uint64_t done_sent_ms;

  /* as controller: DONE of the formed generation, failures */
  uint64_t done_for; /* the generation done_ids belong to */
  ea_node_id *done_ids;
  size_t ndone, capdone;
  bool have_fail;
  ea__job_failure fail; /* first failure of the formed generation, or the latest */
  uint64_t ckpt_failed_step;
  char ckpt_why[EA__JOB_REASON_MAX];
  /* the final checkpoint's retries */
  uint64_t final_first_fail_ms; /* 0: it has not failed */
  uint64_t final_retry_at;      /* 0: no retry armed */
  uint32_t final_attempts;      /* retries sent */
  bool final_no_retry;          /* a failure no retry mends (ea__job_ckpt_failed) */
  /* smoke_restore: the generation that finished first (0: not yet) */
  uint64_t restored_from;

  /* churn */
  uint64_t churn_alerted; /* streak number alerted about */
  uint32_t churn;
  char churn_why[96];
  uint64_t churn_wait;

  /* the end */
  bool ended, decided_here, end_called;
  uint8_t kind;
  int code;
  char reason[EA__JOB_REASON_MAX];
  bool end_has_failure;
  ea__job_failure end_fail;
  uint64_t end_ms, end_resend_ms;
};

static uint64_t rnd(ea__job *J) {
  return ea_rng_next(&J->rng);
}

static void tick(uv_timer_t *t);

int ea__job_new(uv_loop_t *loop, const ea__job_opts *o, const ea__job_cbs *cb, void *ctx,
                ea__job **out) {
  *out = NULL;
  ea__job *J = calloc(1, sizeof *J);
  if (!J) return -ENOMEM;
  J->loop = loop;
  J->o = *o;
  J->command = strdup(o->command ? o->command : "");
  J->name = strdup(o->name ? o->name : "");
  if (!J->command || !J->name) {
    free(J->command);
    free(J->name);
    free(J);
    return -ENOMEM;
  }
  J->o.command = J->command;
  J->o.name = J->name;
  if (cb) J->cb = *cb;
  J->ctx = ctx;
  ea_rng_seed(&J->rng, (uint64_t)(uintptr_t)J ^ uv_hrtime(), EA_RNG_JOB, 0);
  uv_timer_init(loop, &J->timer);
  J->timer.data = J;
  uv_timer_start(&J->timer, tick, END_RESEND_MS, END_RESEND_MS);
  *out = J;
  return 0;
}

static bool is_self(const ea__job *J, const ea_node_id *id) {
  return ea_node_id_cmp(id, &J->o.self) == 0;
}

static void send_msg(ea__job *J, const ea_node_id *to, const ea__job_msg *m) {
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  int rc = ea__job_encode(m, buf, sizeof buf, &len);
  if (rc) {
    ea_log(EA_LOG_ERROR, "job", "cannot encode a job message (type 0x%02x): %s", m->type,
           strerror(-rc));
    return;
  }
  if (J->cb.send) J->cb.send(J->ctx, to, buf, len);
}

static void recv_msg(ea__job *J, const ea__job_msg *m);
static void judge(ea__job *J, const ea_rdzv_status *st);

/* To the controller: ours directly, another over the channel. */
static void to_controller(ea__job *J, ea__job_msg *m) {
  if (!J->have_controller) return;
  m->src = J->o.self;
  if (J->controller) {
    recv_msg(J, m);
    return;
  }
  send_msg(J, &J->controller_id, m);
}

static bool up(const ea_member *m) {
  return m && (m->state == EA_STATE_ALIVE || m->state == EA_STATE_SUSPECT);
}

static void end_msg(const ea__job *J, ea__job_msg *m) {
  memset(m, 0, sizeof *m);
  m->type = EA__JOB_END;
  m->src = J->o.self;
  m->kind = J->kind;
  snprintf(m->reason, sizeof m->reason, "%s", J->reason);
  m->has_failure = J->end_has_failure;
  if (m->has_failure) m->f = J->end_fail;
}

static void job_alert(ea__job *J, int what, const char *text) {
  if (J->cb.alert)
    J->cb.alert(J->ctx, what, text);
  else
    ea_log(EA_LOG_ERROR, "alert", "%s", text);
}

/* Report the end here (log, alert), then tell the agent. */
static void end_here(ea__job *J) {
  if (J->end_called) return;
  J->end_called = true;
  char fs[EA__JOB_MSG_MAX + 256] = "";
  if (J->end_has_failure) ea__job_failure_str(&J->end_fail, fs, sizeof fs);
  if (J->kind == EA__JOB_SUCCESS)
    ea_log(EA_LOG_INFO, "job", "finished: %s; leaving, exit status 0", J->reason);
  else {
    char t[EA__JOB_REASON_MAX + sizeof fs + 64];
    snprintf(t, sizeof t, "job failed (%s, exit status %d): %s%s%s", ea__job_kind_str(J->kind),
             J->code, J->reason, fs[0] ? "; failing worker: " : "", fs);
    job_alert(J, EA__JOB_ALERT_FAILED, t);
  }
  if (J->cb.end) J->cb.end(J->ctx, J->kind, J->code);
}

static void adopt_end(ea__job *J, uint8_t kind, const char *reason, const ea__job_failure *f) {
  J->ended = true;
  J->kind = kind;
  J->code = ea__job_exit_code(kind);
  snprintf(J->reason, sizeof J->reason, "%s", reason);
  J->end_has_failure = f != NULL;
  if (f) J->end_fail = *f;
  J->end_ms = uv_now(J->loop);
}

/* As controller: the job is over; tell everyone. */
static void decide(ea__job *J, uint8_t kind, const char *reason, const ea__job_failure *f) {
  if (J->ended) return;
  adopt_end(J, kind, reason, f);
  J->decided_here = true;
  ea_log(kind == EA__JOB_SUCCESS ? EA_LOG_INFO : EA_LOG_WARN, "job",
         "%sthe job %s (%s); telling every member", J->controller ? "controller: " : "",
         ea__job_kind_str(kind), reason);
  ea__job_msg m;
  end_msg(J, &m);
  for (size_t i = 0; i < J->nmembers; i++)
    if (!is_self(J, &J->members[i].id) && up(&J->members[i])) send_msg(J, &J->members[i].id, &m);
  J->end_resend_ms = uv_now(J->loop);
}

/* END heard: pass it on to a few members, then end here. */
static void on_end(ea__job *J, const ea__job_msg *m) {
  if (J->ended) return;
  adopt_end(J, m->kind, m->reason, m->has_failure ? &m->f : NULL);
  ea__job_msg c;
  end_msg(J, &c);
  size_t cand = 0;
  for (size_t i = 0; i < J->nmembers; i++)
    if (!is_self(J, &J->members[i].id) && ea_node_id_cmp(&J->members[i].id, &m->src) != 0 &&
        up(&J->members[i]))
      cand++;
  for (int k = 0; k < RELAY_FANOUT && cand; k++) {
    size_t pick = rnd(J) % cand, seen = 0;
    for (size_t i = 0; i < J->nmembers; i++) {
      const ea_member *x = &J->members[i];
      if (is_self(J, &x->id) || ea_node_id_cmp(&x->id, &m->src) == 0 || !up(x)) continue;
      if (seen++ == pick) {
        send_msg(J, &x->id, &c);
        break;
      }
    }
  }
  end_here(J);
}

static void note_done(ea__job *J, const ea__job_msg *m) {
  if (m->gen != J->formed) return; /* an older generation's, or one we do not know yet */
  if (J->done_for != J->formed) {
    J->done_for = J->formed;
    J->ndone = 0;
  }
  for (size_t i = 0; i < J->ndone; i++)
    if (ea_node_id_cmp(&J->done_ids[i], &m->src) == 0) return;
  if (EA_ARRAY_RESERVE(J->done_ids, J->capdone, J->ndone + 1) < 0) return;
  J->done_ids[J->ndone++] = m->src;
}

static void note_failure(ea__job *J, const ea__job_failure *f) {
  /* The first failure of a generation is its cause (the others' workers
   * fail because of it: "Connection closed by peer"): the earliest exit,
   * whichever report arrives first.  A newer generation's replaces an
   * older one's. */
  if (J->have_fail && J->fail.gen > f->gen) return;
  if (J->have_fail && J->fail.gen == f->gen && J->fail.at_ms <= f->at_ms) return;
  J->fail = *f;
  J->have_fail = true;
}

static void recv_msg(ea__job *J, const ea__job_msg *m) {
  switch (m->type) {
    case EA__JOB_EXIT:
      if (J->controller) {
        note_failure(J, &m->f);
        if (J->cb.worker_failed && J->o.mode != EA__MODE_TORCHRUN)
          J->cb.worker_failed(J->ctx, &m->src, &m->f);
      }
      break;
    case EA__JOB_PACE:
      if (J->cb.pace) J->cb.pace(J->ctx, m);
      break;
    case EA__JOB_LINK_PING:
    case EA__JOB_LINK_PONG:
    case EA__JOB_LINK_DOWN:
      if (J->cb.link) J->cb.link(J->ctx, m);
      break;
    case EA__JOB_DONE:
      if (J->controller) {
        note_done(J, m);
        judge(J, &J->st);
      }
      break;
    case EA__JOB_END:
      on_end(J, m);
      break;
    case EA__JOB_CKPT_AGAIN:
      if (J->cb.ckpt_again) J->cb.ckpt_again(J->ctx, m->gen, m->step);
      break;
    case EA__JOB_RESTORE:
      if (J->o.smoke_restore && !J->restored_from) {
        J->restored_from = m->gen;
        if (J->cb.restore) J->cb.restore(J->ctx, m->gen, m->step);
      }
      break;
    default:
      break;
  }
}

/* The armed retry of the final checkpoint is due: every member of the
 * generation that finished stages its shard again. */
static void final_retry(ea__job *J) {
  J->final_retry_at = 0;
  J->final_attempts++;
  ea_log(EA_LOG_INFO, "job", "trying the final checkpoint (step %" PRIu64 ") again: retry %u",
         J->o.train_steps, J->final_attempts);
  ea__job_msg m = {.type = EA__JOB_CKPT_AGAIN, .gen = J->done_for, .step = J->o.train_steps};
  if (J->cb.ckpt_again) J->cb.ckpt_again(J->ctx, m.gen, m.step);
  for (size_t i = 0; i < J->nmembers; i++)
    if (!is_self(J, &J->members[i].id) && up(&J->members[i])) send_msg(J, &J->members[i].id, &m);
}

/* smoke_restore, as controller: generation J->formed finished with its
 * final checkpoint committed; every member restores it into a fresh
 * generation before the job ends. */
static void restore_now(ea__job *J) {
  J->restored_from = J->formed;
  ea_log(EA_LOG_INFO, "job",
         "smoke run: generation %" PRIu64 " reached train.steps %" PRIu64
         " with its checkpoint committed; restoring it into a fresh generation",
         J->formed >> 16, J->o.train_steps);
  ea__job_msg m = {.type = EA__JOB_RESTORE, .gen = J->formed, .step = J->o.train_steps};
  for (size_t i = 0; i < J->nmembers; i++)
    if (!is_self(J, &J->members[i].id) && up(&J->members[i])) send_msg(J, &J->members[i].id, &m);
  if (J->cb.restore) J->cb.restore(J->ctx, m.gen, m.step); /* after: it forms the generation */
}

bool ea__job_on_frame(ea__job *J, const uint8_t *plain, size_t len) {
  if (!ea__job_wire_is(plain, len)) return false;
  ea__job_msg m;
  const char *why = "?";
  if (ea__job_decode(plain, len, &m, &why) != 0) {
    ea_log(EA_LOG_WARN, "job", "malformed job message dropped: %s", why);
    return true;
  }
  if (J->closing) return true;
  recv_msg(J, &m);
  return true;
}

static void send_done(ea__job *J) {
  if (!J->done_gen || J->ended) return;
  ea__job_msg m = {.type = EA__JOB_DONE, .gen = J->done_gen, .step = J->done_step};
  J->done_sent_ms = uv_now(J->loop);
  to_controller(J, &m);
}

void ea__job_local_done(ea__job *J, uint64_t gen, uint64_t step) {
  if (gen == J->done_gen) return;
  J->done_gen = gen;
  J->done_step = step;
  if (gen) {
    ea_log(EA_LOG_INFO, "job", "every worker here finished generation %" PRIu64 "%s", gen >> 16,
           J->o.mode == EA__MODE_BUILTIN ? " (train.steps reached)" : " (exit status 0)");
    send_done(J);
  }
}

void ea__job_local_failure(ea__job *J, const ea__job_failure *f) {
  char s[EA__JOB_MSG_MAX + 256];
  ea__job_failure_str(f, s, sizeof s);
  ea_log(EA_LOG_WARN, "worker", "failed gen=%" PRIu64 ": %s", f->gen >> 16, s);
  if (!J->controller) { /* status shows it here too (the controller keeps the job's) */
    J->fail = *f;
    J->have_fail = true;
  }
  ea__job_msg m = {.type = EA__JOB_EXIT, .f = *f};
  to_controller(J, &m);
}

void ea__job_ckpt_failed(ea__job *J, uint64_t step, const char *why, bool retry) {
  if (step > J->ckpt_failed_step) {
    J->ckpt_failed_step = step;
    snprintf(J->ckpt_why, sizeof J->ckpt_why, "%s", why ? why : "?");
  }
  if (!retry && step >= J->o.train_steps) J->final_no_retry = true;
}

/* The controller's judgement, after every change. */
static void judge(ea__job *J, const ea_rdzv_status *st) {
  if (J->ended) return;
  if (J->formed) J->ever_formed = true;
  /* Cut off while the job ended (a partition's minority, a node paused
   * past the end): no END reached us, and the others have left, so no
   * quorum will ever form again.  The final checkpoint in LATEST says the
   * job succeeded: end here too, and tell whoever else is left.  Only for
   * a node that trained in this job (a fresh start in a directory of a
   * finished job forms, resumes the final checkpoint and ends normally). */
  if (J->o.mode == EA__MODE_BUILTIN && J->o.ckpt_on && !J->o.smoke_restore && J->ever_formed &&
      J->ckpt_known && J->ckpt_step >= J->o.train_steps && st->phase != EA_RDZV_RUNNING) {
    char why[EA__JOB_REASON_MAX];
    snprintf(why, sizeof why,
             "the final checkpoint (step %" PRIu64
             ") is committed: the job finished while this node ran no generation",
             J->ckpt_step);
    decide(J, EA__JOB_SUCCESS, why, NULL);
    return;
  }
  if (!J->controller) return;
  uint8_t k = ea__job_kind_of_rdzv(st->job_failed);
  if (k) {
    decide(J, k, st->job_why, J->have_fail ? &J->fail : NULL);
    return;
  }
  if (!J->formed || !J->formed_nodes) return;
  if (J->done_for != J->formed || J->ndone < J->formed_nodes) return;
  char why[EA__JOB_REASON_MAX];
  if (J->o.mode == EA__MODE_BUILTIN && J->o.ckpt_on) {
    if (J->ckpt_failed_step >= J->o.train_steps) {
      uint64_t now = uv_now(J->loop);
      J->ckpt_failed_step = 0; /* consumed: the next attempt's failure arms the next retry */
      if (!J->final_first_fail_ms) J->final_first_fail_ms = now;
      uint64_t spent = now - J->final_first_fail_ms;
      if (J->final_no_retry) {
        snprintf(why, sizeof why,
                 "the final checkpoint (step %" PRIu64 ") could not be committed: %.400s",
                 J->o.train_steps, J->ckpt_why);
        decide(J, EA__JOB_FINAL_CKPT, why, NULL);
        return;
      }
      if (spent >= J->o.final_ckpt_timeout_ms) {
        snprintf(why, sizeof why,
                 "the final checkpoint (step %" PRIu64
                 ") could not be committed in %.1f s (%u "
                 "retries; checkpoint.timeout_seconds %.1f): %.360s",
                 J->o.train_steps, (double)spent / 1000.0, J->final_attempts,
                 (double)J->o.final_ckpt_timeout_ms / 1000.0, J->ckpt_why);
        decide(J, EA__JOB_FINAL_CKPT, why, NULL);
        return;
      }
      uint64_t delay = FINAL_RETRY_FIRST_MS;
      for (uint32_t i = 0; i < J->final_attempts && delay < FINAL_RETRY_MAX_MS; i++) delay *= 2;
      if (delay > FINAL_RETRY_MAX_MS) delay = FINAL_RETRY_MAX_MS;
      J->final_retry_at = now + delay;
      ea_log(EA_LOG_WARN, "job",
             "the final checkpoint (step %" PRIu64 ") failed: %.360s; trying again in %" PRIu64
             " ms (retry %u; the job fails %.1f s after the first failure: "
             "checkpoint.timeout_seconds)",
             J->o.train_steps, J->ckpt_why, delay, J->final_attempts + 1,
             (double)J->o.final_ckpt_timeout_ms / 1000.0);
      return;
    }
    if (J->final_retry_at) return; /* a retry is due: its commit or failure decides */
    if (!J->ckpt_known || J->ckpt_step < J->o.train_steps) return; /* wait for its commit */
    if (J->o.smoke_restore && (!J->restored_from || J->restored_from == J->formed)) {
      if (!J->restored_from) restore_now(J);
      return; /* the restored generation's own finish decides */
    }
    snprintf(why, sizeof why,
             "all %u ranks reached train.steps %" PRIu64 " in generation %" PRIu64
             "; final checkpoint step-%" PRIu64 " committed",
             J->formed_nodes * J->o.wpn, J->o.train_steps, J->formed >> 16, J->ckpt_step);
  } else if (J->o.mode == EA__MODE_BUILTIN) {
    snprintf(why, sizeof why, "all %u ranks reached train.steps %" PRIu64 " in generation %" PRIu64,
             J->formed_nodes * J->o.wpn, J->o.train_steps, J->formed >> 16);
  } else {
    snprintf(why, sizeof why, "all %u workers of generation %" PRIu64 " exited 0",
             J->formed_nodes * J->o.wpn, J->formed >> 16);
  }
  decide(J, EA__JOB_SUCCESS, why, NULL);
}

static void churn_check(ea__job *J, const ea_rdzv_status *st) {
  J->churn = st->churn;
  J->churn_wait = st->churn_wait_ms;
  snprintf(J->churn_why, sizeof J->churn_why, "%s", st->churn_why);
  if (!J->controller || st->churn < CHURN_ALERT_AT || st->churn_streak == J->churn_alerted) return;
  J->churn_alerted = st->churn_streak;
  char fs[EA__JOB_MSG_MAX + 256] = "";
  if (J->have_fail) ea__job_failure_str(&J->fail, fs, sizeof fs);
  char t[EA_RDZV_REASON_MAX + sizeof fs + 256];
  snprintf(t, sizeof t,
           "generation churn: %u generations in a row failed within %u s of their commit: %s%s%s; "
           "each next restart waits longer (the next up to %" PRIu64
           " ms, at most %u ms: "
           "runtime.rendezvous_timeout_seconds)",
           st->churn, EA_RDZV_CHURN_WINDOW_MS / 1000, st->churn_why, fs[0] ? "; latest: " : "", fs,
           ea_rdzv_churn_delay_ms(st->churn + 1, J->o.churn_cap_ms, UINT64_MAX), J->o.churn_cap_ms);
  job_alert(J, EA__JOB_ALERT_CHURN, t);
}

void ea__job_update(ea__job *J, const ea__job_view *v) {
  if (J->closing) return;
  bool was = J->controller;
  ea_node_id prev = J->controller_id;
  J->have_controller = v->have_controller;
  J->controller = v->controller;
  J->controller_id = v->controller_id;
  if (v->nmembers > J->capmembers) {
    ea_member *p = realloc(J->members, v->nmembers * sizeof *p);
    if (p) {
      J->members = p;
      J->capmembers = v->nmembers;
    }
  }
  if (v->nmembers <= J->capmembers) {
    if (v->nmembers) memcpy(J->members, v->members, v->nmembers * sizeof *v->members);
    J->nmembers = v->nmembers;
  }
  J->st = *v->st;
  const ea_rdzv_status *st = &J->st;
  J->formed = ea_rdzv_gen_u64(&st->formed);
  J->formed_nodes = st->formed_nodes;
  J->restarts = st->restarts;
  J->ckpt_step = v->ckpt_step;
  J->ckpt_known = v->ckpt_known;
  /* A new controller hears our DONE at once. */
  if (J->have_controller && (!was || ea_node_id_cmp(&prev, &J->controller_id) != 0)) send_done(J);
  churn_check(J, st);
  judge(J, st);
}

static bool others_gone(const ea__job *J) {
  for (size_t i = 0; i < J->nmembers; i++)
    if (!is_self(J, &J->members[i].id) && up(&J->members[i])) return false;
  return true;
}

static void tick(uv_timer_t *t) {
  ea__job *J = t->data;
  if (J->closing) return;
  uint64_t now = uv_now(J->loop);
  if (!J->ended) {
    if (J->done_gen && now - J->done_sent_ms >= DONE_RESEND_MS) send_done(J);
    if (J->final_retry_at && now >= J->final_retry_at && J->controller) final_retry(J);
    return;
  }
  if (!J->decided_here) return;
  if (now - J->end_resend_ms >= END_RESEND_MS && !J->end_called) {
    ea__job_msg m;
    end_msg(J, &m);
    for (size_t i = 0; i < J->nmembers; i++)
      if (!is_self(J, &J->members[i].id) && up(&J->members[i])) send_msg(J, &J->members[i].id, &m);
    J->end_resend_ms = now;
  }
  if (!J->end_called && (others_gone(J) || now - J->end_ms >= END_LINGER_MS)) end_here(J);
}

bool ea__job_ended(const ea__job *J, uint8_t *kind, int *code) {
  if (!J->ended) return false;
  if (kind) *kind = J->kind;
  if (code) *code = J->code;
  return true;
}

/* A JSON string of any bytes (node names come off the network): jansson
 * refuses invalid UTF-8, so such bytes become '?'. */
static json_t *jstr(const char *s) {
  json_t *v = json_string(s ? s : "");
  if (v) return v;
  char *c = strdup(s);
  if (!c) return NULL;
  for (char *p = c; *p; p++)
    if ((unsigned char)*p >= 0x80) *p = '?';
  v = json_string(c);
  free(c);
  return v;
}

static json_t *json_failure(const ea__job_failure *f) {
  return json_pack("{s:I, s:i, s:o, s:o, s:o, s:s, s:o}", "gen", (json_int_t)f->gen, "rank",
                   (int)f->rank, "node", jstr(f->node), "exit_code",
                   f->has_code ? json_integer(f->code) : json_null(), "signal",
                   f->has_code ? json_null() : json_integer(f->signal), "source",
                   f->source == EA__JOB_SRC_ERROR_FILE ? "error_file"
                   : f->source == EA__JOB_SRC_STDERR   ? "stderr"
                                                       : "none",
                   "message", jstr(f->message));
}

json_t *ea__job_status(const ea__job *J) {
  const char *state = !J->ended ? "running" : J->kind == EA__JOB_SUCCESS ? "finished" : "failed";
  const ea__job_failure *f = J->ended && J->end_has_failure ? &J->end_fail
                             : J->have_fail                 ? &J->fail
                                                            : NULL;
  json_t *churn =
      json_pack("{s:i, s:o, s:I}", "count", (int)J->churn, "reason",
                jstr(J->churn ? J->churn_why : ""), "wait_ms", (json_int_t)J->churn_wait);
  return json_pack("{s:s, s:o, s:s, s:o, s:o, s:o, s:I, s:o, s:o, s:b, s:o}", "protocol",
                   ea__mode_name(J->o.mode), "command", jstr(J->command), "state", state, "outcome",
                   J->ended ? json_string(ea__job_kind_str(J->kind)) : json_null(), "exit_code",
                   J->ended ? json_integer(J->code) : json_null(), "reason",
                   jstr(J->ended ? J->reason : ""), "restarts", (json_int_t)J->restarts,
                   "max_restarts",
                   J->o.mode == EA__MODE_TORCHRUN ? json_integer(J->o.max_restarts) : json_null(),
                   "failure", f ? json_failure(f) : json_null(), "done_here", J->done_gen != 0,
                   "churn", churn ? churn : json_null());
}

static void timer_closed(uv_handle_t *h) {
  ea__job *J = h->data;
  free(J->members);
  free(J->done_ids);
  free(J->command);
  free(J->name);
  free(J);
}

void ea__job_free(ea__job *J) {
  if (!J || J->closing) return;
  J->closing = true;
  uv_close((uv_handle_t *)&J->timer, timer_closed);
}
