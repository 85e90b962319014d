"""PyTorch's eager, unfused version of a fused training kernel of libciuic, timed: the baseline the fused
kernels (kernels/train_kernels.h) are compared with.

    /usr/bin/python3 -m ciuic.kernel_bench --name ln-dropout-gelu --shape 8192x1024 --dtype bf16 \\
        --device cuda --iters 100 --warmup 10 [--p 0.1] [--act gelu] [--threads N]

  ln-dropout-gelu  layer_norm -> act -> dropout(p), train mode    (grads: x, gamma, beta)
  bias-gelu        x + bias -> act                                 (grads: x, bias)
  add-ln           x + residual -> layer_norm                      (grads: x, residual, gamma, beta)

--act picks the activation (gelu: erf form, PyTorch's default; gelu-tanh; relu; none) so the names stay
those of `ciuic-bench kernel`'s families; --threads sets torch.set_num_threads (ciuic-bench passes its
own thread count, so both sides of the ratio use the same cores).

Prints one JSON line: name, shape [T, H], dtype, device, torch (version), threads, forward_us and
backward_us (medians over --iters, after --warmup untimed iterations), iters, note. With `--serve` alone
it answers many runs in one process (torch imported once): one request a line on stdin, {"argv": [the
flags above]}, one such JSON line back for each, {"error": ...} for a bad one; `ciuic-bench kernel` uses it.

All tensors, parameters included, are in --dtype (eager PyTorch runs a sequence in one dtype; the fused
kernels keep gamma, beta and bias in fp32). What is timed: forward = the sequence on inputs that require
grad, so autograd records the graph and saves what backward needs, as in training. backward =
torch.autograd.grad of the sequence's output with a fixed upstream gradient, on one graph built once and
kept with retain_graph: each iteration runs exactly the backward kernels (dropout reuses the forward's
mask, as in training) and nothing else — no forward, no .grad accumulation. That is measured directly
rather than as the difference of two medians (forward + backward minus forward), which mixes two noisy
numbers. Each iteration is timed on its own; on CUDA with torch.cuda.synchronize() before and after it.

PyTorch 1.13 on CPU has no fp16 LayerNorm/GELU/ReLU/dropout: there an fp16 sequence upcasts its input
to fp32, runs, and casts back (the note says so); if a sequence cannot run at all, the times are null and
the note says why. Bad arguments: one line on stderr, exit status 1.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-5


ACTS = {"none": lambda v: v, "relu": F.relu, "gelu": F.gelu, "gelu-tanh": lambda v: F.gelu(v, approximate="tanh")}


def _sequences(p, act="gelu"):
    """name -> (description, f(inputs) -> output, names of the tensors that require grad)."""
    a = ACTS[act]
    return {
        "ln-dropout-gelu": (f"layer_norm -> {act} -> dropout(p={p}, train)",
                            lambda t: F.dropout(a(F.layer_norm(t["x"], t["x"].shape[-1:], t["gamma"], t["beta"],
                                                               EPS)), p, training=True),
                            ("x", "gamma", "beta")),
        "bias-gelu": (f"x + bias -> {act}", lambda t: a(t["x"] + t["bias"]), ("x", "bias")),
        "add-ln": ("x + residual -> layer_norm",
                   lambda t: F.layer_norm(t["x"] + t["residual"], t["x"].shape[-1:], t["gamma"], t["beta"], EPS),
                   ("x", "residual", "gamma", "beta")),
    }


class _BadRequest(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    serving = False  # under --serve a bad request is answered, not fatal

    def error(self, message):
        if _Parser.serving:
            raise _BadRequest(message)
        print(f"ciuic.kernel_bench: {message}", file=sys.stderr)
        sys.exit(1)


def _shape(text):
    try:
        t, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TOKENSxHIDDEN, e.g. 8192x1024") from None
    if t < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both sizes must be positive")
    return t, h


def _count(minimum):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {minimum}")
        return v
    return parse


def parse_args(argv):
    ap = _Parser(prog="python3 -m ciuic.kernel_bench", description="Times PyTorch's eager unfused sequence "
                 "of a fused training kernel; prints one JSON line.")
    ap.add_argument("--name", required=True, choices=list(_sequences(0.0)))
    ap.add_argument("--shape", required=True, type=_shape, help="TOKENSxHIDDEN")
    ap.add_argument("--dtype", required=True, choices=list(DTYPES))
    ap.add_argument("--device", required=True, choices=["cpu", "cuda"])
    ap.add_argument("--iters", type=_count(1), default=50)
    ap.add_argument("--warmup", type=_count(0), default=5)
    ap.add_argument("--p", type=float, default=0.1, help="dropout probability (ln-dropout-gelu), in [0, 1)")
    ap.add_argument("--act", default="gelu", choices=list(ACTS), help="activation of ln-dropout-gelu and bias-gelu")
    ap.add_argument("--threads", type=_count(1), default=None, help="torch.set_num_threads (CPU)")
    args = ap.parse_args(argv)
    if not 0.0 <= args.p < 1.0:
        ap.error(f"--p {args.p}: expected 0 <= p < 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    return args


def _inputs(name, t, h, dtype, device):
    """The sequence's inputs and a fixed upstream gradient, all in dtype: eager PyTorch runs a sequence in
    one dtype (1.13's layer_norm refuses bf16 x with fp32 gamma; x + fp32 bias would promote to fp32)."""
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape, dt, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * scale + shift).to(dt)

    inputs = {"x": rand(t, h, dt=dtype)}
    if name == "add-ln":
        inputs["residual"] = rand(t, h, dt=dtype)
    if name == "bias-gelu":
        inputs["bias"] = rand(h, dt=dtype, scale=0.5)
    else:
        inputs["gamma"], inputs["beta"] = rand(h, dt=dtype, scale=0.5, shift=1.0), rand(h, dt=dtype, scale=0.5)
    return inputs, rand(t, h, dt=dtype)


def _timed(fn, iters, warmup, cuda):
    samples = []
    for i in range(warmup + iters):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def measure(name, shape, dtype, device, iters, warmup, p, act="gelu"):
    """(forward_us, backward_us, note) of the eager sequence."""
    desc, seq, grads = _sequences(p, act)[name]
    note = (f"eager unfused {desc}, all tensors {dtype}; forward records autograd; backward = autograd.grad on "
            "one retained graph")
    dt = DTYPES[dtype]
    run = seq
    if device == "cpu" and dt == torch.float16:
        # PyTorch 1.13 on CPU: no fp16 LayerNorm, GELU, ReLU or dropout kernels; try, then upcast.
        try:
            probe, dy = _inputs(name, 2, 8, dt, device)
            torch.autograd.grad(seq(probe), [probe[k].requires_grad_() for k in grads], dy)
        except RuntimeError as e:
            run = lambda t: seq({k: v.float() for k, v in t.items()}).to(dt)  # noqa: E731
            note += (f"; fp16 upcast to fp32 around the sequence, casts timed (CPU PyTorch {torch.__version__}: "
                     f"{str(e).splitlines()[0][:60]})")
    try:
        inputs, dy = _inputs(name, *shape, dt, device)
        leaves = [inputs[k].requires_grad_() for k in grads]
        cuda = device == "cuda"
        forward_us = _timed(lambda: run(inputs), iters, warmup, cuda)
        out = run(inputs)
        backward_us = _timed(lambda: torch.autograd.grad(out, leaves, dy, retain_graph=True), iters, warmup, cuda)
        return forward_us, backward_us, note
    except RuntimeError as e:  # a kernel PyTorch lacks here, or out of memory
        return None, None, f"{note}; not run: {str(e).splitlines()[0][:160]}"


def _answer(args):
    if args.device == "cuda":
        torch.cuda.init()
    if args.threads:
        torch.set_num_threads(args.threads)
    fwd, bwd, note = measure(args.name, args.shape, args.dtype, args.device, args.iters, args.warmup, args.p,
                             args.act)
    return {"name": args.name, "shape": list(args.shape), "dtype": args.dtype, "device": args.device,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "forward_us": None if fwd is None else round(fwd, 2),
            "backward_us": None if bwd is None else round(bwd, 2), "iters": args.iters, "note": note}


def serve(lines, out):
    """--serve: one request a line ({"argv": [the flags of one run]}), one JSON line back for each (a bad
    request gets {"error": why}), until end of input; torch is imported and CUDA started once for all."""
    _Parser.serving = True
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            argv = request["argv"] if isinstance(request, dict) else None
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise _BadRequest('expected {"argv": [strings]}')
            reply = _answer(parse_args(argv))
        except (ValueError, KeyError, _BadRequest) as e:
            reply = {"error": f"ciuic.kernel_bench: {e}"}
        print(json.dumps(reply), file=out, flush=True)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--serve"]:
        return serve(sys.stdin, sys.stdout)
    print(json.dumps(_answer(parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
