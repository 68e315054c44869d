#!/usr/bin/python3
"""herd export, read back by a reader that shares no code with herd.

Usage: export_check.py HERD_BIN WORKDIR

For each case (model, data, algorithm) it trains a tiny run with a
checkpoint, exports the model the run keeps as safetensors and as an npy
directory, and has `herd eval --dump-logits --dump-inputs` write herd's own
logits for the first test images. It then reads the safetensors file with
json + struct only (the format's spec, not a library), checks it against the
npy files read by numpy, rebuilds each model's forward pass in numpy from
the tensors' names and shapes (and LeNet's again in torch, where torch is
installed) and compares the logits and predictions with herd's. Where torch
is installed, it also exports each model with --format pytorch and has the
model.py written beside the safetensors file rebuild the network from the
file alone (the metadata's description), for every built-in model and one
description file of the layers they lack: its logits on 256 test images
must be herd's within 1e-5, and its predictions the same. A mutated
export (two tensors' values exchanged) must fail the same comparison: the
check can tell a wrong export from a right one. Last, the user's own data:
that description file trained on a generated .npy set and on the same
images as a folder of PNGs (the two runs must agree), exported, and
rebuilt by model.py from the raw test pixels, standardized by the
metadata's statistics: herd eval's logits within 1e-5, and its accuracy. Exit status 0 when every
check passes; 1 with a message naming the first that does not.
"""
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"


def fail(msg):
    print("export_check: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(herd, *args):
    p = subprocess.run([herd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail("herd %s exited %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


# ---- readers ------------------------------------------------------------------


def read_safetensors(path):
    """The format: u64 little-endian header length N, N bytes of JSON, then
    the data; every tensor's data_offsets are relative to the data's start."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("%s: shorter than its length field" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("%s: header length %d runs past the file (%d bytes)" % (path, n, len(blob)))
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in meta.values()):
        fail("%s: __metadata__ values must be strings: %r" % (path, meta))
    tensors, spans = {}, []
    for name, t in header.items():
        if t["dtype"] != "F32":
            fail("%s: %s has dtype %s" % (path, name, t["dtype"]))
        begin, end = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        if end - begin != 4 * count:
            fail("%s: %s: offsets [%d, %d) for shape %s" % (path, name, begin, end, t["shape"]))
        floats = struct.unpack("<%df" % count, data[begin:end])
        tensors[name] = np.array(floats, dtype=np.float32).reshape(t["shape"])
        spans.append((begin, end))
    spans.sort()
    at = 0
    for begin, end in spans:  # the data is the tensors, back to back, nothing else
        if begin != at:
            fail("%s: a hole or an overlap at byte %d of the data" % (path, at))
        at = end
    if at != len(data):
        fail("%s: %d bytes of data after the last tensor" % (path, len(data) - at))
    return tensors, meta


def read_npy_dir(path):
    out = {}
    for f in sorted(os.listdir(path)):
        if not f.endswith(".npy"):
            fail("%s: unexpected file %s" % (path, f))
        a = np.load(os.path.join(path, f), allow_pickle=False)
        if a.dtype != np.dtype("<f4"):
            fail("%s/%s: dtype %s" % (path, f, a.dtype))
        out[f[: -len(".npy")]] = a
    return out


# ---- the models, in numpy (float64) ------------------------------------------


def conv2d(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    assert c == c2, (x.shape, w.shape)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    cols = np.empty((n, c, kh, kw, ho, wo))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i : i + stride * ho : stride, j : j + stride * wo : stride]
    y = np.tensordot(cols, w.astype(np.float64), axes=([1, 2, 3], [1, 2, 3]))  # n, ho, wo, o
    y = y.transpose(0, 3, 1, 2)
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def maxpool(x, k, s):
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    y = np.full((n, c, ho, wo), -np.inf)
    for i in range(k):
        for j in range(k):
            y = np.maximum(y, x[:, :, i : i + s * ho : s, j : j + s * wo : s])
    return y


def relu(x):
    return np.maximum(x, 0)


class Net:
    """Takes each tensor by name, once: a tensor left over is an error too."""

    def __init__(self, t):
        self.t = {k: v.astype(np.float64) for k, v in t.items()}
        self.used = set()

    def __getitem__(self, name):
        if name not in self.t:
            fail("no tensor %s (have %s)" % (name, sorted(self.t)))
        self.used.add(name)
        return self.t[name]

    def get(self, name):
        return self[name] if name in self.t else None

    def fc(self, x, i):
        x = x.reshape(x.shape[0], -1)
        return x @ self["fc%d.weight" % i].T + self["fc%d.bias" % i]

    def conv(self, x, i, stride=1, pad=0):
        return conv2d(x, self["conv%d.weight" % i], self.get("conv%d.bias" % i), stride, pad)

    def bn(self, x, i):
        p = "bn%d." % i
        scale = self[p + "weight"] / np.sqrt(self[p + "running_var"] + 1e-5)
        shift = self[p + "bias"] - self[p + "running_mean"] * scale
        return x * scale[None, :, None, None] + shift[None, :, None, None]

    def check_all_used(self):
        left = set(self.t) - self.used
        if left:
            fail("tensors the forward pass never used: %s" % sorted(left))


def forward(model, t, x):
    m = Net(t)
    x = x.astype(np.float64)
    if model == "linear":
        y = m.fc(x, 1)
    elif model == "mlp":
        y = m.fc(relu(m.fc(relu(m.fc(x, 1)), 2)), 3)
    elif model == "lenet":
        x = maxpool(relu(m.conv(x, 1, pad=2)), 2, 2)
        x = maxpool(relu(m.conv(x, 2)), 2, 2)
        y = m.fc(relu(m.fc(relu(m.fc(x, 1)), 2)), 3)
    elif model == "cnn":
        x = maxpool(relu(m.conv(x, 1, pad=2)), 2, 2)
        x = maxpool(relu(m.conv(x, 2, pad=2)), 2, 2)
        y = m.fc(relu(m.fc(x, 1)), 2)
    elif model == "resnet20":
        x = relu(m.bn(m.conv(x, 1, pad=1), 1))
        k = 1  # conv and bn numbers go up together, in forward order
        for s, width in enumerate((16, 32, 64)):
            for i in range(3):
                stride = 2 if s > 0 and i == 0 else 1
                a = relu(m.bn(m.conv(x, k + 1, stride, 1), k + 1))
                b = m.bn(m.conv(a, k + 2, 1, 1), k + 2)
                k += 2
                if stride != 1 or x.shape[1] != width:  # a 1x1 projection
                    x = m.bn(m.conv(x, k + 1, stride, 0), k + 1)
                    k += 1
                x = relu(b + x)
        y = m.fc(x.mean(axis=(2, 3)), 1)
    else:
        fail("no numpy model for " + model)
    m.check_all_used()
    return y


def torch_lenet(t, x):
    import torch
    import torch.nn.functional as F

    g = {k: torch.from_numpy(v.copy()) for k, v in t.items()}
    with torch.no_grad():
        y = F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), g["conv1.weight"], g["conv1.bias"], padding=2)), 2)
        y = F.max_pool2d(F.relu(F.conv2d(y, g["conv2.weight"], g["conv2.bias"])), 2)
        y = torch.flatten(y, 1)
        y = F.relu(F.linear(y, g["fc1.weight"], g["fc1.bias"]))
        y = F.relu(F.linear(y, g["fc2.weight"], g["fc2.bias"]))
        y = F.linear(y, g["fc3.weight"], g["fc3.bias"])
    return y.numpy().astype(np.float64)


# ---- the comparison ----------------------------------------------------------


def mismatch(ours, herds):
    """None when our logits are herd's (float32 rounding apart) and so are the
    predictions wherever the top two logits are not a near tie; else why not."""
    tol = 2e-5 * max(1.0, float(np.abs(herds).max()))
    diff = float(np.abs(ours - herds).max())
    if diff > tol:
        return "logits differ by %.3g (tolerance %.3g)" % (diff, tol)
    top2 = np.sort(herds, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 10 * tol
    if (ours.argmax(1)[clear] != herds.argmax(1)[clear]).any():
        return "predictions differ"
    return None


def mutated(t):
    """The same tensors with the values of two of the same shape exchanged
    (or, where no two share one, the largest reversed)."""
    m = dict(t)
    names = sorted(t, key=lambda k: (-t[k].size, k))
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if t[a].shape == t[b].shape and not np.array_equal(t[a], t[b]):
                m[a], m[b] = t[b], t[a]
                return m, "%s <-> %s" % (a, b)
    m[names[0]] = t[names[0]].reshape(-1)[::-1].reshape(t[names[0]].shape).copy()
    return m, names[0] + " reversed"


EXPECT = {  # (name, shape) of each model's first tensors, as PyTorch would have them
    "linear": [("fc1.weight", None), ("fc1.bias", None)],
    "lenet": [("conv1.weight", (6, 1, 5, 5)), ("conv1.bias", (6,)), ("conv2.weight", (16, 6, 5, 5))],
    "resnet20": [("conv1.weight", (16, 3, 3, 3)), ("bn1.weight", (16,)), ("bn1.running_var", (16,)),
                 ("fc1.weight", (4, 64))],
}


def torch_check(herd, d, ck, name):
    """herd export --format pytorch: model.py rebuilds the network from
    model.safetensors alone, and its logits on 256 test images are herd's
    within 1e-5; the same predictions, so the same accuracy. With two
    tensors exchanged, they are not."""
    import importlib.util

    import torch

    pt = os.path.join(d, "pytorch")
    run(herd, "export", "--checkpoint", ck, "--format", "pytorch", pt, "--quiet")
    logits_f, inputs_f = os.path.join(d, "logits256.npy"), os.path.join(d, "inputs256.npy")
    ev = json.loads(run(herd, "eval", "--checkpoint", ck, "--test-limit", "256", "--dump-logits", logits_f,
                        "--dump-inputs", inputs_f, "--json", "--quiet").splitlines()[-1])
    spec = importlib.util.spec_from_file_location("herd_model_" + name.replace("-", "_"), os.path.join(pt, "model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    net = mod.load(os.path.join(pt, "model.safetensors"))
    x, herds = torch.from_numpy(np.load(inputs_f)), np.load(logits_f).astype(np.float64)
    if x.shape[0] != 256 or ev["test_n"] != 256:
        fail("%s: %d inputs dumped, %d evaluated, want 256" % (name, x.shape[0], ev["test_n"]))
    with torch.no_grad():
        ours = net(x).numpy().astype(np.float64)
    tol = 1e-5  # herd's float32 against PyTorch's: 1e-7 to 1.4e-6 seen (AVX-512)
    diff = float(np.abs(ours - herds).max())
    if diff > tol:
        fail("%s: model.py's logits differ from herd's by %.3g (tolerance %.3g)" % (name, diff, tol))
    top2 = np.sort(herds, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * tol  # a near tie may go either way in either
    if (ours.argmax(1)[clear] != herds.argmax(1)[clear]).any():
        fail("%s: model.py predicts otherwise than herd" % name)
    state = {k: v.numpy() for k, v in net.state_dict().items() if k.count(".") == 1 and "num_batches" not in k}
    bad, how = mutated(state)
    net.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in bad.items()}, strict=False)
    with torch.no_grad():
        if float(np.abs(net(x).numpy() - herds).max()) <= tol:
            fail("%s: model.py with %s passes the comparison: it cannot tell" % (name, how))
    return diff


def check_case(herd, work, name, model, data, algo, extra):
    d = os.path.join(work, name)
    os.makedirs(d)
    ck = os.path.join(d, "ckpt")
    described = model.endswith(".model")
    if described:  # a description file of the layers the built-in models lack
        path = os.path.join(d, model)
        with open(path, "w") as f:
            f.write(DESCRIBED)
        model = path
    run(herd, "train", "--data", data, "--model", model, "--algo", algo, "--epochs", "1", "--train-limit", "256",
        "--test-limit", "64", "--batch", "16", "--checkpoint", ck, "--quiet", "--no-progress", *extra)
    if described:
        if not HAVE_TORCH:
            print("export_check: %s: skipped, torch is not installed (model.py is checked with torch)" % name)
            return
        diff = torch_check(herd, d, ck, name)
        print("export_check: %s: model.py's logits within %.2g of herd's on 256 images" % (name, diff))
        return
    st, npy = os.path.join(d, "model.safetensors"), os.path.join(d, "npy")
    run(herd, "export", "--checkpoint", ck, st, "--quiet")
    run(herd, "export", "--checkpoint", ck, "--format", "npy", npy, "--quiet")
    logits_f, inputs_f = os.path.join(d, "logits.npy"), os.path.join(d, "inputs.npy")
    ev = json.loads(run(herd, "eval", "--checkpoint", ck, "--test-limit", "8", "--dump-logits", logits_f,
                        "--dump-inputs", inputs_f, "--json", "--quiet").splitlines()[-1])
    t, meta = read_safetensors(st)
    tn = read_npy_dir(npy)
    if sorted(t) != sorted(tn):
        fail("%s: safetensors has %s, npy %s" % (name, sorted(t), sorted(tn)))
    for k in t:
        if t[k].shape != tn[k].shape or not np.array_equal(t[k], tn[k]):
            fail("%s: %s differs between safetensors and npy" % (name, k))
    for k, shape in EXPECT.get(model, []):
        if k not in t or (shape and t[k].shape != shape):
            fail("%s: %s: want shape %s, have %s" % (name, k, shape, t[k].shape if k in t else "none"))
    want_meta = {"model": model, "algo": algo, "eval_model": ev["eval_model"], "producer": "herd"}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            fail("%s: __metadata__[%s] is %r, want %r" % (name, k, meta.get(k), v))
    if ev["eval_model"] != EVAL_MODEL[algo] or not ev["final"]:
        fail("%s: herd eval scored the %s model (final %s), want the run's final %s" % (name, ev["eval_model"],
             ev["final"], EVAL_MODEL[algo]))
    x, herds = np.load(inputs_f), np.load(logits_f).astype(np.float64)
    if x.shape[0] != 8 or herds.shape != (8, int(meta["classes"])):
        fail("%s: dumps of shape %s and %s" % (name, x.shape, herds.shape))
    why = mismatch(forward(model, t, x), herds)
    if why:
        fail("%s: numpy's forward pass of the exported %s is not herd's: %s" % (name, model, why))
    if model == "lenet" and HAVE_TORCH:
        why = mismatch(torch_lenet(t, x), herds)
        if why:
            fail("%s: torch's forward pass of the exported lenet is not herd's: %s" % (name, why))
    bad, how = mutated(t)
    if mismatch(forward(model, bad, x), herds) is None:
        fail("%s: a mutated export (%s) passes the comparison: it cannot tell" % (name, how))
    if meta.get("description", "").splitlines()[:1] != [open("models/%s.model" % model).readline().rstrip("\n")]:
        fail("%s: __metadata__[description] is not models/%s.model" % (name, model))
    said = ""
    if HAVE_TORCH:
        said = ", model.py's within %.2g of herd's on 256 images" % torch_check(herd, d, ck, name)
    print("export_check: %s: %d tensors, logits within tolerance of herd's (%s model)%s%s" %
          (name, len(t), ev["eval_model"], ", torch too" if model == "lenet" and HAVE_TORCH else "", said))


# ---- a description file on the user's own data: .npy and a folder of PNGs ----


def write_png(path, img):
    """img: H x W x 3 uint8, written as an 8-bit RGB PNG with zlib alone."""
    h, w, _ = img.shape
    raw = b"".join(b"\0" + img[r].tobytes() for r in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def own_data(work):
    """A tiny learnable set (4 classes of 3x12x12 color images: a prototype
    each, plus noise), written as a directory of .npy files (N x H x W x C,
    uint8; int64 labels) and as an image folder (train/cK/NNNN.png). Both
    sets are sorted by class, the order an image folder is read in, so the
    two hold the same examples in the same order. Returns both directories
    and the raw test set (N x C x H x W, pixels / 255) with its labels."""
    rng = np.random.default_rng(31)
    proto = rng.integers(0, 256, (4, 12, 12, 3))
    npy, folder = os.path.join(work, "own-npy"), os.path.join(work, "own-images")
    os.makedirs(npy)
    for part, n in (("train", 512), ("test", 256)):
        y = np.sort(rng.integers(0, 4, n))
        x = np.clip(proto[y] + rng.normal(0, 80, (n, 12, 12, 3)), 0, 255).astype(np.uint8)
        np.save(os.path.join(npy, part + "_images.npy"), x)
        np.save(os.path.join(npy, part + "_labels.npy"), y.astype(np.int64))
        for i in range(n):
            d = os.path.join(folder, part, "c%d" % y[i])
            os.makedirs(d, exist_ok=True)
            write_png(os.path.join(d, "%04d.png" % i), x[i])
    return npy, folder, x.transpose(0, 3, 1, 2).astype(np.float32) / 255, y


def own_case(herd, work, name, data, raw, labels):
    """The description file trained on the user's own data, exported, and
    rebuilt by model.py from raw pixels: the same logits as herd eval's
    within 1e-5 and the same accuracy. Returns herd's logits."""
    d = os.path.join(work, name)
    os.makedirs(d)
    path, ck = os.path.join(d, "own.model"), os.path.join(d, "ckpt")
    with open(path, "w") as f:
        f.write(DESCRIBED)
    run(herd, "train", "--data", data, "--model", path, "--epochs", "3", "--batch", "16", "--checkpoint", ck,
        "--quiet", "--no-progress")
    logits_f = os.path.join(d, "logits.npy")
    ev = json.loads(run(herd, "eval", "--checkpoint", ck, "--dump-logits", logits_f, "--json",
                        "--quiet").splitlines()[-1])
    herds = np.load(logits_f).astype(np.float64)
    if ev["test_n"] != len(labels) or herds.shape != (len(labels), 4):
        fail("%s: herd eval scored %d examples, logits %s; want %d x 4" % (name, ev["test_n"], herds.shape,
                                                                          len(labels)))
    if ev["test_acc"] < 0.5:
        fail("%s: test accuracy %.4f after 3 epochs: the set did not train" % (name, ev["test_acc"]))
    if not HAVE_TORCH:
        print("export_check: %s: trained, %.4f; model.py not checked, torch is not installed" % (name, ev["test_acc"]))
        return herds
    diff = torch_check(herd, d, ck, name)
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("herd_own_" + name.replace("-", "_"),
                                                  os.path.join(d, "pytorch", "model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    net = mod.load(os.path.join(d, "pytorch", "model.safetensors"))
    with torch.no_grad():  # as a user would: raw pixels / 255, standardized by the metadata's statistics
        ours = net(mod.standardize(net, torch.from_numpy(raw))).numpy().astype(np.float64)
    raw_diff = float(np.abs(ours - herds).max())
    if raw_diff > 1e-5:
        fail("%s: model.py on the raw test set: logits differ from herd's by %.3g" % (name, raw_diff))
    top2 = np.sort(herds, axis=1)[:, -2:]
    ties = int((top2[:, 1] - top2[:, 0] <= 2e-5).sum())
    acc = float((ours.argmax(1) == labels).mean())
    if abs(acc - ev["test_acc"]) > ties / len(labels) + 1e-6:
        fail("%s: model.py scores %.4f, herd eval %.4f" % (name, acc, ev["test_acc"]))
    print("export_check: %s: herd eval %.4f, model.py on raw pixels %.4f (logits within %.2g; within %.2g on "
          "herd's inputs)" % (name, ev["test_acc"], acc, raw_diff, diff))
    return herds


def own_data_cases(herd, work):
    npy, folder, raw, labels = own_data(work)
    a = own_case(herd, work, "described-npy", npy, raw, labels)
    b = own_case(herd, work, "described-images", folder, raw, labels)
    if not np.array_equal(a, b):  # one set, one order: one run
        fail("the .npy set and its image folder train different models (logits differ by %.3g)" %
             float(np.abs(a - b).max()))


EVAL_MODEL = {"sgd": "worker0", "easgd": "center", "dpsgd": "average", "asgd": "server"}

DESCRIBED = """# every layer the built-in models lack, with labels and a residual add
conv 8 k=3 pad=1
batchnorm
relu
avgpool 2
r: conv 8 k=3 pad=1
gelu
add r
sigmoid
dropout 0.2
maxpool 2 stride=1
flatten
linear 32
tanh
linear classes
"""

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    herd, work = sys.argv[1], sys.argv[2]
    fm = FMNIST if os.path.isdir(FMNIST) else "synthetic:1x28x28:10"
    cases = [
        ("linear-sgd", "linear", "synthetic:1x12x12:4", "sgd", []),
        ("mlp-dpsgd", "mlp", "synthetic:1x12x12:4", "dpsgd", ["--workers", "2"]),
        ("lenet-easgd", "lenet", fm, "easgd", ["--workers", "2"]),
        ("resnet20-asgd", "resnet20", "synthetic:3x8x8:4", "asgd", ["--workers", "2"]),
        ("cnn-sgd", "cnn", fm, "sgd", ["--lr", "0.01"]),  # at the default rate 16 steps leave it dead
        ("described-sgd", "net.model", "synthetic:3x12x12:4", "sgd", []),
    ]
    if not HAVE_TORCH:
        print("export_check: torch is not installed: model.py (herd export --format pytorch) is not checked")
    for c in cases:
        check_case(herd, work, *c)
    own_data_cases(herd, work)
    print("export_check: ok")


if __name__ == "__main__":
    main()
