"""DiLoCo (--mode diloco): real coordinator, launcher and workers, real SIGKILLs.

  identity    one group, H=1, outer lr 1, momentum 0: the same losses and
              final model as plain synchronous training (float tolerance);
              --mode auto workers end bit for bit like sync's in a sync
              job and like diloco's in a diloco job; --fragments 2 ends
              like plain training too, and --sync-warmup as long as the
              job like sync, bit for bit.
  kill        3 groups, H=20: a group SIGKILLed during its inner steps is
              left out of the next outer step (2 contributors), its restart
              heals at an outer boundary (a step that is a multiple of H) from
              a live group and contributes again; every group ends with the
              same state checksum and parameters.
  chaos       3 groups, H=10, seeded random kills: the job completes, every
              group ends with the same state, the loss falls. The seed is
              printed on failure.
  chaos-overlap  the same with --fragments 2 --outer-overlap: kills land
              while rounds are in flight.
  checkpoint  one group, H=5, checkpoints every 10 steps: the newest one
              removed, the job restarts from step 20 (global parameters, outer
              momentum and moments restored) and ends with the checksum of the
              uninterrupted run.
  dtype       3 groups, H=10, --outer-dtype int8 and bf16: every group ends
              with the same state; the pseudo-gradient bytes each rank sent
              (worker logs) are below 0.4x (int8) and 0.8x (bf16) of fp32's.
              With 2 samples per step the group that gets none contributes
              nothing.
  layouts     2 groups, H=5, in fsdp2, tp2, pp2 and pp2 x fsdp2 groups: the
              same losses and final parameters as groups of whole replicas
              (each rank's pseudo-gradient is its shard's; the outer step
              pairs same-coordinate ranks). A rank of an fsdp2 group killed
              mid-round: the job completes, every group with one state. A
              one-group fsdp2 checkpoint resumed as a whole replica ends like
              the uninterrupted run.
  long_round  rounds longer than the coordinator's --stall-timeout-ms: a
              group killed and restarted joins mid-round (the others adopt
              the new quorum within an inner step, keeping their rounds, so
              none is dropped as stalled), gives nothing at that outer step
              and trains the next; every group ends with one state.
  auto        3 groups with --mode auto (coordinator and workers; failures
              the only signal: loopback's comm share is high): the job
              trains in sync (no outer step) until a group is SIGKILLed;
              the coordinator then switches it to DiLoCo (mode_switched,
              its reason naming failures per hour), every group changes
              mode at one step and outer steps follow; once the failure
              has left the window it switches back to sync, the groups
              average their moments at an outer step and train on in sync
              steps; the job completes with one state in every group.
  auto-fragments  the same with --fragments 2: the outer step that goes back
              to sync syncs every fragment.
  auto-chaos  --mode auto with --fragments 2 and checkpoints, a seeded kill
              about every 2 s and a 1 s failure window: the job flips
              between sync and DiLoCo at every kill and back (kills land in
              either mode and at the switches; none in the last 200 steps,
              so every killed group is back before the end); it completes
              with one state in every group. The seed is printed on failure.
  auto-chaos-overlap  the same with --outer-overlap.
  auto-restart  --mode auto, switched to DiLoCo by a kill; the coordinator
              SIGKILLed and restarted: it adopts DiLoCo from the groups'
              heartbeats (mode_adopted, /status "auto: diloco H=10") instead
              of sending the job back to sync, and outer steps go on.
  fragments   Streaming DiLoCo, 3 groups, H=10, --fragments 2: an outer step
              every 5 steps syncs fragment 0 and 1 in turn (their bytes add
              up to one whole outer step's), the job's last one syncs all; a
              group killed mid-run heals and contributes again; every group
              ends with one state and one model. Whole replicas, fsdp2 and
              pp2 groups (a stage holding none of a fragment) end alike.
  overlap     Streaming DiLoCo with --outer-overlap, 3 groups, H=10, F=2:
              every round's outer step is applied (at the next round's
              end, logged overlapped=1; the last one and a checkpoint's
              synchronous), the job ends with one state in every group and
              an eval loss near the synchronous-outer-step run's (both
              printed); a group SIGKILLed mid-run (its pending round dropped
              by everyone alike) gets the state back (a heal, or the newest
              checkpoint when it is at the others' step) and contributes
              again, one state at
              the end; with checkpoints every 20 steps, the saves land on
              synchronous outer steps. A group frozen (SIGSTOP) with a round
              in flight: the others go on without it. Groups of 2 ranks
              (data parallel and fsdp2) end like whole replicas.
  warmup      3 groups, H=10, --sync-warmup 20: sync steps to 20 (no outer
              step), every group changes to DiLoCo at step 20, outer steps
              every 10 from there; a group killed during the sync steps
              heals; one state at the end.
  quality     4 groups of `tiny` on the demo corpus and one token budget
              (400 steps of a 16 x 64-token global batch: 4 samples per
              group and inner step): sync, then DiLoCo at H=20 and H=50
              (outer lr 1, momentum 0: plain averaging, which does best at
              budgets this small): DiLoCo's eval loss within 5% of sync's
              while its cross-group bytes fall by H (to within the outer
              step's vote tail; both printed). The losses do not depend on
              the machine; `small` needs 64 samples per group and inner
              step for the same 5%: docs/benchmarks.md, "DiLoCo".
  refused     a worker in diloco mode is refused by a sync job (WRONG_LAYOUT,
              naming both), and --mode diloco with --bucket-mb is a
              configuration error naming the flags."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main_scenarios, make_corpus, metrics_by_series, wait_until  # noqa: E402

SEED = int(os.environ.get("PX_CHAOS_SEED", "11"))
WORKER = ["--global-batch", "12", "--micro-batch", "4", "--eval-batches", "2", "--seed", "5"]
OUTER = re.compile(r"\* outer step (\d+) at step (\d+): groups (\S+), (\d+) with a round")
FRAG = re.compile(r"\* outer step \d+ at step (\d+): groups \S+, (\d+) with a round to give \| loss \S+ \| "
                  r"(\d+) bytes sent(?: \| fragment (\S+))?")


def corpus(bindir):
    return make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-diloco-data-"))


def run(bindir, data, groups, steps, worker, name, launch_args=(), timeout=300):
    launch = Launch(bindir, ["--groups", str(groups), "--model", "tiny", "--steps", str(steps), "--data", data]
                    + list(launch_args) + ["--"] + WORKER + worker, name=name)
    rc = launch.wait(timeout)
    check(rc == 0, "%s: phalanx-launch exited %s:\n%s" % (name, rc, launch.tail()))
    s = launch.summary()
    check(s and s["completed"] and s["steps"] == steps, "%s completed %d steps: %s" % (name, steps, s))
    return launch


def same_state(launch, groups, name):
    finals = launch.finals()
    check(len(finals) == groups, "%s: all %d groups finished: %s" % (name, groups, sorted(finals)))
    for key in ("checksum", "param_norm"):
        values = {f[key] for f in finals.values()}
        check(len(values) == 1, "%s: every group ends with the same %s: %s" % (name, key, values))
    return list(finals.values())[0]


def outer_lines(launch, start=0):
    """(outer, step, groups, contributors) of each outer step line from index start on."""
    out = []
    for line in launch.output()[start:]:
        m = OUTER.search(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3).split(","), int(m.group(4))))
    return out


def model_floats(path):
    import struct
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack_from("<%df" % ((len(data) - 1024) // 4), data, 1024)


def progress_losses(launch):
    out = {}
    for line in launch.output():
        m = re.search(r"\] step +(\d+) \| groups \S+ \| loss ([0-9.]+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def loss_falls(launch, final):
    first = min(progress_losses(launch).items())[1]
    check(final < first - 1.0, "the loss falls: first %s, final %s" % (first, final))


def test_identity(bindir):
    data, work = corpus(bindir), tempfile.mkdtemp(prefix="phalanx-diloco-id-")
    a, b = os.path.join(work, "sync.bin"), os.path.join(work, "diloco.bin")
    sync = run(bindir, data, 1, 30, ["--save", a], "sync")
    dl = run(bindir, data, 1, 30, ["--save", b, "--mode", "diloco", "--inner-steps", "1", "--outer-lr", "1",
                                   "--outer-momentum", "0"], "diloco-h1")
    outers = outer_lines(dl)
    check(len(outers) == 30 and all(o[3] == 1 for o in outers), "30 outer steps of one group: %s" % outers[-3:])
    ls, ld = progress_losses(sync), progress_losses(dl)
    check(len(ls) == 30 and sorted(ls) == sorted(ld), "30 steps' losses in both runs: %d, %d" % (len(ls), len(ld)))
    worst = max(abs(ls[s] - ld[s]) / ls[s] for s in ls)
    x, y = model_floats(a), model_floats(b)
    scale = max(abs(v) for v in x)
    diff = max(abs(p - q) for p, q in zip(x, y))
    print("identity: worst relative loss difference %.2e, largest parameter difference %.2e (scale %.3g)" %
          (worst, diff, scale))
    check(worst <= 1e-5, "per-step losses within 1e-5 relative")
    check(len(x) == len(y) and diff <= 1e-5 * scale, "final models within 1e-5 of the largest parameter")
    # --mode auto workers train as the quorums say: bit for bit the fixed modes
    c, d = os.path.join(work, "auto-sync.bin"), os.path.join(work, "auto-diloco.bin")
    run(bindir, data, 1, 30, ["--save", c, "--mode", "auto"], "auto-sync")
    run(bindir, data, 1, 30, ["--save", d, "--mode", "auto", "--inner-steps", "1", "--outer-lr", "1",
                              "--outer-momentum", "0"], "auto-diloco", ["--mode", "diloco"])
    check(model_floats(c) == x, "auto workers in a sync job end with sync's model, bit for bit")
    check(model_floats(d) == y, "auto workers in a diloco job end with diloco's model, bit for bit")
    w = os.path.join(work, "warm.bin")  # DiLoCo after a sync warmup as long as the job: sync, bit for bit
    run(bindir, data, 1, 30, ["--save", w, "--mode", "diloco", "--inner-steps", "5", "--sync-warmup", "30"], "warm-all")
    check(model_floats(w) == x, "--sync-warmup as long as the job ends with sync's model, bit for bit")
    e = os.path.join(work, "stream.bin")  # Streaming DiLoCo, one group, outer lr 1, momentum 0: plain training too
    run(bindir, data, 1, 30, ["--save", e, "--mode", "diloco", "--inner-steps", "4", "--fragments", "2",
                              "--outer-lr", "1", "--outer-momentum", "0"], "stream-identity")
    z = model_floats(e)
    diff = max(abs(p - q) for p, q in zip(x, z))
    check(len(x) == len(z) and diff <= 1e-5 * scale, "--fragments 2: the final model within 1e-5 (%.2e)" % diff)


def test_kill(bindir):
    data = corpus(bindir)
    H = 20
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "600", "--data", data, "--"] + WORKER +
                    ["--mode", "diloco", "--inner-steps", str(H)], name="diloco-kill")
    try:
        wait_until(lambda: len(outer_lines(launch)) >= 3, 120, "3 outer steps")

        def counted():  # the launcher may print an outer step a moment before the coordinator counts it
            with urllib.request.urlopen("http://%s/metrics" % launch.http, timeout=5) as r:
                x = metrics_by_series(r.read().decode())
            return x if x.get("phalanx_outer_steps_total", -1) >= 3 else None
        metrics = wait_until(counted, 30, "/metrics to count 3 outer steps")
        m, w = metrics.get("phalanx_outer_steps_total", -1), metrics.get("phalanx_outer_wire_bytes_total", -1)
        check(m >= 3 and w > 0, "/metrics counts outer steps and their bytes: %s %s" % (m, w))
        st = launch.status()
        check(st["mode"] == "diloco H=%d" % H and st["outer_steps"] >= 3, "/status shows the mode and outer steps: "
              "%s, %s" % (st.get("mode"), st.get("outer_steps")))
        with urllib.request.urlopen("http://%s/api/history" % launch.http, timeout=5) as r:
            hist = json.loads(r.read().decode())
        check(hist["mode"] == st["mode"] and hist["outer_steps"] >= 3 and hist["outer_wire_bytes"] > 0,
              "the dashboard's feed has the mode, outer steps and bytes: %s %s %s" %
              (hist.get("mode"), hist.get("outer_steps"), hist.get("outer_wire_bytes")))
        mark = sigkill_g1_to_the_end(launch)
        s = launch.summary()
        check(s and s["completed"] and s["steps"] == 600, "completed: %s" % s)
        after = outer_lines(launch, mark)
        left_out = [o for o in after if o[3] == 2]
        check(left_out, "an outer step after the kill had 2 contributors (g1 left out): %s" % after[:4])
        heals = [e for e in launch.read_events() if e["type"] == "heal_finished" and e["group"] == "g1"]
        check(heals, "the restarted g1 healed")
        check(all(e["step"] % H == 0 for e in heals), "g1 healed at outer boundaries: %s" % [e["step"] for e in heals])
        check(all(e["peer_group"] in ("g0", "g2") for e in heals), "from a live group: %s" %
              [e["peer_group"] for e in heals])
        back = [o for o in after if o[3] == 3 and o[1] > heals[-1]["step"]]
        check(back, "g1 contributes to an outer step after its heal: %s" % after[-4:])
        events = [e for e in launch.read_events() if e["type"] == "outer_step"]
        check(events and all("groups=" in e["detail"] for e in events), "outer_step events name the groups")
        f = same_state(launch, 3, "kill")
        print("kill: %d outer steps after the kill, first with 2 contributors at step %d; g1 healed at step %s; "
              "final checksum %s" % (len(after), left_out[0][1], [e["step"] for e in heals], f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(40)))
    finally:
        launch.terminate()


def test_chaos(bindir, extra=()):
    data = corpus(bindir)
    try:
        launch = run(bindir, data, 3, 300, ["--mode", "diloco", "--inner-steps", "10"] + list(extra), "diloco-chaos",
                     ["--chaos-kill-every-steps", "25", "--chaos-max-kills", "6", "--chaos-until-step", "200",
                      "--chaos-seed", str(SEED)], timeout=500)
        s = launch.summary()
        check(s["chaos_kills"] >= 3, "at least 3 kills happened: %s" % s)
        f = same_state(launch, 3, "chaos")
        outers = outer_lines(launch)
        check(all(o[3] <= len(o[2]) for o in outers), "contributors never exceed the quorum's groups")
        loss_falls(launch, s["final_loss"])
        print("chaos%s: %d kills, %d outer steps, final checksum %s loss %s" % (
            " " + " ".join(extra) if extra else "", s["chaos_kills"], len(outers), f["checksum"], s["final_loss"]))
    except Fail as e:
        raise Fail("%s (chaos seed %d; rerun with PX_CHAOS_SEED=%d)" % (e, SEED, SEED))


def test_checkpoint(bindir):
    data, work = corpus(bindir), tempfile.mkdtemp(prefix="phalanx-diloco-ck-")
    ck = os.path.join(work, "ck")
    flags = ["--mode", "diloco", "--inner-steps", "5", "--checkpoint-when-busy", "wait"]  # (the steps named below)
    launch_args = ["--checkpoint-dir", ck, "--checkpoint-every", "10"]
    first = run(bindir, data, 1, 30, flags, "diloco-ck1", launch_args)
    f1 = same_state(first, 1, "first run")
    steps = sorted(int(d[5:]) for d in os.listdir(ck) if d.startswith("step_"))
    check(steps[-3:] == [10, 20, 30], "checkpoints of steps 10, 20 and 30: %s" % steps)
    r = subprocess.run([os.path.join(bindir, "phalanx-ckpt"), "verify", os.path.join(ck, "step_%08d" % 30)],
                       capture_output=True, text=True)
    check(r.returncode == 0, "phalanx-ckpt verify: %s %s" % (r.stdout, r.stderr))
    shutil.rmtree(os.path.join(ck, "step_%08d" % 30))
    second = run(bindir, data, 1, 30, flags, "diloco-ck2", launch_args)
    restored = [e for e in second.read_events() if e["type"] == "checkpoint_restored"]
    check(restored and restored[0]["step"] == 20, "the second run restored step 20: %s" % restored)
    f2 = same_state(second, 1, "resumed run")
    print("checkpoint: uninterrupted %s, resumed from step 20 %s" % (f1["checksum"], f2["checksum"]))
    check(f1["checksum"] == f2["checksum"], "the resumed run ends with the uninterrupted run's state")


def outer_wire(launch):
    total = 0
    for name in os.listdir(launch.dir):
        if name.startswith("worker-"):
            with open(os.path.join(launch.dir, name)) as f:
                for line in f:
                    m = re.search(r"comm_sent .*outer_wire_bytes=(\d+)", line)
                    if m:
                        total += int(m.group(1))
    return total


def test_dtype(bindir):
    data = corpus(bindir)
    wire = {}
    for dt in ("fp32", "int8", "bf16"):
        launch = run(bindir, data, 3, 60, ["--mode", "diloco", "--inner-steps", "10", "--outer-dtype", dt],
                     "diloco-" + dt)
        f = same_state(launch, 3, dt)
        wire[dt] = outer_wire(launch)
        print("%s: final loss %s, pseudo-gradient bytes sent %d" % (dt, f["loss"], wire[dt]))
        check(wire[dt] > 0, "%s: the workers count their outer bytes" % dt)
        check(float(f["loss"]) < 4.5, "%s: the model learns (final loss %s)" % (dt, f["loss"]))
    check(wire["int8"] < 0.4 * wire["fp32"], "int8 sends under 0.4x fp32's bytes at 3 groups")
    check(wire["bf16"] < 0.8 * wire["fp32"], "bf16 sends under 0.8x fp32's bytes at 3 groups")
    # more groups than samples: the group without any gives nothing (its weight decay is no pseudo-gradient)
    launch = run(bindir, data, 3, 30, ["--mode", "diloco", "--inner-steps", "10", "--global-batch", "2",
                                       "--micro-batch", "1"], "diloco-empty")
    same_state(launch, 3, "a group without samples")
    outers = outer_lines(launch)
    check(len(outers) == 3 and all(o[3] == 2 for o in outers),
          "with 2 samples per step, 2 of 3 groups contribute: %s" % outers)


def run_layout(bindir, data, name, W, flags, groups=2, steps=30, launch_args=()):
    """A clean run to compare with another layout's: one whose first quorum
    held every group. (A group whose ranks registered late joins a round
    under way and gives nothing at its first outer step: another result.
    Start-up timing, not the layout: such a run is made again, at most
    twice.)"""
    for attempt in range(3):
        launch = Launch(bindir, ["--groups", str(groups), "--ranks-per-group", str(W), "--model", "tiny", "--steps",
                                 str(steps), "--data", data] + list(launch_args) + ["--"] + WORKER +
                        ["--mode", "diloco", "--inner-steps", "5", "--outer-momentum", "0.5"] + flags,
                        name="diloco-" + name)
        rc = launch.wait(300)
        check(rc == 0, "%s: phalanx-launch exited %s:\n%s" % (name, rc, launch.tail()))
        first = [e for e in launch.read_events() if e["type"] == "quorum_formed"][:1]
        if first and len(first[0]["groups"]) == groups:
            return launch
        print("%s: the first quorum held %s of %d groups (a late start): run again" %
              (name, first and first[0]["groups"], groups))
    raise Fail("%s: no run of 3 started with every group in its first quorum" % name)


def test_layouts(bindir):
    data = corpus(bindir)
    base = same_state(run_layout(bindir, data, "whole", 1, []), 2, "whole")
    check(float(base["eval_loss"]) < 4.5, "whole replicas learn: eval loss %s" % base["eval_loss"])
    for name, W, flags in (("fsdp2", 2, ["--fsdp", "2"]), ("tp2", 2, ["--tp", "2"]),
                           ("pp2", 2, ["--pp", "2", "--microbatches", "2"]), ("pp2xfsdp2", 4, ["--pp", "2", "--fsdp", "2"])):
        f = same_state(run_layout(bindir, data, name, W, flags), 2, name)
        rel = abs(float(f["param_norm"]) - float(base["param_norm"])) / float(base["param_norm"])
        rel_ev = abs(float(f["eval_loss"]) - float(base["eval_loss"])) / float(base["eval_loss"])
        print("%s: eval loss %s (whole %s), param norm %s (whole %s)" % (name, f["eval_loss"], base["eval_loss"],
                                                                        f["param_norm"], base["param_norm"]))
        check(rel < 1e-5 and rel_ev < 1e-4, "%s ends like whole replicas (norm rel %.2e, eval rel %.2e)" %
              (name, rel, rel_ev))

    launch = Launch(bindir, ["--groups", "2", "--ranks-per-group", "2", "--model", "tiny", "--steps", "400",
                             "--data", data, "--"] + WORKER + ["--mode", "diloco", "--inner-steps", "10", "--fsdp", "2"],
                    name="diloco-fsdp-kill")
    try:
        wait_until(lambda: len(outer_lines(launch)) >= 3, 120, "3 outer steps")
        pid = launch.pid_of("g1", 1)
        check(pid, "g1/1 is a live member")
        os.kill(pid, signal.SIGKILL)
        rc = launch.wait(300)
        check(rc == 0, "phalanx-launch exited %s:\n%s" % (rc, launch.tail()))
        f = same_state(launch, 2, "fsdp2 kill")
        check(any(e["type"] == "heal_finished" and e["group"] == "g1" for e in launch.read_events()), "g1 healed")
        print("fsdp2 kill: completed, final checksum %s" % f["checksum"])
    finally:
        launch.terminate()

    ck = os.path.join(tempfile.mkdtemp(prefix="phalanx-diloco-lck-"), "ck")
    args = ["--checkpoint-dir", ck, "--checkpoint-every", "10"]
    first = same_state(run_layout(bindir, data, "ck-fsdp2", 2, ["--fsdp", "2"], 1, 30, args), 1, "fsdp2 checkpoints")
    shutil.rmtree(os.path.join(ck, "step_%08d" % 30))
    resumed = run_layout(bindir, data, "ck-whole", 1, [], 1, 30, args)
    restored = [e for e in resumed.read_events() if e["type"] == "checkpoint_restored"]
    check(restored and restored[0]["step"] == 20, "restored step 20 as a whole replica: %s" % restored)
    second = same_state(resumed, 1, "resumed whole")
    rel = abs(float(first["param_norm"]) - float(second["param_norm"])) / float(first["param_norm"])
    print("fsdp2 checkpoint resumed whole: param norm %s vs %s" % (second["param_norm"], first["param_norm"]))
    check(rel < 1e-5, "the resumed run ends like the uninterrupted one (rel %.2e)" % rel)


def final_of(path):
    with open(path) as f:
        for line in f:
            if line.startswith("final group="):
                return dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
    return None


def test_long_round(bindir):
    from phalanx_test import Job  # noqa: E402
    data = corpus(bindir)
    H, steps = 500, 2000
    job = Job(bindir, name="diloco-long", extra_coord_args=["--stall-timeout-ms", "1000"])
    common = ["--steps", str(steps), "--model", "tiny", "--data", data] + WORKER + \
             ["--mode", "diloco", "--inner-steps", str(H), "--outer-momentum", "0.5"]
    try:
        job.start_coordinator()
        for g in ("g0", "g1", "g2"):
            job.start_worker(g, 0, 1, common)
        log0 = os.path.join(job.dir, "worker-g0-0.log")
        outers = lambda: len(re.findall(r"outer_step step=\d+ from=", open(log0).read()))  # noqa: E731
        wait_until(lambda: outers() >= 1, 120, "a first outer step")
        t_round = time.time()
        wait_until(lambda: outers() >= 2, 120, "a second outer step")
        round_s = time.time() - t_round
        check(round_s > 1.0, "a round (%.1f s) lasts longer than the stall timeout (1 s)" % round_s)
        time.sleep(round_s / 3)  # mid-round
        job.workers[("g1", 0)].kill()
        job.workers[("g1", 0)].wait()
        time.sleep(0.5)
        job.start_worker("g1", 0, 1, common)
        job.wait_workers(300, "long rounds")
        stalled = [e for e in job.read_events() if e["type"] == "member_lost" and e.get("reason") == "stalled"]
        check(not stalled, "no member dropped as stalled: %s" % stalled)
        finals = {g: final_of(os.path.join(job.dir, "worker-%s-0.log" % g)) for g in ("g0", "g1", "g2")}
        check(all(finals.values()), "every group finished: %s" % finals)
        check(len({f["checksum"] for f in finals.values()}) == 1, "one state: %s" %
              {g: f["checksum"] for g, f in finals.items()})
        g1 = open(os.path.join(job.dir, "worker-g1-0.log")).read()
        check("round_joined" in g1, "the restarted g1 joined the round the others were in")
        print("long rounds (%.1f s each): restarted g1 joined mid-round, no stall, final checksum %s" %
              (round_s, finals["g0"]["checksum"]))
    finally:
        job.stop()


def mode_changes(launch, group):
    """(mode, step) of each mode_changed line in a group's rank-0 log."""
    out = []
    with open(os.path.join(launch.dir, "worker-%s-0.log" % group)) as f:
        for line in f:
            m = re.search(r"mode_changed mode=(\w+) step=(\d+)", line)
            if m:
                out.append((m.group(1), int(m.group(2))))
    return out


def test_auto(bindir, fragments=1):
    data = corpus(bindir)
    H, steps = 10, 2000  # long enough in time for the window to pass, and sync steps after
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", str(steps), "--data", data,
                             "--mode", "auto", "--auto-failures-per-hour", "100", "--auto-window", "4",
                             "--auto-hold", "1", "--auto-comm-share", "0", "--"] + WORKER +
                    ["--inner-steps", str(H), "--fragments", str(fragments)], name="diloco-auto")

    def switches(to):
        return [e for e in launch.read_events() if e["type"] == "mode_switched" and e["to"] == to]
    try:
        wait_until(lambda: launch.last_step() >= 30, 120, "30 steps")
        st = launch.status()
        check(st["mode"] == "auto: sync", "/status shows auto in sync: %r" % st.get("mode"))
        check(not outer_lines(launch) and not switches("diloco"), "no outer step and no switch before a failure")
        pid = launch.pid_of("g1")
        check(pid, "g1 is a live member")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: switches("diloco"), 60, "a switch to diloco after the kill")
        to_dl = switches("diloco")[0]
        check("/h" in to_dl["reason"] and to_dl["from"] == "sync", "the switch names the failure rate: %s" % to_dl)
        drops = [e for e in launch.read_events() if e["type"] == "group_dropped"]
        check(drops and drops[0]["ts"] <= to_dl["ts"], "the group was dropped before the switch")
        wait_until(lambda: switches("sync"), 120, "the switch back to sync once the failure left the window")
        back = switches("sync")[0]
        check("/h" in back["reason"], "the switch back names the figures: %s" % back)
        rc = launch.wait(300)
        check(rc == 0, "phalanx-launch exited %s" % rc)
        s = launch.summary()
        check(s and s["completed"] and s["steps"] == steps, "completed: %s" % s)
        check(len(switches("diloco")) == 1 and len(switches("sync")) == 1, "one switch each way: %s" %
              [(e["from"], e["to"]) for e in switches("diloco") + switches("sync")])
        outers = outer_lines(launch)
        check(outers, "outer steps while in diloco")
        last_outer = outers[-1][1]
        check(launch.last_step() == steps and steps - last_outer >= 3 * H,
              "sync steps after the last outer step (at %d): training went on to %d" % (last_outer, steps))
        for g in ("g0", "g1", "g2"):
            ch = mode_changes(launch, g)
            check(ch and ch[-1][0] == "sync" and any(m == "diloco" for m, _ in ch),
                  "%s changed to diloco and back to sync: %s" % (g, ch))
        ends = {mode_changes(launch, g)[-1][1] for g in ("g0", "g1", "g2")}
        check(len(ends) == 1, "every group went back to sync at the same step: %s" % ends)
        enter = {[c for c in mode_changes(launch, g) if c[0] == "diloco"][0][1] for g in ("g0", "g2")}
        check(len(enter) == 1, "the survivors changed to diloco at the same step: %s" % enter)
        f = same_state(launch, 3, "auto")
        if fragments > 1:  # the way back to sync syncs every fragment first
            check(frag_lines(launch)[-1][3] == "all/%d" % fragments, "the last outer step synced every fragment: %s" %
                  (frag_lines(launch)[-1],))
        print("auto%s: diloco at step %s (%s), sync again at step %s (%s); %d outer steps; final checksum %s" %
              (" --fragments %d" % fragments if fragments > 1 else "", sorted(enter)[0], to_dl["reason"],
               sorted(ends)[0], back["reason"], len(outers), f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(40)))
    finally:
        launch.terminate()


def test_auto_chaos(bindir, extra=()):
    data = corpus(bindir)
    ck = os.path.join(tempfile.mkdtemp(prefix="phalanx-auto-chaos-"), "ck")
    try:
        launch = run(bindir, data, 3, 3000, ["--inner-steps", "10", "--fragments", "2"] + list(extra), "auto-chaos",
                     ["--mode", "auto", "--auto-failures-per-hour", "1000", "--auto-window", "1", "--auto-hold", "0",
                      "--auto-comm-share", "0", "--chaos-kill-every", "2", "--chaos-max-kills", "10",
                      # no kill in the last 200 steps: a group killed just before the end would come back after
                      # the others finished and leave (job_finished_elsewhere) without a final state to compare
                      "--chaos-until-step", "2800",
                      "--chaos-seed", str(SEED), "--checkpoint-dir", ck, "--checkpoint-every", "100"], timeout=500)
        s = launch.summary()
        check(s["chaos_kills"] >= 5, "at least 5 kills happened: %s" % s)
        ev = launch.read_events()
        to = [e["to"] for e in ev if e["type"] == "mode_switched"]
        check(to.count("diloco") >= 3 and to.count("sync") >= 3, "the job flipped both ways several times: %s" % to)
        f = same_state(launch, 3, "auto-chaos")
        loss_falls(launch, s["final_loss"])
        print("auto-chaos%s: %d kills, %d switches, final checksum %s loss %s" % (
            " " + " ".join(extra) if extra else "", s["chaos_kills"], len(to), f["checksum"], s["final_loss"]))
    except Fail as e:
        raise Fail("%s (chaos seed %d; rerun with PX_CHAOS_SEED=%d)" % (e, SEED, SEED))


def test_auto_restart(bindir):
    from phalanx_test import Job  # noqa: E402
    data = corpus(bindir)
    job = Job(bindir, "auto-restart", extra_coord_args=["--mode", "auto", "--auto-failures-per-hour", "1",
                                                        "--auto-window", "600", "--auto-hold", "1",
                                                        "--auto-comm-share", "0"])
    job.start_coordinator()
    launch = Launch(bindir, ["--coordinator", job.endpoint, "--job", job.job, "--groups", "3", "--model", "tiny",
                             "--steps", "100000", "--data", data, "--"] + WORKER +
                    ["--mode", "auto", "--inner-steps", "10"], name="auto-restart")
    try:
        wait_until(lambda: len(job.status()["quorum"]["groups"]) == 3 and launch.last_step() >= 20, 60,
                   "3 groups training")
        check(job.status()["mode"] == "auto: sync", "sync first: %s" % job.status()["mode"])
        pid = [m["pid"] for m in job.live_members() if m["group"] == "g1" and m["rank"] == 0]
        check(pid, "g1 is a live member")
        os.kill(pid[0], signal.SIGKILL)
        wait_until(lambda: job.status()["mode"] == "auto: diloco H=10" and len(outer_lines(launch)) >= 2, 60,
                   "the switch to diloco and 2 outer steps")
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        time.sleep(1)
        job.start_coordinator(["--auto-hold", "30"])  # no switch back within the check below
        mark = len(launch.output())
        wait_until(lambda: any(e["type"] == "mode_adopted" for e in job.read_events()), 30,
                   "the restarted coordinator adopts the groups' mode")
        wait_until(lambda: len(outer_lines(launch, mark)) >= 3, 60, "3 outer steps after the restart")
        st = job.status()
        check(st["mode"] == "auto: diloco H=10", "/status after the restart: %s" % st["mode"])
        check("adopted after a coordinator restart" in st["mode_reason"], "the reason says so: %s" % st["mode_reason"])
        later = [e for e in job.read_events() if e["type"] == "mode_switched"]
        check(len(later) == 1 and later[0]["to"] == "diloco", "one switch in all (the first coordinator's): %s" %
              [(e["from"], e["to"]) for e in later])
        print("auto-restart: %s; %d outer steps after the restart" % (st["mode_reason"], len(outer_lines(launch, mark))))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(30)))
    finally:
        launch.terminate()
        job.stop()


def frag_lines(launch, start=0):
    """(step, contributors, bytes, fragment or None) of each outer step line."""
    out = []
    for line in launch.output()[start:]:
        m = FRAG.search(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)))
    return out


def sigkill_g1_to_the_end(launch):
    """SIGKILLs g1 and waits for the job, which must complete. Returns the
    index of the output's first line after the kill."""
    pid = launch.pid_of("g1")
    check(pid, "g1 is a live member")
    mark = len(launch.output())
    os.kill(pid, signal.SIGKILL)
    rc = launch.wait(300)
    check(rc == 0, "phalanx-launch exited %s" % rc)
    return mark


def job300(bindir, data, worker, name):
    """A 3-group, 300-step job of `tiny` with these worker flags."""
    return Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "300", "--data", data, "--"] + WORKER +
                  worker, name=name)


def kill_g1_midway(launch, restores=False):
    """g1 SIGKILLed after 6 outer steps; the job must complete, and g1 heal
    and contribute again. With restores (a job with checkpoints), restoring
    the newest checkpoint counts as getting the state back too: the restarted
    g1 needs no heal when that checkpoint is at the step the others are at.
    Returns (index of the output's first line after the kill, g1's heals and
    restores)."""
    wait_until(lambda: len(frag_lines(launch)) >= 6, 120, "6 outer steps")
    mark = sigkill_g1_to_the_end(launch)
    after = frag_lines(launch, mark)
    kinds = ("heal_finished", "checkpoint_restored") if restores else ("heal_finished",)
    back = [e for e in launch.read_events() if e["type"] in kinds and e["group"] == "g1"]
    check(back and any(c == 3 and s > back[-1]["step"] for s, c, _, _ in after),
          "g1 got the state back (%s) and contributes again: %s; %s" % (" or ".join(kinds), after[-4:], back))
    return mark, back


def test_fragments(bindir):
    data = corpus(bindir)
    H, F, steps = 10, 2, 300
    L = H // F
    whole = frag_lines(run(bindir, data, 3, 2 * H, ["--mode", "diloco", "--inner-steps", str(H)], "stream-f1"))
    full = whole[0][2]
    check(whole[0][3] is None, "without --fragments no fragment is named: %s" % (whole[0],))
    launch = job300(bindir, data, ["--mode", "diloco", "--inner-steps", str(H), "--fragments", str(F)], "stream-kill")
    try:
        mark, heals = kill_g1_midway(launch)
        lines = frag_lines(launch)
        check(all(s % L == 0 for s, _, _, _ in lines), "an outer step every %d steps: %s" % (L, [x[0] for x in lines]))
        for s, _, _, frag in lines[:-1]:
            check(frag == "%d/%d" % ((s - L) // L % F, F), "the round ending at step %d synced fragment %d: %s" %
                  (s, (s - L) // L % F, frag))
        check(lines[-1][0] == steps and lines[-1][3] == "all/%d" % F, "the last outer step syncs every fragment: %s" %
              (lines[-1],))
        pairs = [(a[2], b[2]) for a, b in zip(lines, lines[1:]) if a[3] == "0/2" and b[3] == "1/2" and
                 a[1] == b[1] == 3]
        check(pairs and all(0 < x < full and 0 < y < full and abs(x + y - full) <= 2 for x, y in pairs),
              "each fragment sends part, the two together one whole outer step's %d bytes: %s" % (full, pairs[:3]))
        after = frag_lines(launch, mark)
        check(any(c == 2 for _, c, _, _ in after), "an outer step after the kill without g1: %s" % after[:4])
        f = same_state(launch, 3, "fragments")
        loss_falls(launch, float(f["loss"]))
        print("fragments: %d outer steps, bytes per fragment pair %s of %d; g1 healed at %s; final %s" %
              (len(lines), pairs[0], full, [e["step"] for e in heals], f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(30)))
    finally:
        launch.terminate()
    layouts_end_alike(bindir, data, "f2", ["--inner-steps", "4", "--fragments", "2"],
                      (("fsdp2", 2, ["--fsdp", "2"]), ("pp2", 2, ["--pp", "2", "--microbatches", "2"])))


def layouts_end_alike(bindir, data, tag, flags, layouts):
    """2 groups of each (name, W, layout flags) with `flags` end like 2 whole replicas with them."""
    base = same_state(run_layout(bindir, data, tag + "-whole", 1, flags), 2, tag + " whole")
    for name, W, lay in layouts:
        name = tag + "-" + name
        got = same_state(run_layout(bindir, data, name, W, lay + flags), 2, name)
        rel = abs(float(got["param_norm"]) - float(base["param_norm"])) / float(base["param_norm"])
        rel_ev = abs(float(got["eval_loss"]) - float(base["eval_loss"])) / float(base["eval_loss"])
        print("%s: eval loss %s (whole %s), param norm %s (whole %s)" % (name, got["eval_loss"], base["eval_loss"],
                                                                        got["param_norm"], base["param_norm"]))
        check(rel < 1e-5 and rel_ev < 1e-4, "%s ends like whole replicas (norm rel %.2e, eval rel %.2e)" %
              (name, rel, rel_ev))


def worker_log_lines(launch, word):
    out = []
    for name in sorted(os.listdir(launch.dir)):
        if name.startswith("worker-") and name.endswith(".log"):
            with open(os.path.join(launch.dir, name), errors="replace") as f:
                out += [(name, line) for line in f if word in line]
    return out


def test_overlap(bindir):
    data = corpus(bindir)
    H, F, L = 10, 2, 5
    stream = ["--mode", "diloco", "--inner-steps", str(H), "--fragments", str(F)]
    base = run(bindir, data, 3, 100, stream, "overlap-base")
    ov = run(bindir, data, 3, 100, stream + ["--outer-overlap"], "overlap")
    b, o = same_state(base, 3, "overlap-base"), same_state(ov, 3, "overlap")
    lines_b, lines_o = frag_lines(base), frag_lines(ov)
    check([x[0] for x in lines_o] == [x[0] for x in lines_b] == list(range(L, 101, L)),
          "an outer step applied for every round: %s" % [x[0] for x in lines_o])
    check([x[3] for x in lines_o] == [x[3] for x in lines_b], "the same fragments in turn: %s" % lines_o)
    applied = worker_log_lines(ov, "outer_step step=")
    late = [line for _, line in applied if "overlapped=1" in line]
    check(len(late) >= 3 * (len(lines_o) - 2), "every round but the last is applied a round late, overlapped, on "
          "every group: %d of %d log lines" % (len(late), len(applied)))
    check(not worker_log_lines(base, "overlapped=1"), "without --outer-overlap nothing is overlapped")
    ev_b, ev_o = float(b["eval_loss"]), float(o["eval_loss"])
    print("overlap: %d outer steps, %d overlapped lines; eval loss %.4f (synchronous outer steps %.4f, %+.1f%%)"
          % (len(lines_o), len(late), ev_o, ev_b, 100 * (ev_o / ev_b - 1)))
    check(ev_o < 1.15 * ev_b, "the overlapped run learns about as well: eval %.4f vs %.4f" % (ev_o, ev_b))

    ckpt = tempfile.mkdtemp(prefix="phalanx-overlap-ckpt-")
    launch = job300(bindir, data, stream + ["--outer-overlap", "--checkpoint-dir", ckpt, "--checkpoint-every", "20",
                                            "--checkpoint-when-busy", "wait"], "overlap-kill")
    try:
        _, back = kill_g1_midway(launch, restores=True)
        f = same_state(launch, 3, "overlap-kill")
        saves = [e["step"] for e in launch.read_events() if e["type"] == "checkpoint_saved"]
        check(saves and all(s % 20 == 0 for s in saves), "checkpoints at multiples of 20: %s" % saves)
        sync_at = {int(re.search(r"outer_step step=(\d+)", line).group(1))
                   for _, line in worker_log_lines(launch, "outer_step step=") if "overlapped=0" in line}
        check(all(s in sync_at for s in saves), "every save's step had a synchronous outer step: saves %s, "
              "synchronous %s" % (saves, sorted(sync_at)))
        dropped = worker_log_lines(launch, "outer_step_dropped")
        print("overlap kill: g1 got the state back at %s; %d pending rounds dropped; saves %s; final %s" %
              ([(e["type"], e["step"]) for e in back], len(dropped), saves, f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(30)))
    finally:
        launch.terminate()
    # a frozen group (SIGSTOP: its transfer in flight never finishes): the others drop the round and go on
    launch = job300(bindir, data, stream + ["--outer-overlap"], "overlap-frozen")
    try:
        wait_until(lambda: len(frag_lines(launch)) >= 6, 120, "6 outer steps")
        pid = launch.pid_of("g2")
        check(pid, "g2 is a live member")
        os.kill(pid, signal.SIGSTOP)
        mark = len(launch.output())
        wait_until(lambda: any(c == 2 for _, c, _, _ in frag_lines(launch, mark)), 60, "outer steps without g2")
        os.kill(pid, signal.SIGKILL)
        check(launch.wait(300) == 0, "the job completes after the frozen g2 is killed")
        f = same_state(launch, 3, "overlap-frozen")
        print("overlap frozen: the others went on without g2; %d pending rounds dropped; final %s"
              % (len(worker_log_lines(launch, "outer_step_dropped")), f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(30)))
    finally:
        launch.terminate()
    # groups of 2 ranks (their in-group vote on the pending round) end like whole replicas
    layouts_end_alike(bindir, data, "ov", ["--inner-steps", "4", "--fragments", "2", "--outer-overlap"],
                      (("dp2", 2, []), ("fsdp2", 2, ["--fsdp", "2"])))


def cross_bytes(launch):
    """Cross-group bytes summed over the workers' comm_sent lines (the benchmark's own reading)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from diloco import worker_logs  # noqa: E402
    return worker_logs(launch)[0]


def test_warmup(bindir):
    data = corpus(bindir)
    H, W, steps = 10, 20, 80
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", str(steps), "--data", data, "--"] +
                    WORKER + ["--mode", "diloco", "--inner-steps", str(H), "--sync-warmup", str(W)],
                    name="diloco-warmup")
    try:
        wait_until(lambda: launch.last_step() >= 5, 120, "5 steps")
        pid = launch.pid_of("g2")
        check(pid, "g2 is a live member")
        os.kill(pid, signal.SIGKILL)
        rc = launch.wait(300)
        check(rc == 0, "phalanx-launch exited %s" % rc)
        outers = outer_lines(launch)
        check([o[1] for o in outers] == list(range(W + H, steps + 1, H)),
              "outer steps every %d steps from %d: %s" % (H, W + H, [o[1] for o in outers]))
        for g in ("g0", "g1"):
            ch = mode_changes(launch, g)
            check(ch and ch[0] == ("diloco", W), "%s changed to diloco at step %d: %s" % (g, W, ch))
        ch = mode_changes(launch, "g2")  # restarted: in sync, or healed into DiLoCo (its state's mode)
        check(ch and ch[-1][0] == "diloco", "the restarted g2 ends in diloco: %s" % ch)
        check(any(e["type"] == "heal_finished" and e["group"] == "g2" for e in launch.read_events()), "g2 healed")
        f = same_state(launch, 3, "warmup")
        print("warmup: sync to step %d, %d outer steps after, final %s" % (W, len(outers), f["checksum"]))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(30)))
    finally:
        launch.terminate()


def test_quality(bindir):
    data = os.path.join(tempfile.mkdtemp(prefix="phalanx-diloco-q-"), "demo")  # the demo corpus (fortunes)
    r = subprocess.run([os.path.join(bindir, "phalanx-data"), "--demo", "--out", data], capture_output=True, text=True)
    check(r.returncode == 0, "phalanx-data --demo: %s" % (r.stdout + r.stderr)[-300:])
    # the token budget: 400 steps of 16 x 64 tokens (410k tokens), the flags of bench/diloco.py's `tiny` row
    steps, common = 400, ["--global-batch", "16", "--micro-batch", "4", "--seq", "64", "--lr", "0.002",
                          "--warmup", "20", "--eval-batches", "8", "--seed", "1"]

    def job(name, flags):
        launch = Launch(bindir, ["--groups", "4", "--model", "tiny", "--steps", str(steps), "--data", data,
                                 "--quiet", "--"] + common + flags, name=name)
        rc = launch.wait(900)
        s = launch.summary()
        check(rc == 0 and s and s["completed"], "%s completed: rc %s %s" % (name, rc, s))
        return s["eval_loss"], cross_bytes(launch)
    ev, cb = job("quality-sync", [])
    print("sync: eval loss %.4f, cross-group bytes %d" % (ev, cb))
    for H in (20, 50):
        e, c = job("quality-h%d" % H, ["--mode", "diloco", "--inner-steps", str(H), "--outer-lr", "1",
                                       "--outer-momentum", "0"])
        print("diloco H=%d: eval loss %.4f (%.3fx sync), cross-group bytes %d (%.1fx fewer)" % (H, e, e / ev, c,
                                                                                              cb / c))
        check(e <= 1.05 * ev, "H=%d: eval loss %.4f within 5%% of sync's %.4f" % (H, e, ev))
        # the pseudo-gradients are exactly a step's gradients once per H steps; the outer step's vote tail is
        # one float more than a sync step's, next to the 120,576 floats of `tiny`
        check(cb / c >= 0.9999 * H, "H=%d: cross-group bytes fall by %dx: %d against %d (%.5fx)" %
              (H, H, c, cb, cb / c))


def test_refused(bindir):
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--group", "g0", "--steps", "10", "--mode", "diloco",
                        "--bucket-mb", "1", "--coordinator", "tcp://127.0.0.1:1", "--connect-timeout", "1"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--mode diloco" in r.stderr + r.stdout and "--bucket-mb" in r.stderr + r.stdout,
          "--mode diloco --bucket-mb 1 is a configuration error naming both: rc %s %s" % (r.returncode, r.stderr[-300:]))
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--group", "g0", "--steps", "10", "--mode", "auto",
                        "--bucket-mb", "1", "--coordinator", "tcp://127.0.0.1:1", "--connect-timeout", "1"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--mode auto" in r.stderr + r.stdout and "--bucket-mb" in r.stderr + r.stdout,
          "--mode auto --bucket-mb 1 is a configuration error naming both: rc %s %s" % (r.returncode, r.stderr[-300:]))
    for flags, says in ((["--mode", "diloco", "--inner-steps", "10", "--fragments", "3"], "not a multiple"),
                        (["--inner-steps", "10", "--fragments", "2"], "needs --mode diloco or auto"),
                        (["--mode", "diloco", "--inner-steps", "12", "--fragments", "3", "--model", "tiny"],
                         "the model has 2 layers"),
                        (["--sync-warmup", "10"], "needs --mode diloco"),
                        (["--outer-overlap"], "need --mode diloco or auto")):
        r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--group", "g0", "--steps", "10"] + flags,
                           capture_output=True, text=True, timeout=60)
        named = next(f for f in ("--sync-warmup", "--outer-overlap", "--fragments") if f in flags)
        check(r.returncode == 2 and named in r.stderr and says in r.stderr,
              "%s is refused (%s): rc %s %s" % (" ".join(flags), says, r.returncode, r.stderr[-300:]))
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--group", "g0", "--steps", "10", "--mode", "async"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "async" in r.stderr, "--mode async is refused naming it: %s" % r.stderr[-200:])
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sharded"))
    from test_layouts import expect_refused  # noqa: E402
    from phalanx_test import Job  # noqa: E402
    job = Job(bindir, name="diloco-mismatch")
    try:
        job.start_coordinator()
        common = ["--steps", "100000", "--model", "tiny", "--data", corpus(bindir), "--global-batch", "4",
                  "--micro-batch", "2"]
        job.start_worker("g0", 0, 1, common)
        wait_until(lambda: len(job.live_members()) == 1, 60, "g0 registered")
        p = job.start_worker("g1", 0, 1, common + ["--mode", "diloco", "--inner-steps", "5"])
        line = expect_refused(job, p, "g1", 0, ("replicated1.diloco5", "replicated1"))
        check(job.workers[("g0", 0)].poll() is None, "g0 still trains")
        print("refused: " + line)
    finally:
        job.stop()

if __name__ == "__main__":
    main_scenarios({"identity": test_identity, "kill": test_kill, "chaos": test_chaos, "checkpoint": test_checkpoint,
                    "chaos-overlap": lambda b: test_chaos(b, ["--fragments", "2", "--outer-overlap"]), "dtype": test_dtype, "layouts": test_layouts, "long-round": test_long_round,
                    "auto": test_auto, "auto-fragments": lambda b: test_auto(b, 2), "auto-chaos": test_auto_chaos,
                    "auto-chaos-overlap": lambda b: test_auto_chaos(b, ["--outer-overlap"]),
                    "auto-restart": test_auto_restart, "fragments": test_fragments, "overlap": test_overlap, "warmup": test_warmup,
                    "quality": test_quality,
                    "refused": test_refused})
