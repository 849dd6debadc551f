/* Gloo backend of px_comm: the only C++ in phalanx, kept to a thin shim.
 *
 * From libgloo (Debian's 2022 snapshot, TCP transport) it uses the
 * rendezvous (connectFullMesh), the TCP pairs and unbound buffers (tagged,
 * asynchronous send/recv). On top it adds what px_comm promises:
 *
 *   - A rendezvous Store whose set/get/wait call the C px_store_t callbacks,
 *     bounded by the communicator's timeout (Gloo has no TCPStore).
 *   - Exceptions never cross into C: every call catches everything and maps
 *     it to a status and a message.
 *   - Prompt failure. Gloo wakes a waiting operation when a connection fails
 *     only if the operation is still queued on that pair; a send half written
 *     into the socket, or a receive half read, waits out the full timeout
 *     (seen in about one SIGKILL in six). So the collectives here are our own
 *     rings on buffers we own, and a watchdog thread per communicator waits
 *     on a "sentinel": a receive posted on every pair that no peer ever
 *     matches. Any pair failure fails the sentinel; the watchdog lets the
 *     operation in flight drain for up to 20 ms (a peer that finished and
 *     closed already sent its data), then interrupts its waits
 *     (abortWaitSend/Recv).
 *   - Poisoning: after any failure this rank closes all its connections, so
 *     its other peers fail at once instead of waiting out their timeouts.
 *     Gloo has no public "close everything and fail everything"; it does
 *     that itself when a wait times out, so poison() runs a 1 ms receive
 *     that nobody will match, then takes every pair's lock once more so that
 *     Gloo's I/O thread is done with our buffers before they are freed.
 *   - Abort from any thread: mark, poison, interrupt the waits.
 *   - Mismatched calls never match: a size mismatch between a send and its
 *     receive makes Gloo terminate the process, so slots carry a hash of the
 *     operation and its sizes; disagreeing ranks time out instead.
 *   - Fast closing: Gloo's I/O loop turns every 10 ms when idle and closing
 *     a connection waits for a turn; an eventfd keeps it turning meanwhile.
 *   - SIGPIPE protection: Gloo writes with writev(), which raises SIGPIPE on
 *     a connection the peer reset, and SIGPIPE kills a process by default.
 *     The signal is blocked while Gloo runs on the caller's thread (and in
 *     Gloo's I/O and our watchdog threads, which inherit the mask), and a
 *     SIGPIPE raised there is consumed: a dead peer becomes a status.
 *
 * Timeouts are end to end: every wait of an operation shares one deadline,
 * timeout_ms after the operation started. */
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "px_comm_backend.h"
#include "px_err.h"

namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using UnboundBuffer = gloo::transport::UnboundBuffer;

// Gloo matches a send with a receive by (pair, 64-bit slot), in order. A
// match whose sizes differ is fatal: Gloo's I/O thread throws and the process
// terminates. So every slot here carries a hash of what defines the sizes
// (operation, element count, root; for send/recv the byte count): a rank
// that calls a different operation or size never matches, and both sides
// end with a timeout instead of a crash.
//   bits 56..63 kind | collectives: 32..55 operation counter, 0..31 hash
//                    | send/recv:   24..55 tag,               0..23 hash
constexpr uint64_t kP2PSlot = 0x70;
constexpr uint64_t kCollectiveSlot = 0x71;
constexpr uint64_t kPoisonSlot = 0x72;
constexpr uint64_t kSentinelSlot = 0x73;

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
uint64_t p2pSlot(int tag, size_t bytes) {
    return (kP2PSlot << 56) | (static_cast<uint64_t>(tag) << 24) | (mix(bytes) & 0xffffff);
}

// Transfers are cut into segments so that adding a received segment overlaps
// with the transfer of the next ones.
constexpr size_t kSegmentFloats = 256 * 1024;  // 1 MiB

// The watchdog waits "forever"; a Gloo wait cannot be unbounded, and a timed
// out wait would poison the context, so forever is a long time.
constexpr auto kForever = std::chrono::hours(24 * 365);

// After a connection fails, how long the watchdog lets the operation in
// flight finish before interrupting it. A peer that completed the operation
// and closed its communicator sent its last data before closing, so that data
// is already here: the operation completes within microseconds unless it is
// truly stuck on the closed connection.
constexpr auto kDrainGrace = Ms(20);
// A pair's handshake during rendezvous, once every address is in the store
// (create): far above a live peer's, short for a peer that died.
constexpr int kConnectPairMs = 1000;

// Blocks SIGPIPE on this thread for the guard's lifetime; a SIGPIPE raised
// meanwhile (by Gloo writing to a reset socket) is consumed on the way out.
class SigpipeBlock {
  public:
    SigpipeBlock() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
        sigset_t pending;
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    }
    ~SigpipeBlock() {
        if (!was_pending_) {
            sigset_t pending;
            sigpending(&pending);
            if (sigismember(&pending, SIGPIPE) == 1) {
                struct timespec zero = {0, 0};
                sigtimedwait(&pipe_, nullptr, &zero);
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SigpipeBlock(const SigpipeBlock &) = delete;
    SigpipeBlock &operator=(const SigpipeBlock &) = delete;

  private:
    sigset_t pipe_, old_;
    bool was_pending_ = false;
};

// A rendezvous key that did not appear in time: a rank is missing.
struct StoreTimeout : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// gloo::rendezvous::Store over the C callbacks. Every wait is bounded by the
// communicator's creation deadline.
class CallbackStore : public gloo::rendezvous::Store {
  public:
    CallbackStore(const px_store_t &store, const std::string &prefix, Clock::time_point deadline)
        : store_(store), prefix_(prefix), deadline_(deadline) {}

    void set(const std::string &key, const std::vector<char> &data) override {
        const std::string k = full(key);
        if (store_.set(store_.ctx, k.c_str(), data.data(), data.size()) != 0)
            throw gloo::IoException("store set failed for key '" + k + "'");
    }

    std::vector<char> get(const std::string &key) override { return fetch(key, remainingMs()); }

    void wait(const std::vector<std::string> &keys) override {
        for (const auto &key : keys) fetch(key, remainingMs());
    }

    // Gloo passes its context timeout, which px_gloo_new shortens to bound
    // the connect phase; the store wait keeps the whole creation deadline.
    void wait(const std::vector<std::string> &keys, const Ms & /*timeout*/) override {
        for (const auto &key : keys) fetch(key, remainingMs());
    }

    // True when the key is already set (checked once, without waiting).
    bool existsNow(const std::string &key) {
        char probe[1];
        size_t len = 0;
        return store_.get(store_.ctx, full(key).c_str(), probe, sizeof(probe), &len, 0) == 0;
    }

    std::string full(const std::string &key) const { return prefix_ + "/" + key; }

  private:
    int remainingMs() const {
        auto left = std::chrono::duration_cast<Ms>(deadline_ - Clock::now()).count();
        return left > 0 ? static_cast<int>(left) : 0;
    }

    std::vector<char> fetch(const std::string &key, int timeoutMs) {
        const std::string k = full(key);
        std::vector<char> buf(512);
        size_t len = 0;
        int rc = store_.get(store_.ctx, k.c_str(), buf.data(), buf.size(), &len, timeoutMs);
        if (rc == 1)
            throw StoreTimeout("rendezvous key '" + k + "' not set in time (a rank is missing)");
        if (rc != 0) throw gloo::IoException("store get failed for key '" + k + "'");
        if (len > buf.size()) {  // value larger than our first guess: read again
            buf.resize(len);
            rc = store_.get(store_.ctx, k.c_str(), buf.data(), buf.size(), &len, 0);
            if (rc != 0 || len != buf.size())
                throw gloo::IoException("store value for key '" + k + "' changed while read");
        }
        buf.resize(len);
        return buf;
    }

    const px_store_t store_;
    const std::string prefix_;
    const Clock::time_point deadline_;
};

// Gloo's I/O loop sleeps in epoll_wait for up to 10 ms, and closing a
// connection from any other thread waits for the loop's next turn: 10 ms per
// connection. While we close connections (poison, destroy) an eventfd
// registered with the loop is kept readable and its handler leaves it so,
// which keeps the loop turning; closing then takes microseconds.
class LoopKicker : public gloo::transport::tcp::Handler {
  public:
    explicit LoopKicker(gloo::transport::tcp::Device &dev)
        : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + strerror(errno));
        dev.registerDescriptor(fd_, EPOLLIN, this);
    }
    ~LoopKicker() override { close(fd_); }
    LoopKicker(const LoopKicker &) = delete;
    LoopKicker &operator=(const LoopKicker &) = delete;

    void handleEvents(int /*events*/) override {}  // stay readable: keep turning

    void start() {
        std::lock_guard<std::mutex> lock(mu_);
        if (users_++ == 0) {
            uint64_t one = 1;
            if (write(fd_, &one, sizeof(one)) != sizeof(one)) {
            }  // at worst the loop turns at its usual 10 ms pace
        }
    }
    void stop() {
        std::lock_guard<std::mutex> lock(mu_);
        if (--users_ == 0) {
            uint64_t value;
            if (read(fd_, &value, sizeof(value)) != sizeof(value)) {
            }
        }
    }

  private:
    int fd_;
    std::mutex mu_;
    int users_ = 0;
};

// Keeps Gloo's loop turning for a scope (see LoopKicker).
class Kick {
  public:
    explicit Kick(LoopKicker *k) : k_(k) {
        if (k_) k_->start();
    }
    ~Kick() {
        if (k_) k_->stop();
    }
    Kick(const Kick &) = delete;
    Kick &operator=(const Kick &) = delete;

  private:
    LoopKicker *k_;
};

struct GlooComm {
    int rank = 0, size = 0;
    std::unique_ptr<LoopKicker> kicker;  // before dev: destroyed after the loop stops
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    bool connected = false;      // ctx's rendezvous completed: it has pairs
    uint32_t opSeq = 0;          // collectives issued so far (same on every rank)
    std::vector<float> scratch;  // received segments before they are added

    std::atomic<bool> aborted{false};
    std::atomic<bool> poisoned{false};     // every connection closed (poison() ran)
    std::mutex mu;                         // guards the fields down to inflight
    std::condition_variable opCv;          // signalled when an operation ends
    bool opRunning = false;                // inside run()
    bool failed = false;                   // a pair failed, or abort: no more waiting
    std::string failReason;                // why, for the status message
    std::vector<UnboundBuffer *> inflight;  // buffers the running operation waits on

    char sentinelByte = 0;
    std::unique_ptr<UnboundBuffer> sentinel;  // a recv posted on every pair, never matched
    std::atomic<bool> stopping{false};
    std::thread watchdog;
};

// Thrown inside an operation whose waits the watchdog or an abort interrupted.
struct Interrupted {};

// Marks the communicator failed and wakes every wait of the operation in
// flight. Any thread.
void interruptAll(GlooComm *g, const std::string &why) {
    std::lock_guard<std::mutex> lock(g->mu);
    if (!g->failed) g->failReason = why;
    g->failed = true;
    for (UnboundBuffer *b : g->inflight) {
        b->abortWaitSend();
        b->abortWaitRecv();
    }
    g->opCv.notify_all();
}

// Closes every connection of the context and fails everything pending on it,
// from any thread: Gloo does exactly that when a wait times out, so this
// runs a 1 ms receive that no peer will match. A pair that already failed
// throws at once instead of timing out; then the next peer is tried.
// hard: also reset the connections (Gloo's closeConnections: SO_LINGER 0),
// which drops unsent data; destroy closes softly so that the last bytes of
// a completed operation still reach a slower peer.
//
// Then it "settles": Gloo's I/O thread signals the buffers pending on a
// pair under that pair's lock, possibly just after this thread saw the pair
// fail. Taking every pair's lock once more after all of them failed (a
// receive on a failed pair locks it and throws) orders those signals before
// whatever this thread does next, such as freeing the buffers. So every
// thread that is about to free buffers calls poison() itself.
void poison(GlooComm *g, bool hard = true) {
    if (!g->connected) return;
    SigpipeBlock guard;
    Kick kick(g->kicker.get());
    char dummy = 0;
    const uint64_t slot = kPoisonSlot << 56;
    if (!g->poisoned.load()) {
        for (int peer = 0; peer < g->size; peer++) {
            if (peer == g->rank) continue;
            try {
                auto ub = g->ctx->createUnboundBuffer(&dummy, 1);
                ub->recv(peer, slot);
                ub->waitRecv(Ms(1));
            } catch (const std::exception &e) {
                if (std::strstr(e.what(), "Timed out")) break;
            } catch (...) {
            }
        }
        if (hard) {
            try {
                g->ctx->closeConnections();
            } catch (...) {
            }
        }
    }
    for (int round = 0; round < 3; round++) {
        bool allFailed = true;
        for (int peer = 0; peer < g->size; peer++) {
            if (peer == g->rank) continue;
            try {
                auto ub = g->ctx->createUnboundBuffer(&dummy, 1);
                ub->recv(peer, slot);  // throws on a failed pair
                allFailed = false;     // still open: fail it (and all) now
                ub->waitRecv(Ms(1));
            } catch (...) {
            }
        }
        if (allFailed) break;
    }
    g->poisoned.store(true);
}

// The watchdog: sleeps on the sentinel until a pair fails (the sentinel's
// wait throws) or destroy wakes it (abortWaitRecv, with stopping set). On a
// failure it lets the operation in flight finish if it can (kDrainGrace),
// then closes everything, so the peers learn at once, and wakes the
// operation if it is still waiting.
void watch(GlooComm *g) {
    std::string why;
    try {
        g->sentinel->waitRecv(nullptr, kForever);
        if (g->stopping.load()) return;
        why = "sentinel receive completed unexpectedly";
    } catch (const std::exception &e) {
        why = e.what();
    } catch (...) {
        why = "unknown exception on the sentinel";
    }
    if (g->stopping.load()) return;
    {
        std::unique_lock<std::mutex> lock(g->mu);
        g->opCv.wait_for(lock, kDrainGrace, [g] { return !g->opRunning || g->failed; });
    }
    poison(g);
    interruptAll(g, why);
}

// An unbound buffer that the watchdog can interrupt while an operation waits
// on it; every wait shares the operation's deadline.
//
// Destroyed while an exception unwinds the operation, it first poisons the
// context: until every pair is closed, Gloo's I/O thread may still be
// reading into or writing from this buffer.
class OpBuffer {
  public:
    OpBuffer(GlooComm *g, void *ptr, size_t bytes, Clock::time_point deadline)
        : g_(g), deadline_(deadline), unwinding_(std::uncaught_exceptions()),
          ub_(g->ctx->createUnboundBuffer(ptr, bytes)) {
        std::lock_guard<std::mutex> lock(g_->mu);
        if (g_->failed) throw Interrupted();
        g_->inflight.push_back(ub_.get());
    }
    ~OpBuffer() {
        if (std::uncaught_exceptions() > unwinding_) poison(g_);
        std::lock_guard<std::mutex> lock(g_->mu);
        auto &v = g_->inflight;
        v.erase(std::remove(v.begin(), v.end(), ub_.get()), v.end());
    }
    OpBuffer(const OpBuffer &) = delete;
    OpBuffer &operator=(const OpBuffer &) = delete;

    void send(int peer, uint64_t slot, size_t offset, size_t bytes) {
        ub_->send(peer, slot, offset, bytes);
    }
    void recv(int peer, uint64_t slot, size_t offset, size_t bytes) {
        ub_->recv(peer, slot, offset, bytes);
    }
    // A wait returns false when interrupted, and once the communicator has
    // failed nothing more arrives. The awaited transfer may still have
    // completed (a peer that finished this operation and closed its
    // communicator: data first, then the close that fired the watchdog), so
    // unless aborted, a failed communicator's waits only look whether the
    // transfer is done.
    void waitSend() {
        if (!failed() && ub_->waitSend(nullptr, left())) return;
        if (!g_->aborted.load() && recheck([this] { return ub_->waitSend(nullptr, Ms(1)); }))
            return;
        throw Interrupted();
    }
    void waitRecv() {
        if (!failed() && ub_->waitRecv(nullptr, left())) return;
        if (!g_->aborted.load() && recheck([this] { return ub_->waitRecv(nullptr, Ms(1)); }))
            return;
        throw Interrupted();
    }

  private:
    bool failed() const {
        std::lock_guard<std::mutex> lock(g_->mu);
        return g_->failed;
    }
    template <typename Wait>
    static bool recheck(Wait &&wait) {
        try {
            return wait();
        } catch (...) {  // nothing completed: a 1 ms Gloo wait "times out"
            return false;
        }
    }
    Ms left() const {
        auto ms = std::chrono::duration_cast<Ms>(deadline_ - Clock::now());
        return std::max(ms, Ms(1));  // a past deadline times out (Gloo: 0 is special)
    }
    GlooComm *g_;
    Clock::time_point deadline_;
    int unwinding_;  // exceptions in flight at construction
    std::unique_ptr<UnboundBuffer> ub_;
};

// Runs one operation and maps its outcome to a status.
//
// Gloo reports a dead peer and a timeout with the same exception type; its
// timeout messages say "Timed out". A rank that times out closes its
// sockets, so its peers usually see their connection close a moment before
// their own deadline: a connection failure once the operation has run for
// 3/4 of its timeout is therefore reported as PX_COMM_TIMEOUT too.
template <typename Body>
px_comm_status_t run(GlooComm *g, const char *what, int timeoutMs, char *err, size_t errlen,
                     Body &&body) {
    if (g->aborted.load()) {
        px_err_set(err, errlen, "gloo %s: aborted (px_comm_abort)", what);
        return PX_COMM_ABORTED;
    }
    const auto t0 = Clock::now();
    px_comm_status_t st = PX_COMM_OK;
    std::string msg;
    {
        std::lock_guard<std::mutex> lock(g->mu);
        g->opRunning = true;
    }
    {
        SigpipeBlock guard;
        try {
            body(t0 + Ms(timeoutMs));
        } catch (const Interrupted &) {
            std::lock_guard<std::mutex> lock(g->mu);
            st = PX_COMM_PEER_FAILED;
            msg = g->failReason;
        } catch (const gloo::IoException &e) {
            st = PX_COMM_PEER_FAILED;
            msg = e.what();
        } catch (const std::exception &e) {
            st = PX_COMM_ERROR;
            msg = e.what();
        } catch (...) {
            st = PX_COMM_ERROR;
            msg = "unknown exception";
        }
    }
    {
        std::lock_guard<std::mutex> lock(g->mu);
        g->opRunning = false;
        g->opCv.notify_all();
    }
    const long elapsed =
        static_cast<long>(std::chrono::duration_cast<Ms>(Clock::now() - t0).count());
    if (g->aborted.load()) {
        st = PX_COMM_ABORTED;
        msg = "aborted (px_comm_abort)";
    } else if (st == PX_COMM_PEER_FAILED &&
               (msg.find("Timed out") != std::string::npos || elapsed * 4 >= 3L * timeoutMs)) {
        st = PX_COMM_TIMEOUT;
    }
    if (st != PX_COMM_OK) {
        poison(g);
        interruptAll(g, msg);
        px_err_set(err, errlen, "gloo %s: %s after %ld ms (timeout %d ms): %s%s", what,
                   px_comm_status_str(st), elapsed, timeoutMs, msg.c_str(),
                   st == PX_COMM_TIMEOUT ? " (a peer stopped or is slow, or called a different "
                                           "operation, size, root or tag)"
                                         : "");
    }
    return st;
}

GlooComm *self(void *impl) { return static_cast<GlooComm *>(impl); }

// Slot of the next collective step; `what` hashes the operation, its element
// count and its root (the same on every rank that makes the same call).
uint64_t nextSlot(GlooComm *g, uint64_t what) {
    const uint64_t seq = g->opSeq++ & 0xffffff;
    return (kCollectiveSlot << 56) | (seq << 32) | (mix(what) & 0xffffffff);
}
enum : uint64_t { kRingReduce = 1, kRingGather = 2, kBroadcast = 3, kBarrier = 4 };
uint64_t describe(uint64_t kind, uint64_t count, uint64_t extra = 0) {
    return mix(kind) ^ mix(count + 0x1000) ^ mix(extra + 0x2000000);
}

// Element range [begin, end) of chunk c when n elements are split in `parts`.
struct Range {
    size_t begin, end;
};
Range evenChunk(size_t n, int parts, int c) {
    return {n * static_cast<size_t>(c) / parts, n * static_cast<size_t>(c + 1) / parts};
}

void reduceInto(float *dst, const float *src, size_t n, px_comm_op_t op) {
    if (op == PX_COMM_MAX)
        for (size_t i = 0; i < n; i++) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
    else if (op == PX_COMM_MIN)
        for (size_t i = 0; i < n; i++) dst[i] = dst[i] < src[i] ? dst[i] : src[i];
    else
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// One pass around the ring, size-1 steps. At step s this rank sends chunk
// (rank - s + shift) of data to the right neighbour and receives chunk
// (rank - s - 1 + shift) from the left one. With reduce, received segments
// land in scratch and are combined into data as each one arrives (while the
// rest are still in transit); without, they land in data directly.
//   reduce-scatter: reduce, shift s0   -> rank ends owning chunk rank+1+s0
//   allgather:      copy,   shift s0   -> rank starts owning chunk rank+s0
void ringPass(GlooComm *g, float *data, size_t n, const std::vector<Range> &chunks, int shift,
              bool reduce, px_comm_op_t op, Clock::time_point deadline) {
    const int P = g->size, r = g->rank;
    const int right = (r + 1) % P, left = (r + P - 1) % P;
    const uint64_t slot = nextSlot(g, describe(reduce ? kRingReduce : kRingGather, n,
                                               static_cast<uint64_t>(shift + 8) * 4 + op));
    OpBuffer dataBuf(g, data, n * sizeof(float), deadline);
    std::unique_ptr<OpBuffer> tmpBuf;
    if (reduce) {
        size_t most = 0;
        for (const Range &c : chunks) most = std::max(most, c.end - c.begin);
        g->scratch.resize(most);
        tmpBuf.reset(new OpBuffer(g, g->scratch.data(), most * sizeof(float), deadline));
    }
    auto mod = [P](int x) { return ((x % P) + P) % P; };
    for (int s = 0; s < P - 1; s++) {
        const Range out = chunks[mod(r - s + shift)], in = chunks[mod(r - s - 1 + shift)];
        size_t nrecv = 0, nsend = 0;
        for (size_t a = in.begin; a < in.end; a += kSegmentFloats, nrecv++) {
            const size_t len = std::min(kSegmentFloats, in.end - a) * sizeof(float);
            if (reduce)
                tmpBuf->recv(left, slot, (a - in.begin) * sizeof(float), len);
            else
                dataBuf.recv(left, slot, a * sizeof(float), len);
        }
        for (size_t a = out.begin; a < out.end; a += kSegmentFloats, nsend++)
            dataBuf.send(right, slot, a * sizeof(float),
                         std::min(kSegmentFloats, out.end - a) * sizeof(float));
        // Receives from one peer on one slot complete in the order posted.
        size_t a = in.begin;
        for (size_t i = 0; i < nrecv; i++, a += kSegmentFloats) {
            if (!reduce) {
                dataBuf.waitRecv();
                continue;
            }
            tmpBuf->waitRecv();
            reduceInto(data + a, g->scratch.data() + (a - in.begin),
                       std::min(kSegmentFloats, in.end - a), op);
        }
        for (size_t i = 0; i < nsend; i++) dataBuf.waitSend();
    }
}

px_comm_status_t allreduceF32(void *impl, float *buf, size_t n, px_comm_op_t op, int timeoutMs,
                              char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "allreduce", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        std::vector<Range> chunks;
        for (int c = 0; c < g->size; c++) chunks.push_back(evenChunk(n, g->size, c));
        ringPass(g, buf, n, chunks, 0, true, op, deadline);   // rank owns chunk rank+1
        ringPass(g, buf, n, chunks, 1, false, op, deadline);  // ... and passes it on
    });
}

px_comm_status_t reduceScatterSumF32(void *impl, const float *in, float *out, size_t k,
                                     int timeoutMs, char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "reduce_scatter", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        const size_t n = k * static_cast<size_t>(g->size);
        std::vector<float> work(in, in + n);  // (size, k): the ring adds into it
        std::vector<Range> chunks;
        for (int c = 0; c < g->size; c++) chunks.push_back({c * k, (c + 1) * k});
        ringPass(g, work.data(), n, chunks, -1, true, PX_COMM_SUM, deadline);  // owns chunk rank
        std::memcpy(out, work.data() + static_cast<size_t>(g->rank) * k, k * sizeof(float));
    });
}

px_comm_status_t allgatherF32(void *impl, const float *in, float *out, size_t k, int timeoutMs,
                              char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "allgather", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        float *mine = out + static_cast<size_t>(g->rank) * k;
        if (in != mine) std::memcpy(mine, in, k * sizeof(float));
        std::vector<Range> chunks;
        for (int c = 0; c < g->size; c++) chunks.push_back({c * k, (c + 1) * k});
        ringPass(g, out, k * static_cast<size_t>(g->size), chunks, 0, false, PX_COMM_SUM,
                 deadline);
    });
}

// Binomial tree rooted at `root`: receive from the parent, then send to the
// children, largest subtree first. log2(size) rounds.
px_comm_status_t broadcastBytes(void *impl, void *buf, size_t bytes, int root, int timeoutMs,
                                char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "broadcast", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        const int P = g->size, vrank = (g->rank - root + P) % P;
        const uint64_t slot = nextSlot(g, describe(kBroadcast, bytes, root));
        OpBuffer b(g, buf, bytes, deadline);
        int span = 1;
        while (span < P) span <<= 1;
        if (vrank != 0) {
            span = vrank & -vrank;  // lowest set bit: our subtree's size
            b.recv((vrank - span + root) % P, slot, 0, bytes);
            b.waitRecv();
        }
        int sends = 0;
        for (int m = span >> 1; m > 0; m >>= 1) {
            if (vrank + m >= P) continue;
            b.send((vrank + m + root) % P, slot, 0, bytes);
            sends++;
        }
        for (int i = 0; i < sends; i++) b.waitSend();
    });
}

px_comm_status_t sendBytes(void *impl, const void *buf, size_t bytes, int peer, int tag,
                           int timeoutMs, char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "send", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        OpBuffer b(g, const_cast<void *>(buf), bytes, deadline);
        b.send(peer, p2pSlot(tag, bytes), 0, bytes);
        b.waitSend();
    });
}

px_comm_status_t recvBytes(void *impl, void *buf, size_t bytes, int peer, int tag, int timeoutMs,
                           char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "recv", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        OpBuffer b(g, buf, bytes, deadline);
        b.recv(peer, p2pSlot(tag, bytes), 0, bytes);
        b.waitRecv();
    });
}

// Dissemination barrier: in round d, a byte to rank+d and one from rank-d.
// After the rounds with d = 1, 2, 4, ... < size, every rank has (indirectly)
// heard from every other.
px_comm_status_t barrierAll(void *impl, int timeoutMs, char *err, size_t errlen) {
    GlooComm *g = self(impl);
    return run(g, "barrier", timeoutMs, err, errlen, [&](Clock::time_point deadline) {
        const int P = g->size, r = g->rank;
        const uint64_t slot = nextSlot(g, describe(kBarrier, 0));
        char out = 1, in = 0;
        OpBuffer sb(g, &out, 1, deadline), rb(g, &in, 1, deadline);
        for (int d = 1; d < P; d <<= 1) {
            rb.recv((r - d + P) % P, slot, 0, 1);
            sb.send((r + d) % P, slot, 0, 1);
            rb.waitRecv();
            sb.waitSend();
        }
    });
}

void abortComm(void *impl) {
    GlooComm *g = self(impl);
    if (g->aborted.exchange(true)) return;
    poison(g);
    interruptAll(g, "aborted (px_comm_abort)");
}

void destroyComm(void *impl) {
    GlooComm *g = self(impl);
    SigpipeBlock guard;
    try {
        if (g->watchdog.joinable()) {
            g->stopping.store(true);
            g->sentinel->abortWaitRecv();
            g->watchdog.join();
        }
        // The sentinel is still posted on every pair, and Gloo's I/O thread
        // signals it when a peer closes; close the pairs first (under their
        // locks), so that nothing touches it once it is freed.
        poison(g, false);
        g->sentinel.reset();
        if (g->kicker) g->kicker->start();  // left on: the loop must also notice it is done
        g->ctx.reset();
        g->dev.reset();
        g->kicker.reset();
    } catch (...) {
    }
    delete g;
}

// Posts the sentinel receive on every pair and starts the watchdog.
void startWatchdog(GlooComm *g) {
    g->sentinel = g->ctx->createUnboundBuffer(&g->sentinelByte, 1);
    const uint64_t slot = kSentinelSlot << 56;
    for (int peer = 0; peer < g->size; peer++)
        if (peer != g->rank) g->sentinel->recv(peer, slot, 0, 1);
    g->watchdog = std::thread(watch, g);
}

}  // namespace

extern "C" const px_comm_backend_t px_gloo_backend = {
    "gloo",     allreduceF32, reduceScatterSumF32, allgatherF32, broadcastBytes,
    sendBytes,  recvBytes,    barrierAll,          abortComm,    destroyComm,
};

extern "C" void *px_gloo_new(const px_store_t *store, const char *prefix, int rank, int size,
                             int timeout_ms, char *err, size_t errlen) {
    GlooComm *g = nullptr;
    const auto t0 = Clock::now();
    try {
        g = new GlooComm();
        g->rank = rank;
        g->size = size;
        gloo::transport::tcp::attr attr;
        const char *iface = getenv("PX_GLOO_IFACE");
        const char *host = getenv("PX_GLOO_HOST");
        if (iface && iface[0])
            attr.iface = iface;
        else
            attr.hostname = (host && host[0]) ? host : "127.0.0.1";

        CallbackStore cstore(*store, prefix, t0 + Ms(timeout_ms));
        // Gloo's own keys are the rank numbers. Finding ours already set means
        // this prefix served an earlier communicator: its addresses are stale
        // and rendezvous would hang or connect to the wrong process.
        if (cstore.existsNow(std::to_string(rank))) {
            px_err_set(err, errlen,
                       "gloo: store prefix '%s' already used (key '%s' exists); use a fresh prefix per "
                       "quorum",
                       prefix, cstore.full(std::to_string(rank)).c_str());
            delete g;
            return nullptr;
        }
        // Threads created here (Gloo's I/O loop, our watchdog) inherit the
        // blocked SIGPIPE.
        SigpipeBlock guard;
        g->dev = gloo::transport::tcp::CreateDevice(attr);
        auto *tcpDev = dynamic_cast<gloo::transport::tcp::Device *>(g->dev.get());
        if (tcpDev) g->kicker.reset(new LoopKicker(*tcpDev));
        g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        // The store wait above holds the whole timeout: once it returns, every
        // peer has published its address from inside connectFullMesh, so a
        // pair's handshake takes milliseconds, unless that peer died in
        // between. Gloo waits up to 5x the context timeout for a pair and
        // cannot be interrupted, so that wait is kept short (at most 5 s in
        // all): the coordinator drops members that miss a new quorum's
        // rendezvous for longer than a few seconds.
        g->ctx->setTimeout(Ms(std::max(1, std::min(timeout_ms / 5, kConnectPairMs))));
        g->ctx->connectFullMesh(cstore, g->dev);
        g->connected = true;
        g->ctx->setTimeout(Ms(timeout_ms));
        if (size > 1) startWatchdog(g);
        return g;
    } catch (const StoreTimeout &e) {
        px_err_set(err, errlen, "gloo: rendezvous timed out after %d ms (prefix '%s', rank %d of %d): %s",
                   timeout_ms, prefix, rank, size, e.what());
    } catch (const std::exception &e) {
        px_err_set(err, errlen, "gloo: cannot create communicator (prefix '%s', rank %d of %d): %s",
                   prefix, rank, size, e.what());
    } catch (...) {
        px_err_set(err, errlen, "gloo: cannot create communicator: unknown exception");
    }
    if (g) destroyComm(g);
    return nullptr;
}
