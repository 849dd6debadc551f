"""phalanx-worker --device: what is refused at start, before any coordinator
is contacted, with exit status 2 (a configuration error that phalanx-launch
does not retry) and a message that names the problem. Runs on every machine.

  1. --device cuda where no GPU can be used: in a CUDA build on a machine
     without a GPU the message is px_cuda_available()'s reason, exactly as
     tests/gpu's test_cuda_available prints it; in a build without CUDA it
     says "built without CUDA". (On a machine with a usable GPU this case
     cannot happen and is reported as not checked.)
  2. --device cuda with --recompute block, or with --pp/--fsdp/--tp, is not
     refused for that (without a GPU they get case 1's reason).
  3. --device cuda with --bucket-mb > 0: the bucketed reduction is CPU-only.
  4. --device with a bad value names the accepted ones.
  5. --precision bf16 and --tf32 need --device cuda (the CPU path computes
     in FP32), in the distributed worker and --standalone alike; --tf32 with
     --precision bf16 is refused as two answers to one question; --attention
     unfused needs --device cuda --precision bf16 (the only fused choice)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, main  # noqa: E402

PREFIX = "phalanx-worker: "


def worker(bindir, *args):
    # An endpoint nobody listens on and a 1 s connect timeout: a worker that
    # got past the checks would still exit 2, but say something else.
    argv = [os.path.join(bindir, "phalanx-worker"), "--coordinator", "tcp://127.0.0.1:9", "--connect-timeout", "1",
            "--group", "g0", "--steps", "5"] + list(args)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return r.returncode, r.stderr.strip()


def cuda_reason(bindir):
    """px_cuda_available()'s reason in a CUDA build without a usable GPU;
    None with a usable GPU; "" in a build without CUDA."""
    probe = os.path.join(bindir, "test_cuda_available")
    if not os.path.exists(probe):
        return ""
    out = subprocess.run([probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    mark = "px_cuda_available() = 0: "
    for line in out.splitlines():
        if mark in line:
            return line.split(mark, 1)[1]
    return None


def test(bindir):
    why = cuda_reason(bindir)
    rc, err = worker(bindir, "--device", "cuda")
    if why is None:
        print("not checked: a usable GPU is present, so --device cuda is not refused here")
    elif why:
        check(rc == 2, "no GPU: exit 2, got %d: %s" % (rc, err))
        want = PREFIX + "--device cuda: " + why
        check(err == want, "no GPU: the message is px_cuda_available()'s reason:\n  got  %r\n  want %r" % (err, want))
    else:
        check(rc == 2, "built without CUDA: exit 2, got %d: %s" % (rc, err))
        check(err.startswith(PREFIX + "--device cuda: ") and "built without CUDA" in err,
              "built without CUDA: the message says so: %r" % err)
    print("--device cuda without a usable GPU: %s" % (err if why is not None else "(GPU present)"))

    for what, args in (("--recompute block", ["--recompute", "block"]),
                       ("--pp/--fsdp/--tp", ["--ranks-per-group", "8", "--pp", "2", "--fsdp", "2", "--tp", "2"])):
        rc, err = worker(bindir, "--device", "cuda", *args)
        if why is None:
            print("not checked: a usable GPU is present, so %s with --device cuda would start" % what)
        else:
            check(rc == 2 and "not built yet" not in err and ("built without CUDA" in err or why in err),
                  "%s with --device cuda: refused only for want of a GPU, got %d: %r" % (what, rc, err))
    rc, err = worker(bindir, "--device", "cuda", "--bucket-mb", "1")
    check(rc == 2 and err.startswith(PREFIX) and "--bucket-mb" in err and "CPU-only" in err,
          "--bucket-mb with --device cuda: exit 2 and the reason, got %d: %r" % (rc, err))
    rc, err = worker(bindir, "--device", "tpu")
    check(rc == 2 and err == PREFIX + "--device: bad value 'tpu': expected cpu or cuda",
          "--device tpu: exit 2 naming the accepted values, got %d: %r" % (rc, err))
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--help"], stdout=subprocess.PIPE, text=True)
    check("--device cpu|cuda" in r.stdout, "--help documents --device")
    check("--precision fp32|bf16" in r.stdout and "--tf32" in r.stdout, "--help documents --precision and --tf32")
    check("--attention fused|unfused" in r.stdout, "--help documents --attention")

    standalone = [os.path.join(bindir, "phalanx-worker"), "--standalone", "--steps", "1"]
    for argv, want in ((["--precision", "bf16"], "--precision bf16 needs --device cuda"),
                       (["--device", "cpu", "--tf32"], "--tf32 needs --device cuda"),
                       (["--device", "cuda", "--precision", "bf16", "--tf32"], "--tf32 with --precision bf16"),
                       (["--attention", "unfused"], "--attention unfused needs --device cuda --precision bf16"),
                       (["--device", "cuda", "--attention", "unfused"],
                        "--attention unfused needs --device cuda --precision bf16")):
        rc, err = worker(bindir, *argv)
        check(rc == 2 and err.startswith(PREFIX + want), "%s: exit 2 naming the flag, got %d: %r" % (argv, rc, err))
        r = subprocess.run(standalone + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        check(r.returncode == 2 and r.stderr.startswith("phalanx-worker --standalone: " + want),
              "--standalone %s: exit 2 naming the flag, got %d: %r" % (argv, r.returncode, r.stderr))
    rc, err = worker(bindir, "--precision", "fp16")
    check(rc == 2 and err == PREFIX + "--precision: bad value 'fp16': expected fp32 or bf16",
          "--precision fp16: exit 2 naming the accepted values, got %d: %r" % (rc, err))


if __name__ == "__main__":
    main(test)
