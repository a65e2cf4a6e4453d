/* smoke.c — the agent's side of `elastic-agent run --smoke N` (smoke.h says
 * what a smoke run is and checks): the hooks the loop calls to record what
 * it saw, the program's deadline and the restore into a fresh generation.
 * The command line's side — the job's keys before the run, the checks and
 * the report after it — is agent/cli/smoke.c.
 */
#include "smoke.h"

#include "agent_int.h"

#include "ea_log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- the agent's hooks --------------------------------------------------------------- */

static void deadline_cb(uv_timer_t *t) {
  ea__agent *a = t->data;
  ea__smoke *s = a->o->smoke;
  s->deadline_hit = true;
  s->failures_at_deadline = a->worker_failures;
  if (a->phase != EA__PHASE_RUNNING) return;
  ea_log(EA_LOG_INFO, "smoke", "smoke run: %" PRIu64 " s elapsed; draining this node as on SIGTERM",
         s->n);
  ea__agent_begin_drain(a, "smoke run over", false);
}

void ea__smoke_start(ea__agent *a) {
  ea__smoke *s = a->o->smoke;
  s->start_ms = ea__agent_mono_ms();
  snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s", a->ckpt_dir);
  ea_log(EA_LOG_INFO, "smoke",
         s->builtin ? "smoke run: %" PRIu64 " steps, one checkpoint into %s"
                    : "smoke run: the program for %" PRIu64 " s (checkpoint.dir %s)",
         s->n, a->ckpt_dir);
  if (s->builtin) return;
  uv_timer_init(&a->loop, &s->deadline);
  s->deadline.data = a;
  s->timer_open = true;
  uv_timer_start(&s->deadline, deadline_cb, s->n * 1000u, 0);
}

void ea__smoke_step(ea__smoke *s, uint32_t worker, uint64_t step, double loss, uint32_t world) {
  if (worker != 0) return;
  uint64_t now = ea__agent_mono_ms();
  if (!s->have_first) {
    s->have_first = true;
    s->first_step = step;
    s->first_loss = loss;
    s->first_ms = now;
  }
  s->last_step = step;
  s->last_loss = loss;
  s->last_ms = now;
  s->world = world;
}

void ea__smoke_committed(ea__smoke *s, const char *name, uint64_t bytes, double seconds) {
  s->committed = true;
  snprintf(s->ck_name, sizeof s->ck_name, "%s", name);
  s->ck_bytes = bytes;
  s->ck_seconds = seconds;
}

static void reform_cb(uv_timer_t *t) {
  ea__agent *a = t->data;
  /* -EAGAIN on the members: only the controller forms generations. */
  ea__agent_do1(a,
                (ea__intent){.kind = EA__DO_REFORM, .text = "smoke run: restore the checkpoint"});
}

void ea__smoke_restore(ea__agent *a, uint64_t gen, uint64_t step) {
  ea__smoke *s = a->o->smoke;
  if (!s || !s->builtin || s->restore_asked) return;
  s->restore_asked = true;
  s->restore_from_gen = gen;
  snprintf(s->restore_spec, sizeof s->restore_spec, "%" PRIu64, step);
  s->before_agree = a->wpn > 0;
  if (a->wpn > 0 && a->w) {
    s->before_digest = a->w[0].digest;
    for (uint32_t k = 1; k < a->wpn; k++)
      if (a->w[k].digest != s->before_digest) s->before_agree = false;
  }
  ea_log(EA_LOG_INFO, "smoke",
         "smoke run: restoring step-%" PRIu64 " into a fresh generation (params digest %016" PRIx64
         " here now); this node offers no live state",
         step, s->before_digest);
  /* The new generation is asked for from the loop, not from inside the
   * job's judgement that called us. */
  uv_timer_init(&a->loop, &s->deadline);
  s->deadline.data = a;
  s->timer_open = true;
  uv_timer_start(&s->deadline, reform_cb, 0, 0);
}

void ea__smoke_generation(ea__smoke *s, uint64_t gen64, bool has_sync, uint32_t world) {
  if (!s->restore_asked || s->restore_gen) return;
  s->restore_gen = gen64;
  s->restore_synced_live = has_sync;
  s->restore_world = world;
}

void ea__smoke_loaded(ea__smoke *s, const char *name, uint64_t digest) {
  if (!s->restore_asked) return;
  s->loaded_here = true;
  snprintf(s->loaded_name, sizeof s->loaded_name, "%s", name);
  s->loaded_digest = digest;
}

void ea__smoke_close(ea__agent *a) {
  ea__smoke *s = a->o->smoke;
  if (s->closed) return;
  s->closed = true;
  if (s->timer_open) {
    uv_timer_stop(&s->deadline);
    uv_close((uv_handle_t *)&s->deadline, NULL);
    s->timer_open = false;
  }
  if (!s->deadline_hit) s->failures_at_deadline = a->worker_failures;
  s->wpn = a->wpn;
  s->digests_agree = a->wpn > 0;
  if (a->wpn > 0 && a->w) {
    s->next_step = a->w[0].next_step;
    s->digest = a->w[0].digest;
    for (uint32_t k = 1; k < a->wpn; k++)
      if (a->w[k].digest != s->digest || a->w[k].next_step != s->next_step)
        s->digests_agree = false;
  }
  s->gens = a->gens_committed;
  s->failures = a->worker_failures;
  s->restarts = a->worker_restarts;
  /* The failing rank, its exit code or signal and message: the job's own. */
  json_t *j = a->job ? ea__job_status(a->job) : NULL;
  json_t *f = j ? json_object_get(j, "failure") : NULL;
  if (json_is_object(f)) {
    json_t *code = json_object_get(f, "exit_code"), *sig = json_object_get(f, "signal");
    const char *msg = json_string_value(json_object_get(f, "message"));
    const char *node = json_string_value(json_object_get(f, "node"));
    char how[64];
    if (json_is_integer(code))
      snprintf(how, sizeof how, "exited with code %" JSON_INTEGER_FORMAT, json_integer_value(code));
    else
      snprintf(how, sizeof how, "killed by signal %" JSON_INTEGER_FORMAT,
               json_is_integer(sig) ? json_integer_value(sig) : 0);
    snprintf(s->failure, sizeof s->failure, "rank %" JSON_INTEGER_FORMAT " on %s %s: %.300s",
             json_integer_value(json_object_get(f, "rank")), node ? node : "?", how,
             msg ? msg : "");
  }
  json_decref(j);
  if (a->out) {
    s->have_out = true;
    uint64_t nl = 0, dropped = 0;
    ea__out_stats(a->out, &s->out_lines, &nl, &dropped);
  }
}
