#!/usr/bin/python3
"""PyTorch side of herd's single-worker training-throughput benchmark.

Builds the same models as herd (lenet, mlp, cnn, resnet20; input 1x28x28,
10 classes) with PyTorch's default initialization and times full SGD training
steps (zero_grad, forward, cross-entropy, backward, momentum step) on random
inputs, one thread. Prints one JSON line on stdout:

  {"impl":"pytorch","model":...,"batch":...,"steps":...,"img_per_s":...,"step_ms":...}

`--gemm N` instead times an NxN float32 torch.mm (the BLAS PyTorch uses).

Run it with Debian's /usr/bin/python3 (python3-torch); bench/lab run vs-pytorch does, and
sets OPENBLAS_CORETYPE to the fastest kernel set it measured on this CPU.
Both modes' JSON give "blas_core": the kernel set OpenBLAS chose (or
"unknown" where PyTorch does not use OpenBLAS).
"""
import argparse
import json
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="lenet", choices=["lenet", "mlp", "cnn", "resnet20"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="timed steps (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed warm-up steps (default 20)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1,
                   help="DistributedDataParallel processes, gloo on 127.0.0.1 (default 1: plain)")
    p.add_argument("--port", type=int, default=29533, help="--workers > 1: rendezvous port")
    p.add_argument("--gemm", type=int, default=0, metavar="N",
                   help="instead of training, time an NxN float32 torch.mm and print its GFLOP/s")
    p.add_argument("--reps", type=int, default=10, help="--gemm: timed repetitions (default 10)")
    p.add_argument("--loop", default="step", choices=["step", "plain", "none"],
                   help="the timed loop: step (default: a step function over 4 cycled batches, "
                        "gradients zeroed in place), plain (the same statements inline, one batch), "
                        "none (as step, gradients set to None instead of zeroed); bench/lab run torch-loop "
                        "compares them")
    a = p.parse_args()
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.threads < 1 or a.reps < 1 or a.gemm < 0:
        p.error("--batch, --steps, --threads and --reps must be at least 1, --warmup and --gemm at least 0")
    return a


a = parse_args()

# torch.set_num_threads() sizes PyTorch's OpenMP pool but not OpenBLAS's own
# pthread pool (Debian's torch is built with BLAS_INFO=generic, so it never
# calls openblas_set_num_threads): without this, matmuls use every core.
# These must be set before the libraries load, i.e. before `import torch`.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, str(a.threads))

try:
    import torch
    import torch.nn as nn
except ImportError as e:
    sys.stderr.write("torch_train.py: cannot import torch (%s); install python3-torch "
                     "and run with /usr/bin/python3\n" % e)
    sys.exit(3)


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """CIFAR ResNet-20 on a 1x28x28 input: spatial 28 -> 28 -> 14 -> 7."""

    def __init__(self, cin=1, nclasses=10):
        super().__init__()
        self.stem = nn.Sequential(conv3x3(cin, 16), nn.BatchNorm2d(16), nn.ReLU())
        blocks, c = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(BasicBlock(c, width, stride if i == 0 else 1))
                c = width
        self.stages = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, nclasses)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def build(name):
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 1024), nn.ReLU(),
            nn.Linear(1024, 1024), nn.ReLU(),
            nn.Linear(1024, 10))
    if name == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(3136, 1024), nn.ReLU(),
            nn.Linear(1024, 10))
    if name == "resnet20":
        return ResNet20()
    raise ValueError(name)


def blas_core():
    """The kernel set of the OpenBLAS this process loaded (its CPU detection's
    or OPENBLAS_CORETYPE's choice), or "unknown"."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "libopenblas" in line or "libblas" in line}
    except OSError:
        return "unknown"
    for path in sorted(libs):
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode()
    return "unknown"


def gemm(n, reps):
    x, y = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(x, y, out=out)  # warm-up
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(x, y, out=out)
    dt = (time.perf_counter() - t0) / reps
    gflops = 2.0 * n ** 3 / dt * 1e-9
    core = blas_core()
    sys.stderr.write("pytorch sgemm %dx%dx%d: %.3f ms, %.1f GFLOP/s (OpenBLAS core %s)\n"
                     % (n, n, n, dt * 1e3, gflops, core))
    print(json.dumps({"impl": "pytorch", "op": "sgemm", "size": n, "threads": torch.get_num_threads(),
                      "ms": round(dt * 1e3, 6), "gflops": round(gflops, 3), "blas_core": core}))
    return 0


def train(a, rank=0):
    model = build(a.model)
    if a.workers > 1:
        model = nn.parallel.DistributedDataParallel(model)
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    # Pre-generated batches so that data creation is not timed (herd cycles 4 too).
    nb = 4
    xs = [torch.randn(a.batch, 1, 28, 28) for _ in range(nb)]
    ys = [torch.randint(0, 10, (a.batch,)) for _ in range(nb)]

    def step(i):
        opt.zero_grad(set_to_none=a.loop == "none")
        loss = loss_fn(model(xs[i % nb]), ys[i % nb])
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    if a.workers > 1:
        torch.distributed.barrier()
    if a.loop == "plain":
        x, y = xs[0], ys[0]
        t0 = time.perf_counter()
        for i in range(a.steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        for i in range(a.steps):
            loss = step(i)
        dt = time.perf_counter() - t0
    if a.workers > 1:  # the run takes as long as its slowest worker
        t = torch.tensor([dt])
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        dt = t.item()
        if rank != 0:
            return 0
    if not torch.isfinite(loss).item():
        sys.stderr.write("torch_train.py: loss became non-finite\n")
        return 1

    ips = a.steps * a.batch * a.workers / dt
    sys.stderr.write("pytorch %s batch %d: %.0f img/s, %.3f ms/step (torch %s, %d thread(s))\n"
                     % (a.model, a.batch, ips, 1e3 * dt / a.steps, torch.__version__,
                        torch.get_num_threads()))
    print(json.dumps({"impl": "pytorch" if a.workers == 1 else "pytorch-ddp", "workers": a.workers,
                      "model": a.model, "batch": a.batch, "steps": a.steps,
                      "threads": torch.get_num_threads(), "img_per_s": round(ips, 3),
                      "step_ms": round(1e3 * dt / a.steps, 6), "torch": torch.__version__,
                      "blas_core": blas_core()}))
    return 0


def ddp_worker(rank, a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                                         rank=rank, world_size=a.workers)
    rc = train(a, rank)
    torch.distributed.destroy_process_group()
    if rc:
        sys.exit(rc)


def main():
    if a.workers > 1 and a.gemm == 0:
        import torch.multiprocessing as mp
        mp.spawn(ddp_worker, args=(a,), nprocs=a.workers)
        return 0
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(a.threads)
    except RuntimeError:
        pass  # only settable once, before any inter-op work
    torch.manual_seed(a.seed)
    return gemm(a.gemm, a.reps) if a.gemm > 0 else train(a)


if __name__ == "__main__":
    sys.exit(main())
