/* Structured logging: one line per event, text for people, JSON for log
 * shippers.  Kept deliberately small: no buffering beyond one line, so a
 * crash never loses the line that explains it. */
#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static ea_log_level g_level = EA_LOG_INFO;
static int g_json;
static int g_fd = 2;
static char g_node[64];
static char g_job[64];

static const char *level_names[] = {"debug", "info", "warn", "error"};

int ea_log_setup(const char *level, const char *format, const char *file) {
  int lv = -1;
  for (int i = 0; i < 4; i++)
    if (level && strcmp(level, level_names[i]) == 0) lv = i;
  if (lv < 0) return -EINVAL;
  if (!format || (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)) return -EINVAL;
  if (file && *file) {
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    if (g_fd > 2) close(g_fd);
    g_fd = fd;
  }
  g_level = (ea_log_level)lv;
  g_json = strcmp(format, "json") == 0;
  return 0;
}

void ea_log_set_node(const char *name) {
  snprintf(g_node, sizeof g_node, "%s", name ? name : "");
}

void ea_log_set_job(const char *name) {
  snprintf(g_job, sizeof g_job, "%s", name ? name : "");
}

int ea_log_enabled(ea_log_level level) {
  return level >= g_level;
}

/* Append s to out as a JSON string body (quotes and control bytes escaped). */
static size_t json_escape(char *out, size_t cap, size_t pos, const char *s) {
  for (; *s && pos + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[pos++] = '\\';
      out[pos++] = (char)c;
    } else if (c < 0x20 || c == 0x7f) {
      pos += (size_t)snprintf(out + pos, cap - pos, "\\u%04x", c);
    } else {
      out[pos++] = (char)c;
    }
  }
  return pos;
}

/* Append s to out for a text line: control bytes (newline, carriage
 * return, tab, escape sequences, DEL) are written as \n, \r, \t or \xNN,
 * so that no value — a member's name from the network, a program's output,
 * a path — can end the line early and forge the next one, or drive the
 * terminal it is shown on.  (The gossip decoder refuses such names too;
 * this is the last line of defence for everything else.)  Stops 8 bytes
 * short of cap, which leaves room for the separators and the newline. */
static size_t text_escape(char *out, size_t cap, size_t pos, const char *s) {
  for (; *s && pos + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n' || c == '\r' || c == '\t') {
      out[pos++] = '\\';
      out[pos++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
    } else if (c < 0x20 || c == 0x7f) {
      pos += (size_t)snprintf(out + pos, cap - pos, "\\x%02x", c);
    } else {
      out[pos++] = (char)c;
    }
  }
  return pos;
}

static void vlog_kv(ea_log_level level, const char *event, const ea_log_kv *kv, unsigned nkv,
                    const char *fmt, va_list ap) {
  if (level < g_level) return;
  char msg[1024], line[2300], ts[40];
  vsnprintf(msg, sizeof msg, fmt, ap);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof ts - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
  size_t pos;
  if (g_json) {
    pos = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"node\":\"", ts,
                           level_names[level]);
    pos = json_escape(line, sizeof line, pos, g_node);
    if (*g_job) {
      pos += (size_t)snprintf(line + pos, sizeof line - pos, "\",\"job\":\"");
      pos = json_escape(line, sizeof line, pos, g_job);
    }
    pos += (size_t)snprintf(line + pos, sizeof line - pos, "\",\"event\":\"%s\"", event);
    for (unsigned i = 0; i < nkv && pos + 64 < sizeof line; i++) {
      const ea_log_kv *f = &kv[i];
      pos += (size_t)snprintf(line + pos, sizeof line - pos, ",\"%s\":", f->key);
      switch (f->type) {
        case 'u':
          pos += (size_t)snprintf(line + pos, sizeof line - pos, "%llu", f->v.u);
          break;
        case 'i':
          pos += (size_t)snprintf(line + pos, sizeof line - pos, "%lld", f->v.i);
          break;
        case 'f':
          /* %.17g reads back as the same double; JSON has no NaN or inf. */
          pos +=
              (size_t)(isfinite(f->v.f) ? snprintf(line + pos, sizeof line - pos, "%.17g", f->v.f)
                                        : snprintf(line + pos, sizeof line - pos, "null"));
          break;
        default:
          line[pos++] = '"';
          pos = json_escape(line, sizeof line, pos, f->v.s ? f->v.s : "");
          line[pos++] = '"';
          break;
      }
    }
    pos += (size_t)snprintf(line + pos, sizeof line - pos, ",\"msg\":\"");
    pos = json_escape(line, sizeof line, pos, msg);
    pos += (size_t)snprintf(line + pos, sizeof line - pos, "\"}\n");
  } else {
    pos = (size_t)snprintf(line, sizeof line, "%s %-5s ", ts, level_names[level]);
    pos = text_escape(line, sizeof line, pos, g_node);
    if (*g_node) line[pos++] = ' ';
    pos = text_escape(line, sizeof line, pos, event);
    line[pos++] = ' ';
    pos = text_escape(line, sizeof line, pos, msg);
    line[pos++] = '\n';
  }
  if (pos >= sizeof line) pos = sizeof line - 1, line[pos - 1] = '\n';
  ssize_t w = write(g_fd, line, pos);
  (void)w; /* nowhere left to report a failed log write */
}

void ea_vlog(ea_log_level level, const char *event, const char *fmt, va_list ap) {
  vlog_kv(level, event, NULL, 0, fmt, ap);
}

void ea_logkv(ea_log_level level, const char *event, const ea_log_kv *kv, unsigned n,
              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog_kv(level, event, kv, n, fmt, ap);
  va_end(ap);
}

void ea_log(ea_log_level level, const char *event, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ea_vlog(level, event, fmt, ap);
  va_end(ap);
}
