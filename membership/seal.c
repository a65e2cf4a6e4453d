/* The cluster-key seal around every gossip packet and push-pull frame:
 * libsodium's XChaCha20-Poly1305 (IETF AEAD) with a random 24-byte nonce per
 * message.  XChaCha's nonce is long enough that random nonces never collide
 * in practice, so agents need no nonce counter, no state across restarts and
 * no coordination.
 *
 * Layout (ea_wire.h): 0xEB | nonce(24) | AEAD(plaintext after its 0xEA) + tag.
 * The plaintext's magic byte is implied by the sealed one and not sent, which
 * is why a sealed message is exactly len + 40 bytes; the 0xEB byte is bound in
 * as associated data.  Opening restores the 0xEA, so the decoders always see
 * a plaintext packet.  Any failure to open — short input, wrong magic, wrong
 * key, a flipped bit — is the same -EBADMSG: the caller counts and drops it.
 *
 * The key is 32 bytes shared by the whole cluster.  Make one with
 *     head -c32 /dev/urandom | xxd -p -c64 > cluster.key
 * and give every agent the same file (64 hex characters; 32 raw bytes are
 * accepted too), mode 0600: a key file that group or others can read is
 * refused (check_mode below).
 */
#include "ea_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_BYTES crypto_aead_xchacha20poly1305_ietf_ABYTES

_Static_assert(1 + NONCE_BYTES + TAG_BYTES == EA_WIRE_SEAL_OVERHEAD,
               "EA_WIRE_SEAL_OVERHEAD must match libsodium's nonce and tag sizes");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == EA_KEY_BYTES, "key size");

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_sodium_rc = -1;

static void sodium_setup(void) {
  g_sodium_rc = sodium_init() < 0 ? -1 : 0;
}

static int ready(void) {
  pthread_once(&g_once, sodium_setup);
  return g_sodium_rc;
}

int ea_wire_seal(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                 size_t cap, size_t *outlen) {
  if (len < 1 || in[0] != EA_WIRE_MAGIC_PLAIN) return -EINVAL;
  if (cap < len || cap - len < EA_WIRE_SEAL_OVERHEAD - 1) return -EMSGSIZE;
  if (ready()) return -EIO;
  out[0] = EA_WIRE_MAGIC_SEALED;
  randombytes_buf(out + 1, NONCE_BYTES);
  unsigned long long clen = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out + 1 + NONCE_BYTES, &clen, in + 1, len - 1, out, 1,
                                             NULL, out + 1, key);
  *outlen = 1 + NONCE_BYTES + (size_t)clen;
  return 0;
}

int ea_wire_open(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                 size_t cap, size_t *outlen) {
  if (len < EA_WIRE_SEAL_OVERHEAD - 1 || in[0] != EA_WIRE_MAGIC_SEALED) return -EBADMSG;
  size_t ptlen = len - (EA_WIRE_SEAL_OVERHEAD - 1); /* plaintext with its 0xEA */
  if (cap < ptlen) return -EBADMSG;
  if (ready()) return -EBADMSG;
  unsigned long long mlen = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(out + 1, &mlen, NULL, in + 1 + NONCE_BYTES,
                                                 len - 1 - NONCE_BYTES, in, 1, in + 1, key) != 0)
    return -EBADMSG;
  out[0] = EA_WIRE_MAGIC_PLAIN;
  *outlen = 1 + (size_t)mlen;
  return 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Who may read the key, as ssh decides for a private key: nobody but the
 * agent's own user.  Mode bits for others are always refused.  Group read
 * is refused too, with one exception that is how a non-root service reads
 * a key it must not be able to change: the file is owned by root, the agent
 * is not root, and the file's group is one of the agent's (systemd's
 * root:elastic-agent 0640, Kubernetes' secret with fsGroup, deploy/).  The
 * message names the mode and what to do; the check is on the open file
 * (fstat), so a swap between the check and the read changes nothing. */
static int check_mode(int fd, const char **err) {
  static __thread char msg[200];
  struct stat st;
  if (fstat(fd, &st) < 0) {
    *err = "key file: cannot stat";
    return -errno;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = "key file: not a regular file";
    return -EINVAL;
  }
  unsigned mode = (unsigned)(st.st_mode & 07777);
  bool others = (mode & 0007) != 0;
  bool group = (mode & 0070) != 0;
  if (group && !others && st.st_uid == 0 && geteuid() != 0 && !(mode & 0020)) {
    bool ours = st.st_gid == getegid();
    gid_t g[64];
    int n = getgroups(64, g);
    for (int i = 0; i < n && !ours; i++) ours = g[i] == st.st_gid;
    if (ours) group = false;
  }
  if (!others && !group) return 0;
  snprintf(msg, sizeof msg,
           "key file: mode %04o lets %s access it; refused as ssh refuses such a private key "
           "(chmod 600 it, owned by the agent's user)",
           mode, others ? "others" : "the group");
  *err = msg;
  return -EPERM;
}

int ea_wire_load_key(const char *path, uint8_t key[EA_KEY_BYTES], const char **err) {
  const char *dummy;
  if (!err) err = &dummy;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    *err = e == ENOENT ? "key file: not found" : "key file: cannot open";
    return -e;
  }
  int mrc = check_mode(fd, err);
  if (mrc < 0) {
    close(fd);
    return mrc;
  }
  /* A valid file is at most 64 hex characters plus a little whitespace;
   * read a bit more than that so "too long" is recognised, not truncated. */
  uint8_t buf[256], tmp[EA_KEY_BYTES];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      *err = "key file: read error";
      return -e;
    }
    if (r == 0 || (n += (size_t)r) == sizeof buf) break;
  }
  close(fd);

  int rc = 0;
  if (n == EA_KEY_BYTES) {
    memcpy(key, buf, EA_KEY_BYTES);
  } else if (n >= 2 * EA_KEY_BYTES && n < sizeof buf) {
    for (size_t i = 2 * EA_KEY_BYTES; i < n; i++)
      if (!is_space(buf[i])) {
        *err = "key file must hold 64 hex characters or 32 bytes";
        rc = -EINVAL;
        goto out;
      }
    for (size_t i = 0; i < EA_KEY_BYTES; i++) {
      int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        *err = "key file: not a hex digit in the 64-character key";
        rc = -EINVAL;
        goto out;
      }
      tmp[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(key, tmp, EA_KEY_BYTES); /* key is untouched unless the file is good */
  } else {
    *err = "key file must hold 64 hex characters or 32 bytes";
    rc = -EINVAL;
  }
out:
  sodium_memzero(buf, sizeof buf);
  sodium_memzero(tmp, sizeof tmp);
  return rc;
}

/* ---- the replay-proof seal ------------------------------------------------ */

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--) p[7 - i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

void ea_wire_rp_encode(const ea_wire_rp *rp, uint8_t out[EA_WIRE_RP_BYTES]) {
  memcpy(out, rp->sender.b, 16);
  put64(out + 16, rp->epoch);
  put64(out + 24, rp->counter);
}

void ea_wire_rp_decode(const uint8_t in[EA_WIRE_RP_BYTES], ea_wire_rp *rp) {
  memcpy(rp->sender.b, in, 16);
  rp->epoch = get64(in + 16);
  rp->counter = get64(in + 24);
}

int ea_wire_seal_rp(const uint8_t key[EA_KEY_BYTES], ea_wire_sender *s, const uint8_t *in,
                    size_t len, uint8_t *out, size_t cap, size_t *outlen, ea_wire_rp *rp_out) {
  if (len < 1 || in[0] != EA_WIRE_MAGIC_PLAIN) return -EINVAL;
  if (cap < len || cap - len < EA_WIRE_SEAL_RP_OVERHEAD - 1) return -EMSGSIZE;
  if (ready()) return -EIO;
  ea_wire_rp rp = {.sender = s->id,
                   .epoch = s->epoch,
                   .counter = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED)};
  /* The plaintext (header + payload) is assembled in out past the nonce
   * and encrypted in place (libsodium allows m == c). */
  uint8_t *body = out + 1 + NONCE_BYTES;
  memmove(body + EA_WIRE_RP_BYTES, in + 1, len - 1);
  ea_wire_rp_encode(&rp, body);
  out[0] = EA_WIRE_MAGIC_SEALED_RP;
  randombytes_buf(out + 1, NONCE_BYTES);
  unsigned long long clen = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(body, &clen, body, EA_WIRE_RP_BYTES + len - 1, out, 1,
                                             NULL, out + 1, key);
  *outlen = 1 + NONCE_BYTES + (size_t)clen;
  if (rp_out) *rp_out = rp;
  return 0;
}

int ea_wire_open_rp(const uint8_t key[EA_KEY_BYTES], const uint8_t *in, size_t len, uint8_t *out,
                    size_t cap, size_t *outlen, ea_wire_rp *rp) {
  if (len >= 1 && in[0] == EA_WIRE_MAGIC_SEALED) return -EPROTO;
  if (len < EA_WIRE_SEAL_RP_OVERHEAD - 1 || in[0] != EA_WIRE_MAGIC_SEALED_RP) return -EBADMSG;
  size_t mlen_max = len - (EA_WIRE_SEAL_OVERHEAD - 1); /* header + payload + 0xEA */
  if (cap < mlen_max) return -EBADMSG;
  if (ready()) return -EBADMSG;
  unsigned long long mlen = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(out + 1, &mlen, NULL, in + 1 + NONCE_BYTES,
                                                 len - 1 - NONCE_BYTES, in, 1, in + 1, key) != 0)
    return -EBADMSG;
  if (mlen < EA_WIRE_RP_BYTES) return -EBADMSG;
  ea_wire_rp_decode(out + 1, rp);
  size_t pay = (size_t)mlen - EA_WIRE_RP_BYTES;
  memmove(out + 1, out + 1 + EA_WIRE_RP_BYTES, pay);
  out[0] = EA_WIRE_MAGIC_PLAIN;
  *outlen = 1 + pay;
  return 0;
}
