/* ea_log.h — structured log lines, text or JSON, one per event.
 *
 *   ea_log(EA_LOG_INFO, "member", "name=%s state=%s", name, st);
 *
 * Text:  2026-11-30T01:02:03.456Z info  member name=n1 state=dead
 * JSON:  {"ts":"2026-…","level":"info","node":"n1","job":"j","event":"member",
 *         "msg":"name=n1 state=dead"}
 *
 * ea_logkv adds typed fields to the JSON object (progress lines carry
 * "generation", "world", "step", "loss", "steps_per_s").
 *
 * The `event` is a short fixed word (member, election, generation, ckpt,
 * alert, …) so operators can grep or filter on it.  Logging is synchronous
 * to stderr or a file opened O_APPEND: lines are short and a line-buffered
 * write of a few hundred bytes does not stall the loop in practice.
 */
#ifndef EA_LOG_H
#define EA_LOG_H

#include <stdarg.h>

typedef enum { EA_LOG_DEBUG = 0, EA_LOG_INFO, EA_LOG_WARN, EA_LOG_ERROR } ea_log_level;

/* level: "debug|info|warn|error"; format: "text|json"; file: NULL or "" for
 * stderr.  Returns 0 or a negative errno (bad level/format, open failure). */
int ea_log_setup(const char *level, const char *format, const char *file);
/* A prefix added to every line (e.g. the node name); copied. */
void ea_log_set_node(const char *name);
/* The job (experiment.name): a "job" field of every JSON line after it is
 * set (text lines carry it in the agent's `listen` line); copied. */
void ea_log_set_job(const char *name);
void ea_log(ea_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ea_vlog(ea_log_level level, const char *event, const char *fmt, va_list ap);

/* A typed field of a structured line: in JSON it is a member of the line's
 * object ("step":120,"loss":2.31), so a log shipper can filter and plot it
 * without parsing msg; a text line shows only msg, which should carry the
 * same values for people.  A non-finite EA_KV_F is written as null. */
typedef struct {
  const char *key; /* a fixed word: step, loss, generation, world, … */
  char type;       /* 'u' unsigned, 'i' signed, 'f' double, 's' string */
  union {
    unsigned long long u;
    long long i;
    double f;
    const char *s;
  } v;
} ea_log_kv;
#define EA_KV_U(k, x) ((ea_log_kv){.key = (k), .type = 'u', .v.u = (unsigned long long)(x)})
#define EA_KV_I(k, x) ((ea_log_kv){.key = (k), .type = 'i', .v.i = (long long)(x)})
#define EA_KV_F(k, x) ((ea_log_kv){.key = (k), .type = 'f', .v.f = (double)(x)})
#define EA_KV_S(k, x) ((ea_log_kv){.key = (k), .type = 's', .v.s = (x)})
/* ea_log with n fields (kv may be NULL when n is 0).  Keys must not be one
 * of the line's own (ts, level, node, job, event, msg). */
void ea_logkv(ea_log_level level, const char *event, const ea_log_kv *kv, unsigned n,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int ea_log_enabled(ea_log_level level);

#endif
