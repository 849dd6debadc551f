/* coordinator_load: how much load one phalanx-coordinator carries, and how
 * fast it re-forms the quorum after a member is lost.
 *
 * The driver (this process) starts phalanx-coordinator itself (or uses one
 * given by --endpoint/--http/--pid) and forks --procs client processes. Each
 * client owns a slice of the N simulated members, one connection per member
 * (the coordinator tells members apart by their connection identity), all
 * driven by one thread through epoll: either a libzmq DEALER per member
 * (--transport zmq), or the same DEALER spoken by hand, ZMTP 3.0 over a plain
 * TCP socket (--transport zmtp: identical on the wire, half the client CPU,
 * which is what lets 10,000 members run on a 2-core machine). A member registers (groups of --group-size
 * ranks), asks for a quorum, then heartbeats at --rate-hz on a fixed phase
 * (member j of a client beats in millisecond slot j mod period), exactly like
 * worker/agent.c does, and reads every reply. With --heartbeats udp (the
 * default, as workers do when the coordinator offers it) heartbeats go as
 * sealed UDP datagrams (proto/px_hbudp.h), batched with sendmmsg from one
 * socket per client; registration, quorums and reports stay on the
 * connections, and a member told udp_off heartbeats over its connection.
 *
 * Phases and what they report:
 *   1. register all members, request a quorum, wait until every member holds
 *      the quorum with every group in it;
 *   2. once the clients' ack rate has matched the target for 2 s (the first
 *      quorum's fan-out can leave a backlog), steady state for --measure-s: heartbeats handled per second
 *      (the coordinator's phalanx_heartbeats_total delta, and the clients'
 *      acks), heartbeat round-trip p50/p99, and the coordinator's CPU use
 *      (utime+stime from /proc/PID/stat over the window) as % of one core;
 *   3. --losses member losses of each kind, one at a time:
 *      "report": the victim's socket closes, then a survivor in another group
 *        sends a FailureReport naming it. Report + closed connection are the
 *        loss rule's two signals, so detection is the report's arrival:
 *        report->quorum is detection-to-quorum on one clock.
 *      "kill": the victim's socket closes and it falls silent (a SIGKILLed
 *        worker). Detection needs the closed connection plus 2.5 missed
 *        heartbeat intervals; loss->quorum includes that wait, and
 *        detection->quorum uses the member_lost event's timestamp (ms).
 *      For each: time to the first survivor holding the new quorum and to
 *      the last one (the push fan-out), and the coordinator CPU per quorum.
 * All clocks are CLOCK_MONOTONIC on one machine; event timestamps (wall-clock
 * ms) are mapped onto it with one offset, so those figures are +-1 ms.
 *
 * The clients share the machine with the coordinator: their CPU use is
 * printed too, so a reader can tell a coordinator limit from a client one. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "px_child.h"
#include "px_file.h"
#include "px_hbudp.h"
#include "px_wire.h"

#define HIST_N 512
#define QTRACK 256
#define MAX_PROCS 64
#define NAME_MAX_LEN 32

/* ---- configuration ------------------------------------------------------- */

typedef struct {
    int members, group_size, rate_hz, procs, losses, warmup_s, measure_s, report_delay_ms;
    int hb_interval_ms, hb_timeout_ms, quiet, zmtp, ramp_ms;
    int group_liveness; /* --liveness group: rank 0 of each group heartbeats with a digest for its ranks */
    int transient;      /* --transient-ranks: led ranks close their connection once registered and requested */
    int udp;            /* --heartbeats udp: sealed datagrams when the coordinator offers them */
    const char *coordinator, *endpoint, *http, *events_path, *work_dir;
    int pid;
} cfg_t;

static cfg_t C;
static const char *PROG = "coordinator_load";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", PROG);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void group_name(char *out, size_t n, int member) { snprintf(out, n, "g%d", member / C.group_size); }

/* ---- latency histogram: 16 linear sub-buckets per power of two (~6%) ---- */

static int hist_bucket(uint64_t us) {
    if (us < 16) return (int)us;
    int msb = 63 - __builtin_clzll(us);
    int b = 16 * (msb - 3) + (int)((us >> (msb - 4)) & 15);
    return b < HIST_N ? b : HIST_N - 1;
}

static uint64_t hist_value(int b) { /* lower edge of bucket b, in us */
    if (b < 16) return (uint64_t)b;
    int msb = b / 16 + 3;
    return ((uint64_t)16 + (uint64_t)(b % 16)) << (msb - 4);
}

static double hist_quantile(const uint64_t *h, double q) {
    uint64_t total = 0;
    for (int i = 0; i < HIST_N; i++) total += h[i];
    if (!total) return NAN;
    uint64_t want = (uint64_t)ceil(q * (double)total), seen = 0;
    for (int i = 0; i < HIST_N; i++) {
        seen += h[i];
        if (seen >= want) return (double)hist_value(i);
    }
    return (double)hist_value(HIST_N - 1);
}

/* ---- parent <-> client pipes ---------------------------------------------- */

enum { CMD_REQUEST_QUORUM = 1, CMD_STATS, CMD_KILL, CMD_QUIT };
enum { KILL_REPORT = 0, KILL_SILENT = 1 };

typedef struct {
    int32_t type;
    int32_t victim, reporter; /* global member indexes */
    int32_t mode, delay_ms, reset;
    char victim_group[NAME_MAX_LEN];
} cmd_t;

enum { REP_REGISTERED = 1, REP_STATS, REP_KILLED, REP_QDONE, REP_FATAL };

typedef struct {
    int32_t type, child;
    int64_t t0, t1; /* REGISTERED: first send, last ack. KILLED: close, report sent */
    int64_t qid;
    int32_t n_groups, victim_present;
    int64_t first_ns, last_ns;
    uint32_t frame_bytes;
    uint64_t hb_sent, hb_dropped, acks, errors, quorum_msgs, quorum_bytes, oversized, cpu_ns, reregisters, reconnects;
    uint64_t hb_udp, udp_off; /* heartbeats sent as datagrams; members told udp_off */
    char msg[160];
    uint32_t hist[HIST_N];
} report_t;

_Static_assert(sizeof(report_t) <= PIPE_BUF, "reports must be written atomically");

static void write_full(int fd, const void *p, size_t n) {
    if (px_fd_write_all(fd, p, n) != 0) _exit(3); /* the other side is gone */
}

static int read_full(int fd, void *p, size_t n) {
    return px_fd_read_full(fd, p, n) == (ssize_t)n ? 0 : -1;
}

/* ---- protobuf scanning (cheaper than a full decode for 100k msgs/s) ------- */

static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int s = 0; s < 64 && *p < end; s += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int pb_skip(const uint8_t **p, const uint8_t *end, int wt) {
    uint64_t v;
    switch (wt) {
    case 0: return pb_varint(p, end, &v);
    case 1: *p += 8; return *p <= end ? 0 : -1;
    case 5: *p += 4; return *p <= end ? 0 : -1;
    case 2:
        if (pb_varint(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
        *p += v;
        return 0;
    default: return -1;
    }
}

/* The Envelope's body: returns its field number (10..23; 0 if none). */
static int env_body(const uint8_t *buf, size_t len, uint64_t *req_id, const uint8_t **body, size_t *blen) {
    const uint8_t *p = buf, *end = buf + len;
    int field = 0;
    *req_id = 0;
    while (p < end) {
        uint64_t tag;
        if (pb_varint(&p, end, &tag)) return 0;
        int f = (int)(tag >> 3), wt = (int)(tag & 7);
        if (f == 2 && wt == 0) {
            if (pb_varint(&p, end, req_id)) return 0;
        } else if (f >= 10 && wt == 2) {
            uint64_t n;
            if (pb_varint(&p, end, &n) || n > (uint64_t)(end - p)) return 0;
            field = f;
            *body = p;
            *blen = (size_t)n;
            p += n;
        } else if (pb_skip(&p, end, wt)) {
            return 0;
        }
    }
    return field;
}

static int64_t pb_field_varint(const uint8_t *b, size_t n, int want) {
    const uint8_t *p = b, *end = b + n;
    while (p < end) {
        uint64_t tag, v;
        if (pb_varint(&p, end, &tag)) return -1;
        if ((int)(tag >> 3) == want && (tag & 7) == 0) return pb_varint(&p, end, &v) ? -1 : (int64_t)v;
        if (pb_skip(&p, end, (int)(tag & 7))) return -1;
    }
    return -1;
}

/* ---- client process -------------------------------------------------------- */

typedef struct {
    void *sock;   /* libzmq transport: the DEALER */
    int fd;       /* its ZMQ_FD, or the TCP socket (zmtp transport) */
    int alive, registered, ever_registered;
    int zmtp_state, rbuf_greeted, out_armed; /* ZMTP_*; peer greeting read; EPOLLOUT requested */
    uint8_t *rbuf, *wbuf, *pbuf; /* zmtp: unparsed input, unsent output, messages held until the handshake ends */
    size_t rlen, rcap, wlen, wcap, plen, pcap;
    int64_t qid, last_send, next_register;
    uint64_t last_req;
    int led; /* --liveness group, rank > 0: the coordinator named its leader; its leader reports for it */
    int requested, closed; /* --transient-ranks: sent its QuorumRequest; closed its connection (still alive) */
    int64_t led_ns;        /* when an ack first named its leader */
    int udp;               /* heartbeats as datagrams (the RegisterAck offered them, no udp_off since) */
    uint64_t udp_seq;
    uint8_t udp_key[PX_HBUDP_KEY_BYTES];
} member_t;

#define UDP_BATCH 64

enum { ZMTP_CONNECTING = 0, ZMTP_GREETING, ZMTP_OPEN };

typedef struct {
    int64_t qid, first, last;
    int count, n_groups, victim_present, done;
    uint32_t bytes;
} qtrack_t;

typedef struct {
    int id, lo, hi, n; /* members [lo, hi) */
    int cmd_fd, rep_fd, ep;
    void *ctx;
    member_t *m;
    int live, n_registered, handshaking;
    uint64_t next_req;
    report_t st; /* counters since the last stats reset */
    uint64_t hist[HIST_N];
    qtrack_t q[QTRACK];
    char victim_group[NAME_MAX_LEN];
    /* a pending FailureReport */
    int report_pending, reporter, victim;
    int64_t report_at, t_kill;
    uint64_t cpu_at_reset; /* this process's CPU time at the last stats reset */
    /* --heartbeats udp: one socket, datagrams queued for one sendmmsg */
    int udp_fd, n_udp;
    struct mmsghdr udp_msgs[UDP_BATCH];
    struct iovec udp_iov[UDP_BATCH];
    uint8_t udp_buf[UDP_BATCH][PX_HBUDP_MAX];
} client_t;

static void client_report(client_t *c, report_t *r) {
    r->child = c->id;
    write_full(c->rep_fd, r, sizeof *r);
}

static void client_fatal(client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void client_fatal(client_t *c, const char *fmt, ...) {
    report_t r = {.type = REP_FATAL};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.msg, sizeof r.msg, fmt, ap);
    va_end(ap);
    client_report(c, &r);
    _exit(2);
}

/* ---- member transports ------------------------------------------------------
 * zmq:  one libzmq DEALER per member, driven through epoll on its ZMQ_FD.
 * zmtp: the same DEALER spoken by hand (ZMTP 3.0, NULL mechanism) over a plain
 *       non-blocking TCP socket: what the coordinator's ROUTER sees on the wire
 *       is identical, at a fraction of libzmq's per-socket client cost, so a
 *       2-core machine can generate 100k heartbeats/s and still leave the
 *       coordinator a core. */

static void drain(client_t *c, int j);

static void buf_append(uint8_t **b, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *len + n) nc *= 2;
        *b = realloc(*b, nc);
        if (!*b) _exit(4);
        *cap = nc;
    }
    memcpy(*b + *len, p, n);
    *len += n;
}

static void zmtp_flush(client_t *c, int j) {
    member_t *m = &c->m[j];
    size_t off = 0;
    while (off < m->wlen) {
        ssize_t w = send(m->fd, m->wbuf + off, m->wlen - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    memmove(m->wbuf, m->wbuf + off, m->wlen - off);
    m->wlen -= off;
    if (m->out_armed != (m->wlen > 0)) { /* one epoll_ctl per change, not per send */
        m->out_armed = m->wlen > 0;
        struct epoll_event ev = {.events = EPOLLIN | (m->out_armed ? EPOLLOUT : 0u), .data.u64 = (uint64_t)j};
        epoll_ctl(c->ep, EPOLL_CTL_MOD, m->fd, &ev);
    }
}

/* One ZMTP frame: flags, size (1 or 8 bytes), body. */
static void zmtp_frame(uint8_t **b, size_t *len, size_t *cap, int command, const void *body, size_t n) {
    uint8_t hdr[9];
    size_t h;
    if (n <= 255) {
        hdr[0] = command ? 0x04 : 0x00;
        hdr[1] = (uint8_t)n;
        h = 2;
    } else {
        hdr[0] = (uint8_t)((command ? 0x04 : 0x00) | 0x02);
        for (int i = 0; i < 8; i++) hdr[1 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
        h = 9;
    }
    buf_append(b, len, cap, hdr, h);
    buf_append(b, len, cap, body, n);
}

/* The coordinator's tcp://IPV4:PORT, at `port` (0: the endpoint's own).
 * what: which transport needs it, for the message. */
static struct sockaddr_in coordinator_addr(client_t *c, int port, const char *what) {
    char host[64], tcp_port[16];
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (px_wire_endpoint_split(C.endpoint, host, sizeof host, tcp_port, sizeof tcp_port) != 0 ||
        inet_pton(AF_INET, host, &a.sin_addr) != 1)
        client_fatal(c, "%s needs a tcp://IPV4:PORT endpoint, not %s", what, C.endpoint);
    a.sin_port = htons((uint16_t)(port ? port : atoi(tcp_port)));
    return a;
}

static void zmtp_open(client_t *c, int j, const char *ident, size_t ident_len) {
    member_t *m = &c->m[j];
    struct sockaddr_in a = coordinator_addr(c, 0, "the zmtp transport");
    m->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->fd < 0) client_fatal(c, "socket: %s (fd limit?)", strerror(errno));
    int one = 1;
    setsockopt(m->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(m->fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)
        client_fatal(c, "connect: %s", strerror(errno));
    /* Greeting (64 bytes): signature, version 3.0, mechanism NULL, as-server 0. */
    uint8_t g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
    buf_append(&m->wbuf, &m->wlen, &m->wcap, g, sizeof g);
    uint8_t ready[128];
    size_t n = 0;
    ready[n++] = 5, memcpy(ready + n, "READY", 5), n += 5;
    ready[n++] = 11, memcpy(ready + n, "Socket-Type", 11), n += 11;
    ready[n++] = 0, ready[n++] = 0, ready[n++] = 0, ready[n++] = 6, memcpy(ready + n, "DEALER", 6), n += 6;
    ready[n++] = 8, memcpy(ready + n, "Identity", 8), n += 8;
    ready[n++] = 0, ready[n++] = 0, ready[n++] = 0, ready[n++] = (uint8_t)ident_len;
    memcpy(ready + n, ident, ident_len), n += ident_len;
    zmtp_frame(&m->wbuf, &m->wlen, &m->wcap, 1, ready, n);
    m->zmtp_state = ZMTP_CONNECTING;
    m->out_armed = 1;
    c->handshaking++;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)j};
    if (epoll_ctl(c->ep, EPOLL_CTL_ADD, m->fd, &ev) != 0) client_fatal(c, "epoll_ctl: %s", strerror(errno));
}

static void on_frame(client_t *c, int j, const uint8_t *buf, size_t len);

/* Parses whatever complete frames the peer sent: its greeting, commands and
 * messages. Messages wait until the peer's READY: libzmq 4.3 drops a
 * connection whose first message arrives together with the handshake. */
static void zmtp_parse(client_t *c, int j) {
    member_t *m = &c->m[j];
    size_t off = 0;
    if (m->zmtp_state == ZMTP_GREETING && !m->rbuf_greeted) {
        if (m->rlen < 64) return;
        if (m->rbuf[0] != 0xff || m->rbuf[9] != 0x7f || m->rbuf[10] < 3) client_fatal(c, "member %d: not a ZMTP 3 peer", c->lo + j);
        m->rbuf_greeted = 1;
        off = 64;
    }
    while (m->rlen - off >= 2) {
        uint8_t flags = m->rbuf[off];
        size_t h = flags & 0x02 ? 9 : 2, n = 0;
        if (m->rlen - off < h) break;
        if (flags & 0x02)
            for (int i = 0; i < 8; i++) n = (n << 8) | m->rbuf[off + 1 + (size_t)i];
        else
            n = m->rbuf[off + 1];
        if (m->rlen - off - h < n) break;
        if ((flags & 0x04) && m->zmtp_state == ZMTP_GREETING && n >= 6 && memcmp(m->rbuf + off + h, "\x05READY", 6) == 0) {
            m->zmtp_state = ZMTP_OPEN;
            c->handshaking--;
            buf_append(&m->wbuf, &m->wlen, &m->wcap, m->pbuf, m->plen);
            m->plen = 0;
            zmtp_flush(c, j);
        } else if (!(flags & 0x04) && !(flags & 0x01)) {
            on_frame(c, j, m->rbuf + off + h, n);
        }
        off += h + n;
        if (!m->alive || m->closed) return;
    }
    memmove(m->rbuf, m->rbuf + off, m->rlen - off);
    m->rlen -= off;
}

static void member_open(client_t *c, int j);
static void member_close(client_t *c, int j);

static void zmtp_reconnect(client_t *c, int j) {
    member_t *m = &c->m[j];
    if (m->zmtp_state != ZMTP_OPEN) c->handshaking--;
    member_close(c, j);
    m->rlen = m->wlen = m->plen = 0;
    m->rbuf_greeted = 0;
    c->st.reconnects++;
    member_open(c, j); /* the same identity: the coordinator still knows the member */
}

static void zmtp_event(client_t *c, int j, uint32_t events) {
    member_t *m = &c->m[j];
    if (m->zmtp_state == ZMTP_CONNECTING && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(m->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) client_fatal(c, "member %d: connect: %s", c->lo + j, strerror(err));
        m->zmtp_state = ZMTP_GREETING;
    }
    if (m->zmtp_state != ZMTP_CONNECTING && m->wlen) zmtp_flush(c, j);
    if (events & EPOLLIN) {
        for (;;) {
            if (m->rcap - m->rlen < 2048) { /* small buffers: 10,000 members must fit */
                m->rcap = m->rcap ? m->rcap * 2 : 4096;
                m->rbuf = realloc(m->rbuf, m->rcap);
                if (!m->rbuf) _exit(4);
            }
            size_t room = m->rcap - m->rlen;
            ssize_t r = recv(m->fd, m->rbuf + m->rlen, room, 0);
            if (r > 0) {
                m->rlen += (size_t)r;
                if ((size_t)r < room) break; /* drained; level-triggered epoll reports any rest */
                continue;
            }
            if (r < 0 && errno == EINTR) continue;
            if (r == 0 || errno != EAGAIN) { /* dropped by the coordinator: reconnect as libzmq would */
                zmtp_reconnect(c, j);
                return;
            }
            break;
        }
        zmtp_parse(c, j);
        if (m->alive && m->rlen == 0 && m->rcap > 65536) { /* after a large Quorum: give the memory back */
            free(m->rbuf);
            m->rbuf = NULL;
            m->rcap = 0;
        }
    }
}

static int member_ident(const client_t *c, int j, char *ident, size_t len) {
    return snprintf(ident, len, "bench-%d-%d", c->lo + j, (int)getpid());
}

static void member_open(client_t *c, int j) {
    member_t *m = &c->m[j];
    char ident[48];
    int n = member_ident(c, j, ident, sizeof ident);
    if (C.zmtp) {
        zmtp_open(c, j, ident, (size_t)n);
    } else {
        m->sock = zmq_socket(c->ctx, ZMQ_DEALER);
        if (!m->sock) client_fatal(c, "zmq_socket for member %d: %s (fd limit?)", c->lo + j, zmq_strerror(errno));
        int zero = 0, hwm = 10000;
        zmq_setsockopt(m->sock, ZMQ_ROUTING_ID, ident, (size_t)n);
        zmq_setsockopt(m->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(m->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(m->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
        if (zmq_connect(m->sock, C.endpoint) != 0) client_fatal(c, "connect: %s", zmq_strerror(errno));
        size_t sz = sizeof m->fd;
        zmq_getsockopt(m->sock, ZMQ_FD, &m->fd, &sz);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)j};
        if (epoll_ctl(c->ep, EPOLL_CTL_ADD, m->fd, &ev) != 0) client_fatal(c, "epoll_ctl: %s", strerror(errno));
    }
    m->alive = 1;
    c->live++;
}

/* Closing the connection is what a killed process does. */
static void member_close(client_t *c, int j) {
    member_t *m = &c->m[j];
    if (!m->closed) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, m->fd, NULL);
        if (C.zmtp) {
            close(m->fd);
        } else {
            zmq_close(m->sock);
            m->sock = NULL;
        }
    }
    m->alive = 0;
    c->live--;
}

/* --transient-ranks: a led rank that registered and asked for the quorum
 * closes its connection (with a reset: no TIME_WAIT eating the port range)
 * and stays alive, reported by its leader. The coordinator keeps it while
 * the digests name it: a closed connection alone is one signal, not two. */
static void maybe_close_transient(client_t *c, int j) {
    member_t *m = &c->m[j];
    if (!C.transient || m->closed || !m->led || !m->registered || !m->requested) return;
    /* A second after its leader was named: its leader has reported it for
     * ten intervals by then. A real rank keeps its connection; closing at
     * once would leave it silent and disconnected whenever its registration
     * and its leader's next digest are more than 2.5 intervals apart. */
    if (now_ns() - m->led_ns < 1000000000) return;
    epoll_ctl(c->ep, EPOLL_CTL_DEL, m->fd, NULL);
    struct linger lg = {1, 0};
    setsockopt(m->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(m->fd);
    m->fd = -1;
    m->closed = 1;
    free(m->rbuf), free(m->wbuf), free(m->pbuf); /* 100,000 members: their buffers add up */
    m->rbuf = m->wbuf = m->pbuf = NULL;
    m->rlen = m->rcap = m->wlen = m->wcap = m->plen = m->pcap = 0;
}

static int member_write(client_t *c, int j, const uint8_t *buf, size_t n) {
    member_t *m = &c->m[j];
    if (!C.zmtp) {
        int rc = zmq_send(m->sock, buf, n, ZMQ_DONTWAIT);
        drain(c, j); /* a send may consume the socket's wake-up: look for input now */
        return rc < 0 ? -1 : 0;
    }
    if (m->zmtp_state != ZMTP_OPEN) {
        zmtp_frame(&m->pbuf, &m->plen, &m->pcap, 0, buf, n);
        return 0;
    }
    zmtp_frame(&m->wbuf, &m->wlen, &m->wcap, 0, buf, n);
    zmtp_flush(c, j);
    return 0;
}

static void client_send(client_t *c, int j, Phalanx__Envelope *env) {
    uint8_t buf[1024];
    env->has_version = 1;
    env->version = PX_PROTO_VERSION;
    /* Like worker/agent.c: heartbeats carry no request id, so the
     * coordinator answers them only when it has news (or once a second). */
    env->has_request_id = env->body_case != PHALANX__ENVELOPE__BODY_HB;
    env->request_id = env->has_request_id ? ++c->next_req : 0;
    size_t n = phalanx__envelope__get_packed_size(env);
    if (n > sizeof buf) client_fatal(c, "message of %zu bytes", n);
    phalanx__envelope__pack(env, buf);
    if (member_write(c, j, buf, n) != 0) {
        c->st.hb_dropped++;
        return;
    }
    c->m[j].last_req = env->request_id;
    c->m[j].last_send = now_ns();
}

static void udp_flush(client_t *c) {
    int done = 0;
    while (done < c->n_udp) {
        int k = sendmmsg(c->udp_fd, c->udp_msgs + done, (unsigned)(c->n_udp - done), 0);
        if (k <= 0) {
            c->st.hb_dropped += (uint64_t)(c->n_udp - done);
            break;
        }
        done += k;
    }
    c->n_udp = 0;
}

/* A heartbeat as worker/agent.c seals it: the envelope without a token
 * (the key is the credential), under this member's identity and key. */
static void udp_queue(client_t *c, int j, Phalanx__Envelope *env) {
    member_t *m = &c->m[j];
    uint8_t plain[1024];
    env->has_version = 1;
    env->version = PX_PROTO_VERSION;
    size_t n = phalanx__envelope__get_packed_size(env);
    if (n > sizeof plain) client_fatal(c, "heartbeat of %zu bytes", n);
    phalanx__envelope__pack(env, plain);
    char ident[48];
    int il = member_ident(c, j, ident, sizeof ident);
    size_t len = px_hbudp_seal(m->udp_key, ident, (size_t)il, ++m->udp_seq, plain, n, c->udp_buf[c->n_udp],
                               sizeof c->udp_buf[c->n_udp]);
    if (!len) client_fatal(c, "cannot seal a heartbeat of %zu bytes", n);
    c->udp_iov[c->n_udp] = (struct iovec){c->udp_buf[c->n_udp], len};
    c->udp_msgs[c->n_udp].msg_hdr = (struct msghdr){.msg_iov = &c->udp_iov[c->n_udp], .msg_iovlen = 1};
    c->st.hb_udp++;
    m->last_send = now_ns();
    if (++c->n_udp == UDP_BATCH) udp_flush(c);
}

/* The RegisterAck's offer: this member's key, and (once per client) a
 * socket connected to the coordinator's host at the offered port. */
static void udp_offer(client_t *c, int j, const uint8_t *buf, size_t len) {
    member_t *m = &c->m[j];
    m->udp = 0;
    if (!C.udp) return;
    Phalanx__Envelope *e = phalanx__envelope__unpack(NULL, len, buf);
    if (!e) return;
    const Phalanx__RegisterAck *a = e->body_case == PHALANX__ENVELOPE__BODY_REG_ACK ? e->reg_ack : NULL;
    if (a && a->has_udp_port && a->udp_port > 0 && a->udp_port < 65536 && a->udp_key.len == PX_HBUDP_KEY_BYTES) {
        if (c->udp_fd < 0) {
            struct sockaddr_in sa = coordinator_addr(c, (int)a->udp_port, "UDP heartbeats");
            c->udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            int sz = 8 << 20;
            setsockopt(c->udp_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
            if (c->udp_fd < 0 || connect(c->udp_fd, (struct sockaddr *)&sa, sizeof sa) != 0)
                client_fatal(c, "UDP socket: %s", strerror(errno));
        }
        memcpy(m->udp_key, a->udp_key.data, PX_HBUDP_KEY_BYTES);
        m->udp_seq = 0;
        m->udp = 1;
    }
    phalanx__envelope__free_unpacked(e, NULL);
}

static void send_register(client_t *c, int j) {
    int g = c->lo + j;
    char name[NAME_MAX_LEN];
    group_name(name, sizeof name, g);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = name;
    r.has_rank = r.has_group_size = r.has_pid = r.has_step = 1;
    r.rank = (uint32_t)(g % C.group_size);
    r.group_size = (uint32_t)C.group_size;
    r.pid = (uint32_t)getpid();
    r.host = "bench";
    r.step = 0;
    r.job = "bench";
    /* The rank -> leader hop stays inside a group and never reaches the
     * coordinator: not simulated, so the endpoint is only published. */
    if (C.group_liveness && r.rank == 0) r.liveness_endpoint = "tcp://127.0.0.1:9";
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    client_send(c, j, &env);
}

static void send_heartbeat(client_t *c, int j) {
    int g = c->lo + j;
    char name[NAME_MAX_LEN];
    group_name(name, sizeof name, g);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    h.group = name;
    h.has_rank = h.has_step = h.has_state = h.has_quorum_id = 1;
    h.rank = (uint32_t)(g % C.group_size);
    h.step = 0;
    h.state = c->m[j].qid > 0 ? PHALANX__MEMBER_STATE__HEALTHY : PHALANX__MEMBER_STATE__JOINING;
    h.quorum_id = c->m[j].qid;
    /* A leader's digest: the ranks of its group that are alive (a killed
     * one drops out, as its leader stops hearing it). Groups never span two
     * clients (main aligns the slices). */
    uint8_t alive[PX_GROUP_SIZE_MAX / 8] = {0};
    Phalanx__GroupDigest d = PHALANX__GROUP_DIGEST__INIT;
    if (C.group_liveness && h.rank == 0) {
        for (int r = 1; r < C.group_size && j + r < c->n; r++)
            if (c->m[j + r].alive && c->m[j + r].registered) {
                alive[r / 8] |= (uint8_t)(1u << (r % 8));
                d.alive.len = (size_t)(r / 8 + 1);
            }
        d.has_alive = d.has_min_step = d.has_max_step = 1;
        d.alive.data = alive;
        h.digest = &d;
    }
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    c->st.hb_sent++;
    if (c->m[j].udp && c->udp_fd >= 0) {
        udp_queue(c, j, &env);
        return;
    }
    client_send(c, j, &env);
}

static void send_quorum_request(client_t *c, int j);

/* --liveness group: a rank > 0 stops heartbeating once an ack names its leader. */
static void note_leader(client_t *c, int j, const uint8_t *buf, size_t len) {
    member_t *m = &c->m[j];
    if (!C.group_liveness || (c->lo + j) % C.group_size == 0 || m->led) return;
    Phalanx__Envelope *e = phalanx__envelope__unpack(NULL, len, buf);
    if (!e) return;
    const char *ep = e->body_case == PHALANX__ENVELOPE__BODY_REG_ACK ? e->reg_ack->leader_endpoint
                     : e->body_case == PHALANX__ENVELOPE__BODY_HB_ACK ? e->hb_ack->leader_endpoint
                                                                      : NULL;
    m->led = ep && ep[0];
    if (m->led) m->led_ns = now_ns();
    phalanx__envelope__free_unpacked(e, NULL);
    if (C.transient && m->registered && !m->requested) { /* its one request, before it closes */
        send_quorum_request(c, j);
        m->requested = 1;
    }
    maybe_close_transient(c, j);
}

static void send_quorum_request(client_t *c, int j) {
    int g = c->lo + j;
    char name[NAME_MAX_LEN];
    group_name(name, sizeof name, g);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__QuorumRequest q = PHALANX__QUORUM_REQUEST__INIT;
    q.group = name;
    q.has_rank = q.has_step = q.has_quorum_id = 1;
    q.rank = (uint32_t)(g % C.group_size);
    q.step = 0;
    q.quorum_id = c->m[j].qid;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM_REQ;
    env.quorum_req = &q;
    client_send(c, j, &env);
}

static void send_failure_report(client_t *c, int reporter, int victim) {
    char rname[NAME_MAX_LEN], vname[NAME_MAX_LEN];
    group_name(rname, sizeof rname, reporter);
    group_name(vname, sizeof vname, victim);
    int j = reporter - c->lo;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__FailureReport f = PHALANX__FAILURE_REPORT__INIT;
    f.group = rname;
    f.has_rank = f.has_accused_rank = f.has_quorum_id = f.has_step = 1;
    f.rank = (uint32_t)(reporter % C.group_size);
    f.accused_group = vname;
    f.accused_rank = victim % C.group_size;
    f.quorum_id = c->m[j].qid;
    f.step = 0;
    f.reason = "bench: collective with the victim failed";
    env.body_case = PHALANX__ENVELOPE__BODY_FAILURE;
    env.failure = &f;
    client_send(c, j, &env);
}

static qtrack_t *qtrack(client_t *c, int64_t qid) {
    qtrack_t *t = &c->q[qid % QTRACK];
    if (t->qid != qid) {
        memset(t, 0, sizeof *t);
        t->qid = qid;
        t->n_groups = -1;
    }
    return t;
}

static void check_qdone(client_t *c, qtrack_t *t) {
    if (t->done || t->count < c->live) return;
    t->done = 1;
    report_t r = {.type = REP_QDONE, .qid = t->qid, .n_groups = t->n_groups, .victim_present = t->victim_present,
                  .first_ns = t->first, .last_ns = t->last, .frame_bytes = t->bytes};
    client_report(c, &r);
}

static void on_quorum(client_t *c, int j, const uint8_t *frame, size_t len, const uint8_t *body, size_t blen) {
    /* --liveness group: the coordinator pushes to leaders, and a leader
     * forwards the frame to its ranks (simulated here, in process). */
    if (C.group_liveness && (c->lo + j) % C.group_size == 0)
        for (int r = 1; r < C.group_size && j + r < c->n; r++)
            if (c->m[j + r].alive && c->m[j + r].led) on_quorum(c, j + r, frame, len, body, blen);
    int64_t t = now_ns();
    int64_t qid = pb_field_varint(body, blen, 1);
    c->st.quorum_msgs++;
    c->st.quorum_bytes += len;
    /* A real worker decodes through px_wire_decode_max, which refuses coordinator frames above PX_WIRE_MAX_REPLY. */
    if (len > PX_WIRE_MAX_REPLY) c->st.oversized++;
    if (qid <= c->m[j].qid) return;
    c->m[j].qid = qid;
    qtrack_t *q = qtrack(c, qid);
    if (q->count == 0) {
        q->first = t;
        q->bytes = (uint32_t)len;
        Phalanx__Envelope *env = phalanx__envelope__unpack(NULL, len, frame);
        if (!env || env->body_case != PHALANX__ENVELOPE__BODY_QUORUM) client_fatal(c, "undecodable Quorum of %zu bytes", len);
        const Phalanx__Quorum *qm = env->quorum;
        q->n_groups = qm->has_base_id ? (int)qm->n_groups_total : (int)qm->n_groups;
        for (size_t i = 0; i < qm->n_groups; i++)
            if (c->victim_group[0] && strcmp(qm->groups[i]->name, c->victim_group) == 0) q->victim_present = 1;
        if (qm->has_base_id && c->victim_group[0]) { /* a delta: unless removed, the victim is still there */
            q->victim_present = 1;
            for (size_t i = 0; i < qm->n_removed; i++)
                if (strcmp(qm->removed[i], c->victim_group) == 0) q->victim_present = 0;
        }
        phalanx__envelope__free_unpacked(env, NULL);
    }
    q->count++;
    q->last = t;
    check_qdone(c, q);
}

static void on_frame(client_t *c, int j, const uint8_t *buf, size_t len) {
    uint64_t rid;
    const uint8_t *body = NULL;
    size_t blen = 0;
    int f = env_body(buf, len, &rid, &body, &blen);
    member_t *m = &c->m[j];
    switch (f) {
    case 13: /* HeartbeatAck */
        c->st.acks++;
        note_leader(c, j, buf, len);
        if (m->udp && body && pb_field_varint(body, blen, 6) == 1) { /* udp_off */
            m->udp = 0;
            c->st.udp_off++;
        }
        if (rid == 0 || rid == m->last_req) /* an ack answers the latest heartbeat */
            c->hist[hist_bucket((uint64_t)(now_ns() - m->last_send) / 1000)]++;
        break;
    case 11: /* RegisterAck */
        if (!m->registered) {
            m->registered = 1;
            if (!m->ever_registered) {
                m->ever_registered = 1;
                c->st.t1 = now_ns();
                if (++c->n_registered == c->n) {
                    report_t r = {.type = REP_REGISTERED, .t0 = c->st.t0, .t1 = c->st.t1};
                    client_report(c, &r);
                }
            }
        }
        note_leader(c, j, buf, len);
        udp_offer(c, j, buf, len);
        break;
    case 15: on_quorum(c, j, buf, len, body, blen); break;
    case 23: break; /* Ack (failure report) */
    case 22: {       /* Error */
        c->st.errors++;
        /* Like worker/agent.c: a coordinator that no longer knows us (it
         * declared us lost, or restarted) gets a new Register. */
        if (m->registered && body && pb_field_varint(body, blen, 1) == PHALANX__ERROR_CODE__UNKNOWN_MEMBER) {
            m->registered = 0;
            m->next_register = 0;
        }
        if (!c->st.msg[0]) {
            Phalanx__Envelope *e = phalanx__envelope__unpack(NULL, len, buf);
            if (e && e->body_case == PHALANX__ENVELOPE__BODY_ERROR)
                snprintf(c->st.msg, sizeof c->st.msg, "member %d: %s: %s", c->lo + j, px_wire_error_name(e->error->code),
                         e->error->message ? e->error->message : "");
            if (e) phalanx__envelope__free_unpacked(e, NULL);
        }
        break;
    }
    default: break;
    }
}

/* Reads everything waiting on member j. ZMQ_FD is edge-like: the socket must
 * be drained until ZMQ_EVENTS says so, and checked again after each send. */
static void drain(client_t *c, int j) {
    member_t *m = &c->m[j];
    if (C.zmtp) return;
    for (;;) {
        int ev = 0;
        size_t sz = sizeof ev;
        if (!m->alive || zmq_getsockopt(m->sock, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN)) return;
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, m->sock, ZMQ_DONTWAIT) >= 0) on_frame(c, j, zmq_msg_data(&msg), zmq_msg_size(&msg));
        zmq_msg_close(&msg);
    }
}

static void client_kill(client_t *c, const cmd_t *k) {
    snprintf(c->victim_group, sizeof c->victim_group, "%s", k->victim_group);
    if (k->victim < 0) return; /* only told which group must leave the quorum */
    int j = k->victim - c->lo;
    c->t_kill = now_ns();
    member_close(c, j);
    /* A dead leader's ranks fall back to heartbeating the coordinator; under
     * --transient-ranks they closed their connections and cannot, so they go
     * with it (the coordinator loses them: closed and no longer reported). */
    if (C.group_liveness && k->victim % C.group_size == 0)
        for (int r = 1; r < C.group_size && j + r < c->n; r++) {
            member_t *x = &c->m[j + r];
            x->led = 0;
            if (x->closed && x->alive) {
                x->alive = 0;
                c->live--;
            }
        }
    if (k->mode == KILL_REPORT) {
        c->report_pending = 1;
        c->reporter = k->reporter;
        c->victim = k->victim;
        c->report_at = c->t_kill + (int64_t)k->delay_ms * 1000000;
    } else {
        report_t r = {.type = REP_KILLED, .t0 = c->t_kill, .t1 = 0};
        client_report(c, &r);
    }
}

static void client_command(client_t *c) {
    cmd_t k;
    if (read_full(c->cmd_fd, &k, sizeof k) != 0) _exit(0); /* the driver is gone */
    switch (k.type) {
    case CMD_REQUEST_QUORUM:
        for (int j = 0; j < c->n; j++)
            if (c->m[j].alive && !c->m[j].closed) send_quorum_request(c, j);
        break;
    case CMD_STATS: {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        c->st.type = REP_STATS;
        uint64_t cpu = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
                       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
        c->st.cpu_ns = cpu - c->cpu_at_reset; /* since the last reset, like every other counter */
        if (k.reset) c->cpu_at_reset = cpu;
        for (int i = 0; i < HIST_N; i++) c->st.hist[i] = (uint32_t)(c->hist[i] > UINT32_MAX ? UINT32_MAX : c->hist[i]);
        client_report(c, &c->st);
        if (k.reset) {
            int64_t t0 = c->st.t0, t1 = c->st.t1;
            memset(&c->st, 0, sizeof c->st);
            memset(c->hist, 0, sizeof c->hist);
            c->st.t0 = t0, c->st.t1 = t1;
        }
        break;
    }
    case CMD_KILL: client_kill(c, &k); break;
    case CMD_QUIT:
        for (int j = 0; j < c->n; j++)
            if (c->m[j].alive) member_close(c, j);
        if (c->ctx) zmq_ctx_term(c->ctx);
        _exit(0);
    }
}

static void client_main(int id, int lo, int hi, int cmd_fd, int rep_fd) {
    client_t *c = calloc(1, sizeof *c);
    c->id = id, c->lo = lo, c->hi = hi, c->n = hi - lo;
    c->cmd_fd = cmd_fd, c->rep_fd = rep_fd;
    c->udp_fd = -1;
    c->m = calloc((size_t)c->n, sizeof *c->m);
    if (!C.zmtp) {
        c->ctx = zmq_ctx_new();
        zmq_ctx_set(c->ctx, ZMQ_MAX_SOCKETS, c->n + 64);
    }
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    epoll_ctl(c->ep, EPOLL_CTL_ADD, cmd_fd, &ev);
    c->st.t0 = now_ns();
    int opened = 0; /* members join over --ramp-ms, as a real job's workers start over seconds */
    /* Heartbeats: member j beats in millisecond slot (j mod period). */
    const int period = 1000 / C.rate_hz;
    int64_t start = now_ns(), done_tick = 0;
    struct epoll_event evs[512];
    for (;;) {
        int64_t now = now_ns();
        int64_t tick = (now - start) / 1000000;
        /* At most 64 connections in their handshake: a burst of connects
         * overflows the coordinator's listen backlog (libzmq: 100), and
         * dropped SYNs come back only after seconds of TCP backoff. */
        int due = C.ramp_ms ? (int)((int64_t)c->n * (tick + 1) / C.ramp_ms) : c->n;
        for (; opened < c->n && opened < due && c->handshaking < 64; opened++) {
            member_open(c, opened);
            send_register(c, opened);
        }
        if (tick - done_tick > period) done_tick = tick - period; /* fell behind a whole period: skip, do not burst */
        while (done_tick < tick) {
            done_tick++;
            for (int j = (int)(done_tick % period); j < c->n; j += period) {
                member_t *m = &c->m[j];
                if (!m->alive) continue;
                if (m->registered) {
                    if (!m->led) send_heartbeat(c, j); /* a led rank's leader reports for it */
                    else maybe_close_transient(c, j);
                } else if (m->ever_registered && now >= m->next_register) {
                    send_register(c, j); /* at most every 500 ms, like the agent */
                    m->next_register = now + 500000000;
                    c->st.reregisters++;
                }
            }
        }
        if (c->n_udp) udp_flush(c);
        if (c->report_pending && now >= c->report_at) {
            c->report_pending = 0;
            int64_t t_report = now_ns();
            send_failure_report(c, c->reporter, c->victim);
            report_t r = {.type = REP_KILLED, .t0 = c->t_kill, .t1 = t_report};
            client_report(c, &r);
        }
        int n = epoll_wait(c->ep, evs, 512, 1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == UINT64_MAX) client_command(c);
            else if (C.zmtp) zmtp_event(c, (int)evs[i].data.u64, evs[i].events);
            else drain(c, (int)evs[i].data.u64);
        }
    }
}

/* ---- driver ------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int cmd_fd, rep_fd, lo, hi;
    report_t last_qdone, killed, stats;
    int have_qdone, have_killed, have_stats, registered;
} child_t;

static child_t K[MAX_PROCS];
static int NK;
static pid_t coord_pid;
static int64_t reg_t0 = INT64_MAX, reg_t1;

static void handle_report(const report_t *r) {
    child_t *k = &K[r->child];
    switch (r->type) {
    case REP_FATAL: die("client %d: %s", r->child, r->msg);
    case REP_REGISTERED:
        k->registered = 1;
        if (r->t0 < reg_t0) reg_t0 = r->t0;
        if (r->t1 > reg_t1) reg_t1 = r->t1;
        break;
    case REP_QDONE:
        if (!k->have_qdone || r->qid > k->last_qdone.qid) k->last_qdone = *r;
        k->have_qdone = 1;
        break;
    case REP_KILLED: k->killed = *r, k->have_killed = 1; break;
    case REP_STATS: k->stats = *r, k->have_stats = 1; break;
    }
}

/* Reads reports until pred() holds or timeout_ms passes; 0 when it held. */
static int wait_for(int (*pred)(void *), void *arg, int timeout_ms) {
    int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000;
    while (!pred(arg)) {
        int64_t left = (deadline - now_ns()) / 1000000;
        if (left <= 0) return -1;
        struct pollfd p[MAX_PROCS];
        for (int i = 0; i < NK; i++) p[i] = (struct pollfd){K[i].rep_fd, POLLIN, 0};
        int rc = poll(p, (nfds_t)NK, (int)(left > 100 ? 100 : left));
        if (rc < 0 && errno != EINTR) die("poll: %s", strerror(errno));
        for (int i = 0; i < NK; i++) {
            if (p[i].revents & (POLLIN | POLLHUP)) {
                report_t r;
                if (read_full(K[i].rep_fd, &r, sizeof r) != 0) die("client %d exited unexpectedly", i);
                handle_report(&r);
            }
        }
        if (coord_pid > 0 && waitpid(coord_pid, NULL, WNOHANG) == coord_pid) die("the coordinator exited");
    }
    return 0;
}

/* On any exit of the driver: stop the coordinator it started (clients exit
 * by themselves when their command pipe closes). */
static void cleanup(void) {
    fflush(stdout);
    if (coord_pid > 0 && getpid() != coord_pid) {
        kill(coord_pid, SIGTERM);
        /* A coordinator that does not stop within 10 s is killed: a
         * benchmark never hangs on it (and says so). */
        int64_t until = now_ns() + 10 * 1000000000LL;
        while (waitpid(coord_pid, NULL, WNOHANG) == 0) {
            if (now_ns() > until) {
                fprintf(stderr, "%s: the coordinator did not stop within 10 s of SIGTERM: killed\n", PROG);
                kill(coord_pid, SIGKILL);
                waitpid(coord_pid, NULL, 0);
                break;
            }
            sleep_ms(20);
        }
        coord_pid = 0;
    }
}

static void send_cmd(int i, const cmd_t *k) { write_full(K[i].cmd_fd, k, sizeof *k); }

static int all_registered(void *a) {
    (void)a;
    for (int i = 0; i < NK; i++)
        if (!K[i].registered) return 0;
    return 1;
}

static int all_stats(void *a) {
    (void)a;
    for (int i = 0; i < NK; i++)
        if (!K[i].have_stats) return 0;
    return 1;
}

static int all_killed(void *a) {
    int owner = *(int *)a;
    return K[owner].have_killed;
}

typedef struct {
    int64_t after_qid;
    int n_groups;
} qwant_t;

static int all_have_quorum(void *a) {
    const qwant_t *w = a;
    int64_t qid = -1;
    for (int i = 0; i < NK; i++) {
        const report_t *r = &K[i].last_qdone;
        if (!K[i].have_qdone || r->qid <= w->after_qid || r->n_groups != w->n_groups || r->victim_present) return 0;
        if (qid >= 0 && r->qid != qid) return 0;
        qid = r->qid;
    }
    return 1;
}

/* Aggregated client stats over all children. */
typedef struct {
    uint64_t hb_sent, hb_dropped, acks, errors, quorum_msgs, quorum_bytes, oversized, cpu_ns, reregisters, reconnects;
    uint64_t hb_udp, udp_off;
    uint64_t hist[HIST_N];
    char msg[160];
} agg_t;

static agg_t collect_stats(int reset) {
    for (int i = 0; i < NK; i++) K[i].have_stats = 0;
    cmd_t k = {.type = CMD_STATS, .reset = reset};
    for (int i = 0; i < NK; i++) send_cmd(i, &k);
    if (wait_for(all_stats, NULL, 60000) != 0) die("clients did not report stats within 60 s");
    agg_t a = {0};
    for (int i = 0; i < NK; i++) {
        const report_t *r = &K[i].stats;
        a.hb_sent += r->hb_sent, a.hb_dropped += r->hb_dropped, a.acks += r->acks, a.errors += r->errors;
        a.quorum_msgs += r->quorum_msgs, a.quorum_bytes += r->quorum_bytes, a.oversized += r->oversized;
        a.cpu_ns += r->cpu_ns, a.reregisters += r->reregisters, a.reconnects += r->reconnects;
        a.hb_udp += r->hb_udp, a.udp_off += r->udp_off;
        for (int b = 0; b < HIST_N; b++) a.hist[b] += r->hist[b];
        if (!a.msg[0] && r->msg[0]) snprintf(a.msg, sizeof a.msg, "%s", r->msg);
    }
    return a;
}

/* ---- the coordinator from outside: /proc, HTTP, event log ------------------- */

static double proc_cpu_s(pid_t pid) { /* utime + stime */
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may hold spaces */
    if (!p) return NAN;
    unsigned long long ut = 0, st = 0;
    /* fields after comm: state(3) ... utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long proc_rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

/* GET path from the coordinator's HTTP server; returns the body (malloc'd). */
static char *http_get(const char *path, size_t *len_out, double *ms_out) {
    char host[256];
    snprintf(host, sizeof host, "%s", C.http);
    char *colon = strrchr(host, ':');
    if (!colon) die("--http: expected HOST:PORT");
    *colon = '\0';
    int port = atoi(colon + 1);
    int64_t t0 = now_ns();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("http %s: %s", C.http, strerror(errno));
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) die("http write");
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    if (ms_out) *ms_out = (double)(now_ns() - t0) / 1e6;
    char *body = strstr(buf, "\r\n\r\n");
    body = body ? body + 4 : buf + len;
    if (len_out) *len_out = len - (size_t)(body - buf);
    memmove(buf, body, strlen(body) + 1);
    return buf;
}

/* A series' value in /metrics text, the series named without the job label
 * every sample starts with: "phalanx_heartbeats_total",
 * "phalanx_members{state=\"lost\"}". */
static double metric(const char *text, const char *name) {
    const char *brace = strchr(name, '{');
    size_t base = brace ? (size_t)(brace - name) : strlen(name);
    const char *rest = brace ? brace + 1 : "}"; /* the labels after job's, and the brace */
    size_t rest_n = strlen(rest);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, base) != 0 || strncmp(p + base, "{job=\"", 6) != 0) continue;
        const char *q = strchr(p + base + 6, '"');
        if (!q) continue;
        q++;
        if (brace && *q++ != ',') continue;
        if (strncmp(q, rest, rest_n) == 0 && q[rest_n] == ' ') return atof(q + rest_n + 1);
    }
    return NAN;
}

/* The event log, read incrementally: finds member_lost for a member and the
 * next quorum_formed, returning their timestamps (wall-clock ms). */
typedef struct {
    FILE *f;
    char reason[64];
} evlog_t;

static int64_t json_int(const char *line, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

static int json_str(const char *line, const char *key, char *out, size_t n) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":\"", key);
    const char *p = strstr(line, k);
    if (!p) return -1;
    p += strlen(k);
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < n) out[i++] = *p++;
    out[i] = '\0';
    return 0;
}

static int evlog_find_loss(evlog_t *e, const char *group, int rank, int64_t *lost_ms, int64_t *formed_ms,
                           int timeout_ms) {
    if (!e->f && C.events_path) e->f = fopen(C.events_path, "r");
    if (!e->f) return -1;
    *lost_ms = *formed_ms = -1;
    int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000;
    static char line[70000]; /* an event is at most 64 KiB (a large quorum_formed is) */
    while (now_ns() < deadline) {
        long pos = ftell(e->f);
        if (!fgets(line, sizeof line, e->f) || !strchr(line, '\n')) {
            fseek(e->f, pos, SEEK_SET); /* partial line: wait for the rest */
            clearerr(e->f);
            sleep_ms(20);
            continue;
        }
        char type[32] = "", g[NAME_MAX_LEN] = "";
        json_str(line, "type", type, sizeof type);
        if (*lost_ms < 0 && strcmp(type, "member_lost") == 0) {
            json_str(line, "group", g, sizeof g);
            if (strcmp(g, group) == 0 && json_int(line, "rank") == rank) {
                *lost_ms = json_int(line, "ts");
                json_str(line, "reason", e->reason, sizeof e->reason);
            }
        } else if (*lost_ms >= 0 && strcmp(type, "quorum_formed") == 0) {
            *formed_ms = json_int(line, "ts");
            return 0;
        }
    }
    return -1;
}

/* ---- starting the coordinator -------------------------------------------------- */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(0x7f000001);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static char g_endpoint[128], g_http[300], g_events[1024];

static void start_coordinator(void) {
    char dir[] = "/tmp/phalanx-bench-XXXXXX";
    if (!C.work_dir) {
        if (!mkdtemp(dir)) die("mkdtemp: %s", strerror(errno));
        C.work_dir = strdup(dir);
    }
    snprintf(g_endpoint, sizeof g_endpoint, "tcp://127.0.0.1:%d", free_port());
    snprintf(g_events, sizeof g_events, "%s/events.jsonl", C.work_dir);
    char ev_arg[1100], log_path[1100], hbi[16], hbt[16];
    snprintf(ev_arg, sizeof ev_arg, "file:%s", g_events);
    snprintf(log_path, sizeof log_path, "%s/coordinator.log", C.work_dir);
    snprintf(hbi, sizeof hbi, "%d", C.hb_interval_ms);
    snprintf(hbt, sizeof hbt, "%d", C.hb_timeout_ms);
    int out[2];
    if (pipe(out) != 0) die("pipe");
    pid_t parent = getpid();
    coord_pid = fork();
    if (coord_pid == 0) {
        px_child_die_with_parent(parent); /* a killed benchmark leaves no coordinator behind */
        dup2(out[1], 1);
        int lf = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (lf >= 0) dup2(lf, 2);
        close(out[0]);
        /* The join window must cover registering every member, so the first
         * quorum holds every group. */
        char join[32];
        long join_ms = 20000L + 2L * C.ramp_ms; /* large jobs take longer to register */
        snprintf(join, sizeof join, "%ld", join_ms < 600000 ? join_ms : 600000);
        char max_members[32]; /* room for every member and the ones lost meanwhile */
        snprintf(max_members, sizeof max_members, "%d", C.members * 2 > 65536 ? C.members * 2 : 65536);
        execl(C.coordinator, C.coordinator, "--bind", g_endpoint, "--http", "127.0.0.1:0", "--job", "bench",
              "--max-members", max_members, "--events",
              ev_arg, "--join-timeout-ms", join, "--heartbeat-interval-ms", hbi, "--heartbeat-timeout-ms", hbt,
              "--heartbeat-udp", C.udp ? "on" : "off", C.quiet ? "--quiet" : NULL, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", C.coordinator, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    char line[256] = "";
    FILE *f = fdopen(out[0], "r");
    if (!fgets(line, sizeof line, f) || strncmp(line, "http=", 5) != 0)
        die("%s did not start (log: %s)", C.coordinator, log_path);
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(g_http, sizeof g_http, "%s", line + 5);
    C.endpoint = g_endpoint, C.http = g_http, C.events_path = g_events, C.pid = coord_pid;
}

/* ---- summary helpers ----------------------------------------------------------- */

static void print_loadavg(const char *when) {
    char buf[128] = "";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
    printf("load average %s: %s (%ld CPUs online; other work on the machine inflates latencies)\n", when, buf,
           sysconf(_SC_NPROCESSORS_ONLN));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of n values (sorted in place). */
static double pct(double *v, int n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void print_dist(const char *what, double *v, int n) {
    if (n <= 0) {
        printf("  %-34s n/a\n", what);
        return;
    }
    double p50 = pct(v, n, 0.50), p99 = pct(v, n, 0.99), mx = v[n - 1];
    printf("  %-34s p50 %8.2f ms   p99 %8.2f ms   max %8.2f ms   (n=%d)\n", what, p50, p99, mx, n);
}

static void usage(void) {
    printf("usage: %s [flags]\n\n"
           "Load-tests phalanx-coordinator: N simulated members heartbeating over real ZeroMQ\n"
           "sockets from separate processes; prints heartbeats/s, the coordinator's CPU use and\n"
           "quorum latency after member losses (p50/p99).\n\n"
           "flags (default in brackets):\n"
           "  --members N            simulated members (ranks), 1..100000 [1000]\n"
           "  --group-size G         ranks per replica group, 1..1024 [2]\n"
           "  --liveness rank|group  rank: every member heartbeats; group: rank 0 of each group\n"
           "                         heartbeats with a digest for its ranks, the others only\n"
           "                         register (the worker's --liveness group) [rank]\n"
           "  --transient-ranks      with --liveness group --transport zmtp: ranks > 0 close their\n"
           "                         connection a second after their leader is named (it keeps\n"
           "                         reporting them), so 100,000 ranks fit a 20,000-descriptor limit;\n"
           "                         their idle connections' memory is then not measured [off]\n"
           "  --rate-hz R            heartbeats per member per second, 1..100 [10]\n"
           "  --procs P              client processes (0: one per 3000 members; zmtp: 1) [0]\n"
           "  --transport zmq|zmtp   clients use libzmq DEALERs, or speak ZMTP 3.0 over plain\n"
           "                         TCP sockets (same wire protocol, far less client CPU) [zmq]\n"
           "  --heartbeats udp|zmq   heartbeats as sealed UDP datagrams (sendmmsg batches; the\n"
           "                         coordinator it starts runs --heartbeat-udp on), or over each\n"
           "                         member's connection (--heartbeat-udp off) [udp]\n"
           "  --warmup-s S           steady state before measuring [2]\n"
           "  --measure-s S          measurement window [10]\n"
           "  --losses K             losses of each kind (report, kill) [20]\n"
           "  --ramp-ms MS           members connect and register spread over MS [members/5]\n"
           "  --report-delay-ms D    close -> failure report delay in 'report' losses [20]\n"
           "  --coordinator PATH     phalanx-coordinator to start [next to this program]\n"
           "  --heartbeat-timeout-ms N  passed to the coordinator it starts, with the interval\n"
           "                         1000/rate [10 intervals: 1000 at 10 Hz]\n"
           "  --quiet                start the coordinator with --quiet\n"
           "  --endpoint EP --http HOST:PORT --pid PID [--events PATH]\n"
           "                         use a running coordinator instead (it must run --job bench\n"
           "                         and a join window long enough to register everyone)\n",
           PROG);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log file as they are printed */
    C = (cfg_t){.members = 1000, .group_size = 2, .rate_hz = 10, .losses = 20, .warmup_s = 2, .measure_s = 10,
                .report_delay_ms = 20, .hb_timeout_ms = -1, .ramp_ms = -1, .udp = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            C.quiet = 1;
            continue;
        } else if (!strcmp(a, "--transient-ranks")) {
            C.transient = 1;
            continue;
        } else if (!strcmp(a, "--liveness") && v && (!strcmp(v, "rank") || !strcmp(v, "group"))) {
            C.group_liveness = !strcmp(v, "group");
            i++;
            continue;
        }
        if (!strcmp(a, "--heartbeats") && v && (!strcmp(v, "udp") || !strcmp(v, "zmq"))) {
            C.udp = !strcmp(v, "udp");
            i++;
            continue;
        }
        if (!strcmp(a, "--transport") && v && (!strcmp(v, "zmq") || !strcmp(v, "zmtp"))) {
            C.zmtp = !strcmp(v, "zmtp");
            i++;
            continue;
        }
        if (!v) die("%s needs a value", a);
#define INTFLAG(name, field, lo, hi)                                                          \
    else if (!strcmp(a, name)) {                                                              \
        char *e;                                                                              \
        long x = strtol(v, &e, 10);                                                           \
        if (*e || x < (lo) || x > (hi)) die("%s: bad value '%s': expected %d..%d", a, v, lo, hi); \
        C.field = (int)x;                                                                     \
    }
        if (0) {
        }
        INTFLAG("--members", members, 1, 100000)
        INTFLAG("--group-size", group_size, 1, 1024)
        INTFLAG("--rate-hz", rate_hz, 1, 100)
        INTFLAG("--procs", procs, 0, MAX_PROCS)
        INTFLAG("--warmup-s", warmup_s, 0, 600)
        INTFLAG("--measure-s", measure_s, 1, 600)
        INTFLAG("--losses", losses, 0, 1000)
        INTFLAG("--ramp-ms", ramp_ms, 0, 600000)
        INTFLAG("--report-delay-ms", report_delay_ms, 0, 200)
        INTFLAG("--heartbeat-timeout-ms", hb_timeout_ms, 50, 600000)
        INTFLAG("--pid", pid, 1, INT_MAX)
        else if (!strcmp(a, "--coordinator")) C.coordinator = v;
        else if (!strcmp(a, "--endpoint")) C.endpoint = v;
        else if (!strcmp(a, "--http")) C.http = v;
        else if (!strcmp(a, "--events")) C.events_path = v;
        else die("unknown flag '%s' (see --help)", a);
        i++;
#undef INTFLAG
    }
    if (C.transient && (!C.group_liveness || !C.zmtp)) die("--transient-ranks needs --liveness group --transport zmtp");
    C.hb_interval_ms = 1000 / C.rate_hz;
    if (C.hb_timeout_ms < 0) C.hb_timeout_ms = 10 * C.hb_interval_ms; /* the coordinator's defaults: 100 ms, 1 s */
    if (C.ramp_ms < 0) C.ramp_ms = C.members / 5;
    if (C.hb_timeout_ms <= C.hb_interval_ms) die("--heartbeat-timeout-ms must exceed the heartbeat interval");
    int n_groups = (C.members + C.group_size - 1) / C.group_size;
    if (C.members % C.group_size) die("--members must be a multiple of --group-size");
    if (!C.procs) C.procs = C.zmtp ? 1 : (C.members + 2999) / 3000;
    if (C.procs > C.members) C.procs = C.members;
    NK = C.procs;

    /* Each libzmq DEALER costs two descriptors (TCP connection, mailbox), a
     * zmtp member one. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int per_proc = (C.members + NK - 1) / NK;
    per_proc = (per_proc + C.group_size - 1) / C.group_size * C.group_size; /* a group never spans two clients */
    NK = (C.members + per_proc - 1) / per_proc;
    int open_at_once = C.transient ? per_proc / C.group_size + 64 : per_proc; /* transient ranks close */
    int fds = (C.zmtp ? 1 : 2) * open_at_once + 256;
    if ((rlim_t)fds > rl.rlim_cur)
        die("%d members per client need ~%d descriptors, the limit is %llu: raise --procs", per_proc, fds,
            (unsigned long long)rl.rlim_cur);

    static char coord_path[4096];
    if (!C.endpoint) {
        if (!C.coordinator) {
            snprintf(coord_path, sizeof coord_path, "%s", argv[0]);
            char *slash = strrchr(coord_path, '/');
            snprintf(slash ? slash + 1 : coord_path, sizeof coord_path - (size_t)(slash ? slash + 1 - coord_path : 0),
                     "phalanx-coordinator");
            C.coordinator = coord_path;
        }
        start_coordinator();
        atexit(cleanup);
    } else if (!C.http || !C.pid) {
        die("--endpoint needs --http and --pid as well");
    }
    signal(SIGPIPE, SIG_IGN);
    printf("coordinator_load: members=%d group_size=%d groups=%d rate=%d Hz liveness=%s (target %d heartbeats/s) procs=%d transport=%s\n",
           C.members, C.group_size, n_groups, C.rate_hz, C.group_liveness ? "group" : "rank",
           (C.group_liveness ? n_groups : C.members) * C.rate_hz, NK, C.zmtp ? "zmtp" : "zmq");
    printf("coordinator: pid=%d endpoint=%s http=%s events=%s%s\n", C.pid, C.endpoint, C.http,
           C.events_path ? C.events_path : "(none)", C.work_dir ? "" : "");
    if (C.work_dir) printf("work dir: %s\n", C.work_dir);
    print_loadavg("at start");
    fflush(stdout);

    /* Fork the clients; they die with this process (a killed benchmark leaves nothing behind). */
    pid_t parent = getpid();
    for (int i = 0; i < NK; i++) {
        int cmd[2], rep[2];
        if (pipe(cmd) != 0 || pipe(rep) != 0) die("pipe: %s", strerror(errno));
        K[i].lo = i * per_proc;
        K[i].hi = (i + 1) * per_proc < C.members ? (i + 1) * per_proc : C.members;
        pid_t p = fork();
        if (p == 0) {
            px_child_die_with_parent(parent);
            close(cmd[1]), close(rep[0]);
            for (int k = 0; k < i; k++) close(K[k].cmd_fd), close(K[k].rep_fd);
            client_main(i, K[i].lo, K[i].hi, cmd[0], rep[1]);
        }
        close(cmd[0]), close(rep[1]);
        K[i].pid = p, K[i].cmd_fd = cmd[1], K[i].rep_fd = rep[0];
    }

    /* 1. Register, then ask for a quorum holding every group. */
    int64_t t_start = now_ns();
    for (int waited = 0; wait_for(all_registered, NULL, 10000) != 0; waited += 10) {
        char *m = http_get("/metrics", NULL, NULL);
        printf("  ... %d s: members joining %.0f healthy %.0f lost %.0f, coordinator handles %.0f heartbeats/s\n", waited + 10,
               metric(m, "phalanx_members{state=\"joining\"}"), metric(m, "phalanx_members{state=\"healthy\"}"),
               metric(m, "phalanx_members{state=\"lost\"}"), metric(m, "phalanx_heartbeats_per_second"));
        free(m);
        fflush(stdout);
        if (waited + 10 >= 120) die("members did not all register within 120 s");
    }
    printf("registered %d members in %.0f ms\n", C.members, (double)(reg_t1 - reg_t0) / 1e6);
    int64_t t_req = now_ns();
    cmd_t req = {.type = CMD_REQUEST_QUORUM};
    for (int i = 0; i < NK; i++) send_cmd(i, &req);
    qwant_t want = {0, n_groups};
    if (wait_for(all_have_quorum, &want, 120000) != 0) die("no quorum with all %d groups reached every member", n_groups);
    int64_t qid = K[0].last_qdone.qid;
    uint32_t qbytes = K[0].last_qdone.frame_bytes;
    printf("quorum %" PRId64 " with %d groups at every member %.0f ms after the requests (%.1f s after start); "
           "Quorum frame %u bytes%s\n",
           qid, n_groups, (double)(now_ns() - t_req) / 1e6, (double)(now_ns() - t_start) / 1e9, qbytes,
           qbytes > PX_WIRE_MAX_REPLY ? " -- ABOVE PX_WIRE_MAX_REPLY: a real worker rejects it as OVERSIZED" : "");
    fflush(stdout);

    /* 2. Steady state. The first quorum's fan-out can leave a backlog that
     * would count as extra throughput: wait until the clients' ack rate has
     * matched the target for two consecutive seconds (at most 60 s). */
    sleep_ms((int64_t)C.warmup_s * 1000);
    /* Under --liveness group only the leaders heartbeat the coordinator. */
    double target = (double)(C.group_liveness ? n_groups : C.members) * C.rate_hz;
    collect_stats(1);
    int settled = 0, waited_s = 0;
    /* The coordinator acks a heartbeat only when it has news or once a
     * second, so what settles is the rate it handles (its own counter). */
    char *mt = http_get("/metrics", NULL, NULL);
    double hb_prev = metric(mt, "phalanx_heartbeats_total");
    free(mt);
    /* Judged over the last two seconds, not one: at 100,000 ranks single
     * seconds read from /metrics swing by a factor of two (a response
     * written early or late in its second), their pairs do not. */
    double rate = 0, hb_old = hb_prev;
    int64_t t_old = now_ns();
    for (int64_t t = t_old; settled < 1 && waited_s < 60; waited_s++) {
        sleep_ms(1000);
        mt = http_get("/metrics", NULL, NULL);
        double hb_now = metric(mt, "phalanx_heartbeats_total");
        free(mt);
        int64_t t2 = now_ns();
        if (waited_s >= 1) {
            rate = (hb_now - hb_old) / ((double)(t2 - t_old) / 1e9);
            settled = fabs(rate - target) <= 0.05 * target;
        }
        hb_old = hb_prev, t_old = t;
        t = t2;
        hb_prev = hb_now;
    }
    printf("%s after %d s more (heartbeats handled within 5%% of the target rate over 2 s: %.0f /s)\n",
           settled ? "settled" : "NOT settled", waited_s, rate);
    collect_stats(1);
    char *m0 = http_get("/metrics", NULL, NULL);
    double hb0 = metric(m0, "phalanx_heartbeats_total");
    free(m0);
    double cpu0 = proc_cpu_s(C.pid);
    int64_t w0 = now_ns();
    sleep_ms((int64_t)C.measure_s * 1000);
    double cpu1 = proc_cpu_s(C.pid);
    int64_t w1 = now_ns();
    double t_metrics_ms, t_status_ms;
    size_t status_len;
    char *m1 = http_get("/metrics", NULL, &t_metrics_ms);
    double hb1 = metric(m1, "phalanx_heartbeats_total"), hbps = metric(m1, "phalanx_heartbeats_per_second");
    double lost_members = metric(m1, "phalanx_members{state=\"lost\"}");
    free(m1);
    agg_t s = collect_stats(1);
    free(http_get("/status", &status_len, &t_status_ms));
    double win = (double)(w1 - w0) / 1e9;
    double coord_rate = (hb1 - hb0) / win, ack_rate = (double)s.acks / win;
    double cpu_pct = 100.0 * (cpu1 - cpu0) / win;
    double client_cpu_pct = 100.0 * (double)s.cpu_ns / 1e9 / win;
    printf("\nsteady state (%.1f s window):\n", win);
    printf("  heartbeats handled (coordinator)   %.0f /s = %.1f%% of target %.0f /s (its last-second gauge: %.0f /s)\n",
           coord_rate, 100.0 * coord_rate / target, target, hbps);
    printf("  heartbeat acks received (clients)  %.0f /s (answered only with news, else once a second per member); sent %.0f /s, dropped %" PRIu64
           ", errors %" PRIu64 "%s%s\n",
           ack_rate, (double)s.hb_sent / win, s.hb_dropped, s.errors, s.msg[0] ? ": " : "",
           s.msg);
    printf("  heartbeats as UDP datagrams        %.1f%% of those sent (%" PRIu64 " members told udp_off)\n",
           s.hb_sent ? 100.0 * (double)s.hb_udp / (double)s.hb_sent : 0.0, s.udp_off);
    if (s.hb_udp < s.hb_sent)
        printf("  heartbeat round trip               p50 %.2f ms   p99 %.2f ms (answered ones)\n",
               hist_quantile(s.hist, 0.5) / 1000.0, hist_quantile(s.hist, 0.99) / 1000.0);
    else
        printf("  heartbeat round trip               - (datagrams are not answered)\n");
    printf("  coordinator CPU (utime+stime)      %.1f%% of one core (%.2f us per heartbeat)\n", cpu_pct,
           coord_rate > 0 ? (cpu1 - cpu0) * 1e6 / (coord_rate * win) : NAN);
    printf("  client CPU (all %d processes)       %.1f%% of one core\n", NK, client_cpu_pct);
    printf("  members lost so far                 %.0f (in the window: %" PRIu64 " re-registrations after UNKNOWN_MEMBER, %" PRIu64
           " reconnects)\n",
           lost_members, s.reregisters, s.reconnects);
    printf("  GET /metrics %.1f ms, GET /status %.1f ms (%zu bytes)\n", t_metrics_ms, t_status_ms, status_len);
    fflush(stdout);

    /* 3. Losses, one at a time, spread over the groups. */
    int total_losses = 2 * C.losses;
    double *rep_first = calloc((size_t)C.losses + 1, sizeof(double)), *rep_all = calloc((size_t)C.losses + 1, sizeof(double));
    double *rep_loss = calloc((size_t)C.losses + 1, sizeof(double));
    double *kill_first = calloc((size_t)C.losses + 1, sizeof(double)), *kill_all = calloc((size_t)C.losses + 1, sizeof(double));
    double *det_first = calloc((size_t)total_losses + 1, sizeof(double)), *det_formed = calloc((size_t)total_losses + 1, sizeof(double));
    double *kill_det_first = calloc((size_t)C.losses + 1, sizeof(double));
    double *cpu_per_q = calloc((size_t)total_losses + 1, sizeof(double));
    int n_rep = 0, n_kill = 0, n_det = 0, n_kdet = 0, n_cpu = 0, wrong_reason = 0;
    uint32_t max_qbytes = qbytes;
    evlog_t ev = {0};
    int stride = total_losses ? n_groups / (total_losses + 1) : 0;
    if (total_losses && stride < 3) die("too many --losses for %d groups", n_groups);
    unsigned seed = 12345;
    int groups_now = n_groups;
    double loss_cpu0 = proc_cpu_s(C.pid);
    int64_t loss_t0 = now_ns();
    for (int r = 0; r < total_losses; r++) {
        int mode = r < C.losses ? KILL_REPORT : KILL_SILENT;
        int vgroup = (r + 1) * stride;
        int victim = vgroup * C.group_size + (r % C.group_size);
        int owner = victim / per_proc;
        int reporter = (vgroup + 1) * C.group_size;
        if (reporter / per_proc != owner) reporter = (vgroup - 1) * C.group_size;
        if (reporter / per_proc != owner) die("no reporter next to member %d in its client", victim);
        cmd_t k = {.type = CMD_KILL, .victim = victim, .reporter = reporter, .mode = mode, .delay_ms = C.report_delay_ms};
        group_name(k.victim_group, sizeof k.victim_group, victim);
        /* Every client learns the victim's group (to check the new quorum
         * lacks it); the stats round trip makes sure they all have. */
        for (int i = 0; i < NK; i++) {
            K[i].have_killed = K[i].have_stats = 0;
            cmd_t note = k;
            note.victim = -1;
            if (i != owner) send_cmd(i, &note);
            send_cmd(i, &(cmd_t){.type = CMD_STATS, .reset = 0});
        }
        if (wait_for(all_stats, NULL, 60000) != 0) die("clients did not answer within 60 s");
        double c0 = proc_cpu_s(C.pid);
        send_cmd(owner, &k);
        if (wait_for(all_killed, &owner, 10000) != 0) die("client %d did not kill member %d", owner, victim);
        int64_t t_kill = K[owner].killed.t0, t_report = K[owner].killed.t1;
        qwant_t w = {qid, groups_now - 1};
        if (wait_for(all_have_quorum, &w, 30000) != 0) {
            printf("loss %d (member %d, %s): no quorum without group %s reached every member within 30 s\n", r, victim,
                   mode == KILL_REPORT ? "report" : "kill", k.victim_group);
            break;
        }
        double c1 = proc_cpu_s(C.pid);
        int64_t first = INT64_MAX, last = 0;
        for (int i = 0; i < NK; i++) {
            if (K[i].last_qdone.first_ns < first) first = K[i].last_qdone.first_ns;
            if (K[i].last_qdone.last_ns > last) last = K[i].last_qdone.last_ns;
            if (K[i].last_qdone.frame_bytes > max_qbytes) max_qbytes = K[i].last_qdone.frame_bytes;
        }
        qid = K[0].last_qdone.qid;
        groups_now--;
        if (mode == KILL_REPORT) {
            rep_first[n_rep] = (double)(first - t_report) / 1e6;
            rep_all[n_rep] = (double)(last - t_report) / 1e6;
            rep_loss[n_rep++] = (double)(first - t_kill) / 1e6;
        } else {
            kill_first[n_kill] = (double)(first - t_kill) / 1e6;
            kill_all[n_kill++] = (double)(last - t_kill) / 1e6;
        }
        cpu_per_q[n_cpu++] = (c1 - c0) * 1000.0;
        int64_t lost_ms, formed_ms;
        if (C.events_path && evlog_find_loss(&ev, k.victim_group, victim % C.group_size, &lost_ms, &formed_ms, 3000) == 0) {
            int64_t off = wall_ns() - now_ns(); /* wall = mono + off */
            double det_mono = (double)(lost_ms * 1000000 - off);
            det_first[n_det] = ((double)first - det_mono) / 1e6;
            det_formed[n_det++] = (double)(formed_ms - lost_ms);
            if (getenv("BENCH_DEBUG"))
                printf("  loss %d: kill %.3f report %.3f lost %.3f formed %.3f first %.3f last %.3f (ms, wall mod 100 s)\n", r,
                       fmod((double)(t_kill + off) / 1e6, 1e5), t_report ? fmod((double)(t_report + off) / 1e6, 1e5) : 0.0,
                       fmod((double)lost_ms, 1e5), fmod((double)formed_ms, 1e5), fmod((double)(first + off) / 1e6, 1e5),
                       fmod((double)(last + off) / 1e6, 1e5));
            if (mode == KILL_SILENT) kill_det_first[n_kdet++] = ((double)first - det_mono) / 1e6;
            const char *want_reason = mode == KILL_REPORT ? "reported_and_disconnected" : "disconnected_and_silent";
            if (strcmp(ev.reason, want_reason) != 0) {
                wrong_reason++;
                printf("  loss %d: member_lost reason %s, expected %s\n", r, ev.reason, want_reason);
            }
        }
        sleep_ms(150 + rand_r(&seed) % 200); /* the next kill lands at another heartbeat phase */
    }
    double loss_cpu1 = proc_cpu_s(C.pid);
    double loss_win = (double)(now_ns() - loss_t0) / 1e9;
    agg_t ls = collect_stats(1);

    printf("\nquorum after a member loss (%d 'report' + %d 'kill' losses; groups %d -> %d):\n", n_rep, n_kill, n_groups,
           groups_now);
    print_dist("report -> quorum at first member", rep_first, n_rep);
    print_dist("report -> quorum at every member", rep_all, n_rep);
    print_dist("report: close -> quorum (first)", rep_loss, n_rep);
    print_dist("kill -> quorum at first member", kill_first, n_kill);
    print_dist("kill -> quorum at every member", kill_all, n_kill);
    print_dist("kill: detection -> quorum (first)", kill_det_first, n_kdet);
    print_dist("detection -> quorum (first, all)", det_first, n_det);
    print_dist("member_lost -> quorum_formed (log)", det_formed, n_det);
    print_dist("coordinator CPU per loss+quorum", cpu_per_q, n_cpu);
    printf("  (CPU per loss is the /proc delta between the kill and the last push: it includes\n"
           "   the heartbeats handled meanwhile; /proc/PID/stat counts in %ld ms ticks)\n",
           1000 / sysconf(_SC_CLK_TCK));
    printf("  coordinator CPU over the loss phase %.1f%% of one core; largest Quorum frame %u bytes%s\n",
           100.0 * (loss_cpu1 - loss_cpu0) / loss_win, max_qbytes,
           max_qbytes > PX_WIRE_MAX_REPLY ? " (above PX_WIRE_MAX_REPLY)" : "");
    printf("  pushed Quorum frames above PX_WIRE_MAX_REPLY (%d bytes), which real workers reject: %" PRIu64 "\n",
           PX_WIRE_MAX_REPLY, s.oversized + ls.oversized);
    if (wrong_reason) printf("  %d losses had an unexpected member_lost reason\n", wrong_reason);
    printf("  coordinator peak RSS %ld KiB\n", proc_rss_kb(C.pid));

    print_loadavg("at end");

    /* The coordinator's load targets (docs/benchmarks.md). */
    double det_p99 = n_rep ? pct(rep_first, n_rep, 0.99) : NAN;
    printf("\ntargets:\n");
    printf("  %d members at %d Hz within one core: %.1f%% of one core, %.1f%% of heartbeats handled -> %s\n", C.members,
           C.rate_hz, cpu_pct, 100.0 * coord_rate / target,
           cpu_pct <= 100.0 && coord_rate >= 0.95 * target ? "MET" : "NOT MET");
    printf("  new quorum < 50 ms after loss detection: p99 %.2f ms (report->first member) -> %s\n", det_p99,
           det_p99 < 50.0 ? "MET" : "NOT MET");
    printf("RESULT heartbeats=%s liveness=%s members=%d group_size=%d hb_per_s=%.0f hb_target=%.0f cpu_pct=%.1f client_cpu_pct=%.1f "
           "rtt_p50_ms=%.2f rtt_p99_ms=%.2f det_to_quorum_p50_ms=%.2f det_to_quorum_p99_ms=%.2f "
           "det_to_all_p99_ms=%.2f kill_to_quorum_p50_ms=%.2f kill_to_quorum_p99_ms=%.2f quorum_frame_bytes=%u\n",
           s.hb_udp * 2 > s.hb_sent ? "udp" : "zmq", C.group_liveness ? "group" : "rank", C.members, C.group_size,
           coord_rate, target, cpu_pct, client_cpu_pct, hist_quantile(s.hist, 0.5) / 1000.0,
           hist_quantile(s.hist, 0.99) / 1000.0, n_rep ? pct(rep_first, n_rep, 0.5) : NAN, det_p99,
           n_rep ? pct(rep_all, n_rep, 0.99) : NAN, n_kill ? pct(kill_first, n_kill, 0.5) : NAN,
           n_kill ? pct(kill_first, n_kill, 0.99) : NAN, max_qbytes);

    cmd_t quit = {.type = CMD_QUIT};
    for (int i = 0; i < NK; i++) send_cmd(i, &quit);
    for (int i = 0; i < NK; i++) waitpid(K[i].pid, NULL, 0);
    cleanup();
    return 0;
}
