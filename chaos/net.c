/* net.c — real partitions: one network namespace per slot, veth pairs into
 * a bridge namespace, and nftables rules on each receiver's input chain.
 *
 *   ns eac<id>b:  br0 ── p1 … pN+1  (veth ends)
 *   ns eac<id>s<k>:  eth0 = 198.18.<x>.<10+k>/24, lo; table inet chaos,
 *                    chain input (hook input, policy accept)
 *
 * Addresses come from the benchmarking range 198.18.0.0/15, one /24 per run
 * (/work/shared/TESTING.md).  A partition drops by source address on the
 * *receiver's* input chain: dropping in the sender's output chain makes
 * sendto fail with EPERM, which no real network does.  Loss is nftables'
 * `numgen random mod 100 < P drop` on every input chain.  There is no delay:
 * this kernel has no sch_netem (the report says so).  Each rules change is
 * one `nft -f` file per namespace (flush + new rules), so a namespace never
 * sees half a rule set.
 */
#include "chaos.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* ip and nft answer in milliseconds; 10 s only expires on a wedged system. */
#define NET_CMD_TIMEOUT_MS 10000

static int ip_cmd(ea__chaos_run *r, char *err, size_t errlen, const char *const *args) {
  char *argv[24];
  size_t n = 0;
  for (; args[n] && n < 23; n++) argv[n] = (char *)args[n];
  argv[n] = NULL;
  int rc = ea__chaos_cmd(NULL, argv, r->log_path, NET_CMD_TIMEOUT_MS, NULL, 0);
  if (rc != 0) {
    char line[400] = "";
    size_t off = 0;
    for (size_t i = 0; i < n && off < sizeof line - 1; i++)
      off += (size_t)snprintf(line + off, sizeof line - off, "%s%s", i ? " " : "", argv[i]);
    if (err) snprintf(err, errlen, "`%s` failed (%d); see %s", line, rc, r->log_path);
    return rc < 0 ? rc : -EIO;
  }
  return 0;
}

int ea__chaos_net_up(ea__chaos_run *r, char *err, size_t errlen) {
  snprintf(r->ns_br, sizeof r->ns_br, "eac%db", r->runid);
  int x = r->subnet;
  for (int s = 1; s <= r->nslots; s++) {
    snprintf(r->ns[s], sizeof r->ns[s], "eac%ds%d", r->runid, s);
    snprintf(r->ip[s], sizeof r->ip[s], "198.%u.%u.%u", 18u + x / 256u, x % 256u,
             10u + (unsigned)s % 64u);
  }
  r->net_up = true; /* from here on teardown removes whatever exists */
  int rc;
  const char *a1[] = {"ip", "netns", "add", r->ns_br, NULL};
  if ((rc = ip_cmd(r, err, errlen, a1))) return rc;
  const char *a2[] = {"ip", "-n", r->ns_br, "link", "add", "br0", "type", "bridge", NULL};
  if ((rc = ip_cmd(r, err, errlen, a2))) return rc;
  const char *a3[] = {"ip", "-n", r->ns_br, "link", "set", "br0", "up", NULL};
  if ((rc = ip_cmd(r, err, errlen, a3))) return rc;
  char nft_path[CH_PATH_MAX + 16];
  snprintf(nft_path, sizeof nft_path, "%s/nft-init", r->o.work);
  const char *init =
      "add table inet chaos\n"
      "add chain inet chaos input { type filter hook input priority 0 ; policy accept ; }\n";
  if ((rc = ea__chaos_write_file(nft_path, init, strlen(init)))) {
    snprintf(err, errlen, "write %s: %s", nft_path, strerror(-rc));
    return rc;
  }
  for (int s = 1; s <= r->nslots; s++) {
    char port[16], cidr[32];
    snprintf(port, sizeof port, "p%d", s);
    snprintf(cidr, sizeof cidr, "%s/24", r->ip[s]);
    const char *b1[] = {"ip", "netns", "add", r->ns[s], NULL};
    if ((rc = ip_cmd(r, err, errlen, b1))) return rc;
    const char *b2[] = {"ip",   "-n",   r->ns_br, "link", "add",   port,     "type",
                        "veth", "peer", "name",   "eth0", "netns", r->ns[s], NULL};
    if ((rc = ip_cmd(r, err, errlen, b2))) return rc;
    const char *b3[] = {"ip", "-n", r->ns_br, "link", "set", port, "master", "br0", "up", NULL};
    if ((rc = ip_cmd(r, err, errlen, b3))) return rc;
    const char *b4[] = {"ip", "-n", r->ns[s], "addr", "add", cidr, "dev", "eth0", NULL};
    if ((rc = ip_cmd(r, err, errlen, b4))) return rc;
    const char *b5[] = {"ip", "-n", r->ns[s], "link", "set", "eth0", "up", NULL};
    if ((rc = ip_cmd(r, err, errlen, b5))) return rc;
    const char *b6[] = {"ip", "-n", r->ns[s], "link", "set", "lo", "up", NULL};
    if ((rc = ip_cmd(r, err, errlen, b6))) return rc;
    char *nf[] = {"nft", "-f", nft_path, NULL};
    rc = ea__chaos_cmd(r->ns[s], nf, r->log_path, NET_CMD_TIMEOUT_MS, NULL, 0);
    if (rc != 0) {
      snprintf(err, errlen, "nft in %s failed (%d): is nftables installed? see %s", r->ns[s], rc,
               r->log_path);
      return -EIO;
    }
  }
  /* Reachability: every slot pings slot 1 once, so a broken bridge is a
   * setup error rather than a cluster that never forms. */
  for (int s = 2; s <= r->nslots; s++) {
    char *pa[] = {"ping", "-c", "1", "-W", "2", r->ip[1], NULL};
    int prc = ea__chaos_cmd(r->ns[s], pa, r->log_path, 5000, NULL, 0);
    if (prc == 127) break; /* no ping binary: the cluster will tell */
    if (prc != 0) {
      snprintf(err, errlen, "%s cannot reach %s over the bridge (ping: %d)", r->ns[s], r->ip[1],
               prc);
      return -EHOSTUNREACH;
    }
  }
  return 0;
}

void ea__chaos_net_down(ea__chaos_run *r) {
  if (!r->net_up) return;
  for (int s = 1; s <= r->nslots; s++) {
    if (!r->ns[s][0]) continue;
    char *a[] = {"ip", "netns", "del", r->ns[s], NULL};
    ea__chaos_cmd(NULL, a, r->log_path, NET_CMD_TIMEOUT_MS, NULL, 0);
  }
  if (r->ns_br[0]) {
    char *a[] = {"ip", "netns", "del", r->ns_br, NULL};
    ea__chaos_cmd(NULL, a, r->log_path, NET_CMD_TIMEOUT_MS, NULL, 0);
  }
  r->net_up = false;
}

int ea__chaos_net_rules(ea__chaos_run *r, const uint32_t *drop_from, int loss_pct) {
  int bad = 0;
  for (int s = 1; s <= r->nslots; s++) {
    ea_sb f = {0};
    ea_sb_puts(&f, "flush chain inet chaos input\n");
    uint32_t m = drop_from ? drop_from[s] : 0;
    if (m) {
      ea_sb_puts(&f, "add rule inet chaos input ip saddr { ");
      bool first = true;
      for (int t = 1; t <= r->nslots; t++)
        if (m & (1u << t)) {
          ea_sb_printf(&f, "%s%s", first ? "" : ", ", r->ip[t]);
          first = false;
        }
      ea_sb_puts(&f, " } drop\n");
    }
    if (loss_pct > 0)
      ea_sb_printf(&f, "add rule inet chaos input numgen random mod 100 < %d drop\n", loss_pct);
    char path[CH_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/nft-s%d", r->o.work, s);
    int rc = ea__chaos_write_file(path, f.buf ? f.buf : "", f.len);
    ea__chaos_logf(r, "nft %s:\n%s", r->ns[s], f.buf ? f.buf : "");
    ea_sb_free(&f);
    if (rc == 0) {
      char *a[] = {"nft", "-f", path, NULL};
      rc = ea__chaos_cmd(r->ns[s], a, r->log_path, NET_CMD_TIMEOUT_MS, NULL, 0);
    }
    if (rc != 0) bad = rc < 0 ? rc : -EIO;
  }
  return bad;
}

int ea__chaos_net_heal(ea__chaos_run *r) {
  return ea__chaos_net_rules(r, NULL, 0);
}
