/* resources.c — what the agents hold while the faults go on: resident
 * memory and open file descriptors of every agent process, sampled from
 * /proc every RS_PERIOD_MS, and the `resources_flat` invariant over them.
 *
 * A leak shows as growth that does not level off: connections never
 * closed after a partition, a buffer per reconnect, a timer handle per
 * generation.  A short run cannot tell that from a process filling its
 * caches, so a process is judged only when it lived RS_JUDGE_MS past a
 * warm-up of RS_WARMUP_MS (its baseline is its first sample after the
 * warm-up); `make chaos` (two minutes) judges nothing and says so, a soak
 * (`make soak`, 30 minutes) judges the agents that were not restarted.
 * Growth from the baseline to the last sample is allowed up to RS_RSS_SLACK
 * bytes or a quarter of the baseline, whichever is larger, and RS_FD_SLACK
 * descriptors (a member's control connection, a pending push-pull).  The
 * workers are not sampled: the built-in trainer allocates its state once,
 * and the agent is the process that lives through every fault. */
#include "chaos.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_PERIOD_MS 5000
#define RS_WARMUP_MS 60000
#define RS_JUDGE_MS (5 * 60000)
#define RS_RSS_SLACK (16ull << 20)
#define RS_FD_SLACK 16

static int64_t last_sample;

/* VmRSS of pid in bytes; 0 when it cannot be read (the process is gone). */
static uint64_t rss_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024;
}

/* Open descriptors of pid; -1 when they cannot be counted. */
static int fds_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static ea__chaos_rsrc *proc_of(ea__chaos_run *r, const ea__chaos_node *n) {
  for (size_t i = 0; i < r->nrsrc; i++)
    if (r->rsrc[i].pid == n->pid && !strcmp(r->rsrc[i].node, n->name)) return &r->rsrc[i];
  if (r->nrsrc == r->caprsrc) {
    size_t cap = r->caprsrc ? 2 * r->caprsrc : 32;
    ea__chaos_rsrc *p = realloc(r->rsrc, cap * sizeof *p);
    if (!p) return NULL;
    r->rsrc = p;
    r->caprsrc = cap;
  }
  ea__chaos_rsrc *x = &r->rsrc[r->nrsrc++];
  memset(x, 0, sizeof *x);
  snprintf(x->node, sizeof x->node, "%s", n->name);
  x->pid = n->pid;
  x->t_start = n->start_ms;
  return x;
}

void ea__chaos_rsrc_tick(ea__chaos_run *r) {
  int64_t now = ea__chaos_now_ms();
  if (last_sample && now - last_sample < RS_PERIOD_MS) return;
  last_sample = now;
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (!ea__chaos_node_running(n)) continue;
    uint64_t rss = rss_of(n->pid);
    int fds = fds_of(n->pid);
    if (!rss || fds < 0) continue;
    ea__chaos_rsrc *x = proc_of(r, n);
    if (!x) continue;
    x->samples++;
    if (rss > x->rss_max) x->rss_max = rss;
    if ((uint32_t)fds > x->fd_max) x->fd_max = (uint32_t)fds;
    if (!x->have_base && now - x->t_start >= RS_WARMUP_MS) {
      x->have_base = true;
      x->t_base = now;
      x->rss_base = rss;
      x->fd_base = (uint32_t)fds;
    }
    x->t_last = now;
    x->rss_last = rss;
    x->fd_last = (uint32_t)fds;
  }
}

bool ea__chaos_rsrc_judged(const ea__chaos_rsrc *x) {
  return x->have_base && x->t_last - x->t_base >= RS_JUDGE_MS;
}

void ea__chaos_rsrc_check(ea__chaos_run *r) {
  for (size_t i = 0; i < r->nrsrc; i++) {
    const ea__chaos_rsrc *x = &r->rsrc[i];
    if (!ea__chaos_rsrc_judged(x)) continue;
    uint64_t slack = x->rss_base / 4 > RS_RSS_SLACK ? x->rss_base / 4 : RS_RSS_SLACK;
    double mins = (double)(x->t_last - x->t_base) / 60000.0;
    if (x->rss_last > x->rss_base + slack)
      ea__chaos_violate(r, EA__I_RESOURCES,
                        "%s (pid %d): resident memory grew from %.1f to %.1f MiB in %.1f min "
                        "(allowed: +%.1f MiB)",
                        x->node, (int)x->pid, (double)x->rss_base / 1048576.0,
                        (double)x->rss_last / 1048576.0, mins, (double)slack / 1048576.0);
    if (x->fd_last > x->fd_base + RS_FD_SLACK)
      ea__chaos_violate(r, EA__I_RESOURCES,
                        "%s (pid %d): open descriptors grew from %u to %u in %.1f min "
                        "(allowed: +%d)",
                        x->node, (int)x->pid, x->fd_base, x->fd_last, mins, RS_FD_SLACK);
  }
}

size_t ea__chaos_rsrc_njudged(const ea__chaos_run *r) {
  size_t n = 0;
  for (size_t i = 0; i < r->nrsrc; i++) n += ea__chaos_rsrc_judged(&r->rsrc[i]);
  return n;
}

const char *ea__chaos_rsrc_skip(const ea__chaos_run *r) {
  static char why[200];
  if (ea__chaos_rsrc_njudged(r)) return NULL;
  snprintf(why, sizeof why,
           "no agent process lived %d s past its %d s warm-up (%zu sampled): a soak judges this",
           RS_JUDGE_MS / 1000, RS_WARMUP_MS / 1000, r->nrsrc);
  return why;
}

void ea__chaos_rsrc_json(const ea__chaos_run *r, ea_sb *s) {
  ea_sb_printf(s,
               "\"resources\": {\"period_ms\": %d, \"warmup_ms\": %d, \"judge_ms\": %d, "
               "\"processes\": [",
               RS_PERIOD_MS, RS_WARMUP_MS, RS_JUDGE_MS);
  for (size_t i = 0; i < r->nrsrc; i++) {
    const ea__chaos_rsrc *x = &r->rsrc[i];
    ea_sb_printf(s, "%s{\"node\": ", i ? ", " : "");
    ea_sb_json_str(s, x->node);
    ea_sb_printf(s,
                 ", \"pid\": %d, \"samples\": %u, \"judged\": %s, \"rss_base\": %" PRIu64
                 ", \"rss_last\": %" PRIu64 ", \"rss_max\": %" PRIu64
                 ", \"fds_base\": %u, \"fds_last\": %u, \"fds_max\": %u, \"judged_s\": %.0f}",
                 (int)x->pid, x->samples, ea__chaos_rsrc_judged(x) ? "true" : "false", x->rss_base,
                 x->rss_last, x->rss_max, x->fd_base, x->fd_last, x->fd_max,
                 x->have_base ? (double)(x->t_last - x->t_base) / 1000.0 : 0.0);
  }
  ea_sb_puts(s, "]}");
}

void ea__chaos_rsrc_summary(const ea__chaos_run *r, ea_sb *s) {
  uint64_t rss_max = 0;
  uint32_t fd_max = 0;
  double worst_rss = 0;
  int worst_fd = 0;
  const char *wr = "", *wf = "";
  for (size_t i = 0; i < r->nrsrc; i++) {
    const ea__chaos_rsrc *x = &r->rsrc[i];
    if (x->rss_max > rss_max) rss_max = x->rss_max;
    if (x->fd_max > fd_max) fd_max = x->fd_max;
    if (!ea__chaos_rsrc_judged(x)) continue;
    double g = ((double)x->rss_last - (double)x->rss_base) / 1048576.0;
    if (g > worst_rss || !wr[0]) worst_rss = g, wr = x->node;
    int gf = (int)x->fd_last - (int)x->fd_base;
    if (gf > worst_fd || !wf[0]) worst_fd = gf, wf = x->node;
  }
  ea_sb_printf(s,
               "resources: %zu agent processes sampled every %d s, %zu judged (lived %d s past "
               "a %d s warm-up); largest RSS %.1f MiB, most descriptors %u",
               r->nrsrc, RS_PERIOD_MS / 1000, ea__chaos_rsrc_njudged(r), RS_JUDGE_MS / 1000,
               RS_WARMUP_MS / 1000, (double)rss_max / 1048576.0, fd_max);
  if (wr[0])
    ea_sb_printf(s, "; growth after the warm-up at most %+.1f MiB (%s), %+d descriptors (%s)",
                 worst_rss, wr, worst_fd, wf);
  ea_sb_puts(s, "\n");
}
