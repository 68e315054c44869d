"""model.py -- a herd model rebuilt in PyTorch, written by `herd export
--format pytorch` beside model.safetensors.

The safetensors file carries the whole model: its tensors and, in its
metadata, the description herd built it from (docs/models-and-data.md),
one example's shape, the classes and the inputs' standardization. This
file reads them and builds the same network; it needs torch alone (the
safetensors package is not used).

    import model
    net = model.load("model.safetensors")    # a torch.nn.Module, in eval mode
    logits = net(model.standardize(net, raw))  # raw: N x C x H x W, as the metadata's input_raw says

    python3 model.py model.safetensors        # prints the network

Made by herd (src/run/export_model.py); the layers' semantics are herd's:
the fully connected layers read their input flattened in NCHW order, max
and average pooling have no padding, batch norm has eps 1e-5 and momentum
0.1, gelu is the exact (erf) one, dropout is the identity in evaluation.
"""
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """(metadata, {name: tensor}) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32) if end > begin else torch.zeros(0)
        tensors[name] = flat.reshape(t["shape"]).clone()
    return meta, tensors


def parse(description):
    """The description's layers: (line, label, kind, positional, options)."""
    out = []
    for number, text in enumerate(description.split("\n"), 1):
        words = text.split("#", 1)[0].split()
        if not words:
            continue
        label = None
        if len(words[0]) > 1 and words[0].endswith(":"):
            label, words = words[0][:-1], words[1:]
        pos = [w for w in words[1:] if "=" not in w]
        opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        out.append((number, label, words[0], pos, opts))
    return out


class HerdNet(nn.Module):
    """The network a herd description describes, for inputs of shape (c, h, w)
    and `classes` outputs; its parameters are named as herd export names them
    (conv1, fc1, bn1..., numbered by kind in forward order)."""

    def __init__(self, description, c, h, w, classes):
        super().__init__()
        self.steps = []  # (kind, module name or argument, inputs)
        labels, shapes = {"input": -1}, {-1: (c, h, w, False)}
        count = {"conv": 0, "fc": 0, "bn": 0}
        prev = -1
        for line, label, kind, pos, opts in parse(description):
            src = labels[opts["from"]] if "from" in opts else prev
            cin, hin, win, flat = shapes[src]
            ins, arg = [src], None
            if kind == "conv":
                n, k = int(pos[0]), int(opts["k"])
                s, p = int(opts.get("stride", 1)), int(opts.get("pad", 0))
                count["conv"] += 1
                arg = "conv%d" % count["conv"]
                self.add_module(arg, nn.Conv2d(cin, n, k, s, p, bias=opts.get("bias", "yes") == "yes"))
                shape = (n, (hin + 2 * p - k) // s + 1, (win + 2 * p - k) // s + 1, False)
            elif kind == "linear":
                n = classes if pos[0] == "classes" else int(pos[0])
                count["fc"] += 1
                arg = "fc%d" % count["fc"]
                self.add_module(arg, nn.Linear(cin * hin * win, n))
                shape = (n, 1, 1, True)
            elif kind in ("maxpool", "avgpool"):
                k = int(pos[0])
                s = int(opts.get("stride", k))
                arg = (k, s)
                shape = (cin, (hin - k) // s + 1, (win - k) // s + 1, False)
            elif kind == "batchnorm":
                count["bn"] += 1
                arg = "bn%d" % count["bn"]
                self.add_module(arg, nn.BatchNorm2d(cin, eps=1e-5, momentum=0.1))
                shape = (cin, hin, win, flat)
            elif kind in ("gavgpool", "flatten"):
                shape = (cin, 1, 1, True) if kind == "gavgpool" else (cin * hin * win, 1, 1, True)
            elif kind == "add":
                ins = [labels[pos[0]], labels[pos[1]]] if len(pos) == 2 else [prev, labels[pos[0]]]
                shape = shapes[ins[0]]
            elif kind in ("relu", "tanh", "sigmoid", "gelu", "dropout"):
                arg = float(pos[0]) if kind == "dropout" else None
                shape = (cin, hin, win, flat)
            else:
                raise ValueError("line %d: unknown layer %r" % (line, kind))
            self.steps.append((kind, arg, ins))
            prev = len(self.steps) - 1
            shapes[prev] = shape
            if label:
                labels[label] = prev

    def forward(self, x):
        outs = []

        def at(i):
            return x if i < 0 else outs[i]

        for kind, arg, ins in self.steps:
            a = at(ins[0])
            if kind in ("conv", "batchnorm"):
                y = getattr(self, arg)(a)
            elif kind == "linear":
                y = getattr(self, arg)(torch.flatten(a, 1))
            elif kind == "maxpool":
                y = F.max_pool2d(a, arg[0], arg[1])
            elif kind == "avgpool":
                y = F.avg_pool2d(a, arg[0], arg[1])
            elif kind == "gavgpool":
                y = a.mean(dim=(2, 3))
            elif kind == "flatten":
                y = torch.flatten(a, 1)
            elif kind == "add":
                y = a + at(ins[1])
            elif kind == "relu":
                y = F.relu(a)
            elif kind == "tanh":
                y = torch.tanh(a)
            elif kind == "sigmoid":
                y = torch.sigmoid(a)
            elif kind == "gelu":
                y = F.gelu(a)
            else:  # dropout: inverted, as herd's; the identity in eval mode
                y = F.dropout(a, arg, self.training)
            outs.append(y)
        return outs[-1]


def load(path):
    """The model of a safetensors file herd export wrote, weights loaded, in
    eval mode; its metadata as .meta."""
    meta, tensors = read_safetensors(path)
    c, h, w = (int(v) for v in meta["input_shape"].split("x"))
    net = HerdNet(meta["description"], c, h, w, int(meta["classes"]))
    state = dict(tensors)
    for name, module in net.named_modules():  # PyTorch counts batches seen; herd does not
        if isinstance(module, nn.BatchNorm2d):
            state[name + ".num_batches_tracked"] = torch.tensor(0)
    net.load_state_dict(state, strict=True)
    net.meta = meta
    return net.eval()


def standardize(net, raw):
    """What the model takes from raw inputs (N x C x H x W): (raw - mean) / std
    per channel, the run's training set's statistics."""
    if "input_mean" not in net.meta:
        return raw
    mean = torch.tensor([float(v) for v in net.meta["input_mean"].split(",")], dtype=raw.dtype)
    std = torch.tensor([float(v) for v in net.meta["input_std"].split(",")], dtype=raw.dtype)
    return (raw - mean[None, :, None, None]) / std[None, :, None, None]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 model.py MODEL.safetensors", file=sys.stderr)
        sys.exit(2)
    net = load(sys.argv[1])
    print(net)
    print("input %s, %s classes, %d parameters" % (net.meta["input_shape"], net.meta["classes"],
                                                   sum(p.numel() for p in net.parameters())))
