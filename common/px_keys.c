/* Implementation of px_keys.h. */
#include "px_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "px_log.h"

#define KEY_FILE_MAX 65536 /* a key file is a few lines; anything larger is not one */

static const char Z85_CHARS[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int px_key_z85_ok(const char *s, size_t n) {
    if (n != PX_KEY_LEN) return 0;
    for (size_t i = 0; i < n; i += 5) {
        uint64_t v = 0; /* each 5 characters carry 4 bytes: the value must fit */
        for (size_t j = i; j < i + 5; j++) {
            const char *p = s[j] ? strchr(Z85_CHARS, s[j]) : NULL;
            if (!p) return 0;
            v = v * 85 + (uint64_t)(p - Z85_CHARS);
        }
        if (v > UINT32_MAX) return 0;
    }
    return 1;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

int px_key_line_parse(const char *line, size_t len, char key[PX_KEY_LEN + 1], char label[PX_KEY_LABEL_MAX + 1],
                      char *why, size_t whylen) {
    if (len && line[len - 1] == '\r') len--;
    size_t b = 0;
    while (b < len && is_blank(line[b])) b++;
    while (len > b && is_blank(line[len - 1])) len--;
    if (b == len) return 0;
    if (line[b] == '#') return 0; /* never a key: see px_keys.h */
    size_t e = b; /* end of the first word */
    while (e < len && !is_blank(line[e])) e++;
    if (!px_key_z85_ok(line + b, e - b)) {
        snprintf(why, whylen, "'%.*s' is not a %d-character Z85 key", (int)(e - b > 48 ? 48 : e - b), line + b,
                 PX_KEY_LEN);
        return -1;
    }
    memcpy(key, line + b, PX_KEY_LEN);
    key[PX_KEY_LEN] = '\0';
    while (e < len && is_blank(line[e])) e++;
    if (len - e > PX_KEY_LABEL_MAX) {
        snprintf(why, whylen, "label longer than %d bytes", PX_KEY_LABEL_MAX);
        return -1;
    }
    for (size_t i = e; i < len; i++)
        if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e) {
            snprintf(why, whylen, "label must be printable ASCII (byte 0x%02x at column %zu)", (unsigned char)line[i],
                     i + 1);
            return -1;
        }
    memcpy(label, line + e, len - e);
    label[len - e] = '\0';
    return 1;
}

/* Reads at most KEY_FILE_MAX bytes of an open file; NUL-terminated, malloc'd. */
static char *read_fd(int fd, const char *path, size_t *len, char *err, size_t errlen) {
    char *buf = malloc(KEY_FILE_MAX + 1);
    size_t used = 0;
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    for (;;) {
        ssize_t r = read(fd, buf + used, KEY_FILE_MAX + 1 - used);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            return NULL;
        }
        if (r == 0) break;
        used += (size_t)r;
        if (used > KEY_FILE_MAX) {
            snprintf(err, errlen, "%s: larger than %d bytes: not a key file", path, KEY_FILE_MAX);
            free(buf);
            return NULL;
        }
    }
    buf[used] = '\0';
    *len = used;
    return buf;
}

/* The first key line of text; -1 with err for a malformed line or no key. */
static int first_key(const char *text, size_t len, const char *path, char key[PX_KEY_LEN + 1], char *err,
                     size_t errlen) {
    size_t pos = 0;
    for (int line_no = 1; pos < len; line_no++) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
        char label[PX_KEY_LABEL_MAX + 1], why[160];
        int r = px_key_line_parse(text + pos, n, key, label, why, sizeof why);
        if (r < 0) {
            snprintf(err, errlen, "%s line %d: %s", path, line_no, why);
            return -1;
        }
        if (r == 1) return 0;
        pos += n + 1;
    }
    snprintf(err, errlen, "%s: no key in the file (expected a %d-character Z85 key line)", path, PX_KEY_LEN);
    return -1;
}

int px_keys_read_public(const char *path, char pub[PX_KEY_LEN + 1], char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t len;
    char *text = read_fd(fd, path, &len, err, errlen);
    close(fd);
    if (!text) return -1;
    int rc = first_key(text, len, path, pub, err, errlen);
    free(text);
    return rc;
}

/* Refuses a secret key file others can access; warns when its group can. */
static int check_secret_mode(int fd, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    unsigned mode = (unsigned)st.st_mode & 0777u;
    if (mode & S_IRWXO) {
        snprintf(err, errlen, "%s: secret key file is accessible by other users (mode %04o): run 'chmod 600 %s'",
                 path, mode, path);
        return -1;
    }
    if (mode & S_IRWXG)
        px_log_warn("secret_key_group_access file=%s mode=%04o: its group can read the secret key; run 'chmod 600 %s' "
                    "unless that is intended",
                    path, mode, path);
    return 0;
}

int px_keys_read_secret(const char *path, px_keypair_t *out, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t len;
    char *text = check_secret_mode(fd, path, err, errlen) == 0 ? read_fd(fd, path, &len, err, errlen) : NULL;
    close(fd);
    if (!text) return -1;
    int rc = first_key(text, len, path, out->sec, err, errlen);
    free(text);
    if (rc == 0 && zmq_curve_public(out->pub, out->sec) != 0) {
        snprintf(err, errlen, "%s: cannot derive the public key: %s", path, zmq_strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Writes text to a new file (never over an existing one). */
static int write_new(const char *path, const char *text, mode_t mode, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s%s", path, strerror(errno),
                 errno == EEXIST ? " (remove it or choose another --out)" : "");
        return -1;
    }
    size_t n = strlen(text);
    int ok = fchmod(fd, mode) == 0 && write(fd, text, n) == (ssize_t)n;
    if (close(fd) != 0) ok = 0;
    if (!ok) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

/* The label a .pub line carries: PREFIX's basename, printable, bounded. */
static void prefix_label(const char *prefix, char label[PX_KEY_LABEL_MAX + 1]) {
    const char *base = strrchr(prefix, '/');
    base = base ? base + 1 : prefix;
    size_t n = 0;
    for (; *base && n < PX_KEY_LABEL_MAX; base++)
        label[n++] = (*base > 0x20 && *base < 0x7f) ? *base : '_';
    label[n] = '\0';
}

int px_keys_generate(const char *prefix, px_keypair_t *result, char *err, size_t errlen) {
    px_keypair_t kp, *out = &kp; /* *result is filled only on success */
    if (zmq_curve_keypair(out->pub, out->sec) != 0) {
        snprintf(err, errlen, "cannot make a CURVE key pair: %s (is libzmq built with libsodium?)",
                 zmq_strerror(errno));
        return -1;
    }
    size_t plen = strlen(prefix) + 8;
    char *kpath = malloc(plen), *ppath = malloc(plen);
    char label[PX_KEY_LABEL_MAX + 1], text[512];
    int rc = -1;
    if (!kpath || !ppath) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    snprintf(kpath, plen, "%s.key", prefix);
    snprintf(ppath, plen, "%s.pub", prefix);
    prefix_label(prefix, label);
    snprintf(text, sizeof text, "# phalanx CURVE secret key: keep it private (mode 0600). Public key: %s.pub\n%s\n",
             label, out->sec);
    if (write_new(kpath, text, 0600, err, errlen) != 0) goto done;
    snprintf(text, sizeof text, "%s %s\n", out->pub, label);
    if (write_new(ppath, text, 0644, err, errlen) != 0) {
        unlink(kpath);
        goto done;
    }
    *result = kp;
    rc = 0;
done:
    free(kpath);
    free(ppath);
    return rc;
}

int px_curve_client_load(const char *secret_path, const char *server_path, const char *server_z85,
                         px_curve_client_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!secret_path && !server_path && !server_z85) return 0;
    if (server_path && server_z85) {
        snprintf(err, errlen, "--coordinator-public-key-file and --coordinator-key: give one, not both");
        return -1;
    }
    if (!secret_path) {
        snprintf(err, errlen, "%s needs --curve-secret-key-file (this program's own key pair)",
                 server_path ? "--coordinator-public-key-file" : "--coordinator-key");
        return -1;
    }
    if (!server_path && !server_z85) {
        snprintf(err, errlen, "--curve-secret-key-file needs --coordinator-public-key-file or --coordinator-key");
        return -1;
    }
    char why[512];
    if (px_keys_read_secret(secret_path, &out->own, why, sizeof why) != 0) {
        snprintf(err, errlen, "--curve-secret-key-file: %s", why);
        return -1;
    }
    if (server_z85) {
        if (!px_key_z85_ok(server_z85, strlen(server_z85))) {
            snprintf(err, errlen, "--coordinator-key: '%.48s' is not a %d-character Z85 key", server_z85, PX_KEY_LEN);
            return -1;
        }
        snprintf(out->server, sizeof out->server, "%s", server_z85);
    } else if (px_keys_read_public(server_path, out->server, why, sizeof why) != 0) {
        snprintf(err, errlen, "--coordinator-public-key-file: %s", why);
        return -1;
    }
    out->on = 1;
    return 0;
}

int px_curve_client_apply(void *sock, const px_curve_client_t *k) {
    if (!k->on) return 0;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server, PX_KEY_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->own.pub, PX_KEY_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->own.sec, PX_KEY_LEN) != 0)
        return -1;
    return 0;
}

/* dir, created if missing, readable by its owner only. */
static int private_dir(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create: %s", dir, strerror(errno));
        return -1;
    }
    if (chmod(dir, 0700) != 0) {
        snprintf(err, errlen, "%s: cannot chmod: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int px_keys_make_local_token(const char *dir, char *err, size_t errlen) {
    if (private_dir(dir, err, errlen) != 0) return -1;
    unsigned char raw[32];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(err, errlen, "no random bytes for a job token: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    char text[sizeof raw * 2 + 2], path[4200];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(text + 2 * i, 3, "%02x", raw[i]);
    strcat(text, "\n");
    snprintf(path, sizeof path, "%s/token", dir);
    unlink(path); /* the token of an earlier run */
    return write_new(path, text, 0600, err, errlen);
}

int px_keys_make_local_set(const char *dir, char *err, size_t errlen) {
    if (private_dir(dir, err, errlen) != 0) return -1;
    static const char *const names[] = {"coordinator.key", "coordinator.pub", "worker.key", "worker.pub",
                                        "authorized_keys"};
    char path[4200], prefix[4200], text[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path); /* throwaway keys of an earlier run */
    }
    px_keypair_t coord, worker;
    snprintf(prefix, sizeof prefix, "%s/coordinator", dir);
    if (px_keys_generate(prefix, &coord, err, errlen) != 0) return -1;
    snprintf(prefix, sizeof prefix, "%s/worker", dir);
    if (px_keys_generate(prefix, &worker, err, errlen) != 0) return -1;
    snprintf(path, sizeof path, "%s/authorized_keys", dir);
    snprintf(text, sizeof text, "# throwaway keys of one local job (phalanx-launch --curve)\n%s worker\n", worker.pub);
    return write_new(path, text, 0644, err, errlen);
}

int px_zmq_router_recv(void *sock, zmq_msg_t *id, zmq_msg_t *body, const char **why) {
    zmq_msg_init(id);
    zmq_msg_init(body);
    if (zmq_msg_recv(id, sock, ZMQ_DONTWAIT) < 0) return -1;
    if (!zmq_msg_more(id) || zmq_msg_recv(body, sock, ZMQ_DONTWAIT) < 0) {
        *why = "empty message";
        return 0;
    }
    if (!zmq_msg_more(body)) return 1;
    zmq_msg_t junk; /* a multipart message: drain the rest */
    zmq_msg_init(&junk);
    while (zmq_msg_recv(&junk, sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&junk)) {
    }
    zmq_msg_close(&junk);
    *why = "multipart message: one frame per message";
    return 0;
}

int px_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value) {
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return 0;
    }
    zmq_msg_init(&addr); /* the endpoint: not needed */
    if (zmq_msg_more(&ev)) zmq_msg_recv(&addr, mon, 0);
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&ev) >= 6) {
        memcpy(event, zmq_msg_data(&ev), 2);
        memcpy(value, (const char *)zmq_msg_data(&ev) + 2, 4);
    }
    zmq_msg_close(&addr);
    zmq_msg_close(&ev);
    return 1;
}

void px_curve_handshake_why(uint16_t event, uint32_t value, const px_curve_client_t *k, char *why, size_t cap) {
    int failed = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        snprintf(why, cap, "the coordinator refused our public key %s (ZAP status %u): it is not in its "
                 "--authorized-keys", k->own.pub, value);
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        snprintf(why, cap, "security mismatch: %s", k->on ? "we use CURVE and the coordinator does not"
                                                         : "the coordinator requires CURVE keys (give "
                                                           "--curve-secret-key-file and its public key)");
    else if (failed && k->on)
        snprintf(why, cap, "the CURVE handshake failed (0x%x): wrong coordinator public key? (is "
                 "--coordinator-public-key-file the coordinator's key?)", value);
    else if (failed)
        snprintf(why, cap, "the handshake failed (0x%x): the coordinator probably requires CURVE keys (give "
                 "--curve-secret-key-file and --coordinator-public-key-file)", value);
    else
        snprintf(why, cap, "%s", "");
}
