#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora and the CLI dictionary into OUT:
OUT/idx, OUT/cifar, OUT/npy, OUT/image, OUT/ckpt, OUT/cli, OUT/desc (one valid input or more
each; desc: the built-in models' descriptions, models/*.model, and one of
every layer kind) and
OUT/cli.dict (every flag of every sub-command: the herd_opt rows of
src/cli/*.c, the run's option table src/run/options.c and the algorithms'
tables)."""
import os, re, struct, sys

out = sys.argv[1]
for d in ("idx", "cifar", "npy", "image", "ckpt", "cli", "desc"):
    os.makedirs(os.path.join(out, d), exist_ok=True)

def put(d, name, data):
    with open(os.path.join(out, d, name), "wb") as f:
        f.write(data)

# IDX: 2-byte big-endian image length, image file, label file
for n, h, w in ((3, 2, 2), (12, 5, 3), (1, 28, 28)):
    img = struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 7) % 256 for i in range(n * h * w))
    lab = struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
    put("idx", "idx-%dx%dx%d" % (n, h, w), struct.pack(">H", len(img)) + img + lab)

# CIFAR: one and two records
rec = lambda k: bytes([k % 10]) + bytes((i + k) % 251 for i in range(3072))
put("cifar", "one", rec(3))
put("cifar", "two", rec(1) + rec(9))

# descriptions: the built-in models, and every kind of layer
for f in sorted(os.listdir("models")):
    if f.endswith(".model"):
        with open(os.path.join("models", f), "rb") as src:
            put("desc", f, src.read())
put("desc", "every-kind", b"conv 4 k=3 pad=1\nbatchnorm\na: relu\navgpool 2 stride=1\nconv 4 k=2 from=a\n"
    b"tanh\nb: sigmoid\ngelu\nadd b\nmaxpool 2\ndropout 0.5\nflatten\nlinear 8\nlinear classes\n")

# .npy: 2-byte big-endian image length, image array, label array (format
# 1.0 to 3.0: magic, version, header length, a dict padded to 64 bytes)
def npy(descr, shape, data, major=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if major == 1 else 12
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    hdr = (d + " " * pad + "\n").encode()
    size = struct.pack("<H" if major == 1 else "<I", len(hdr))
    return b"\x93NUMPY" + bytes([major, 0]) + size + hdr + data

for name, img, lab in (
        ("u8-nchw", npy("|u1", "(2, 1, 3, 3)", bytes(range(18))), npy("<i8", "(2,)", struct.pack("<2q", 0, 3))),
        ("u8-nhwc", npy("|u1", "(2, 4, 4, 3)", bytes(range(96)), 2), npy("<i4", "(2, 1)", struct.pack("<2i", 1, 0))),
        ("f32", npy("<f4", "(3, 4)", struct.pack("<12f", *range(12)), 3), npy("|u1", "(3,)", bytes([2, 0, 1])))):
    put("npy", name, struct.pack(">H", len(img)) + img + lab)

# images: PNGs of several color types and depths (zlib-compressed rows,
# filter 0), and two JPEGs libjpeg wrote (8x8 gray baseline, 8x8 RGB
# progressive), as bytes
import zlib
def png(w, h, ctype, depth, rows, plte=b""):
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + (chunk(b"PLTE", plte) if plte else b"") +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

put("image", "gray8.png", png(4, 4, 0, 8, [bytes(range(y * 4, y * 4 + 4)) for y in range(4)]))
put("image", "rgb8.png", png(3, 3, 2, 8, [bytes((y * 30 + i) % 256 for i in range(9)) for y in range(3)]))
put("image", "gray1.png", png(9, 2, 0, 1, [b"\xaa\x80", b"\x55\x00"]))
put("image", "rgba16.png", png(2, 2, 6, 16, [bytes(range(16)), bytes(range(16, 32))]))
put("image", "palette.png", png(2, 2, 3, 8, [b"\0\1", b"\1\0"], plte=b"\xff\0\0\0\xff\0"))
put("image", "gray.jpg", bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123"
    "251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffc0000b080008"
    "000801011100ffc40014000100000000000000000000000000000004ffc4001810000203000000000000000000000000"
    "000004052231ffda0008010100003f0012103943ffd9"))
put("image", "rgb-progressive.jpg", bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123"
    "251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb0043011112"
    "121815182f1a1a2f63423842636363636363636363636363636363636363636363636363636363636363636363636363"
    "6363636363636363636363636363ffc20011080008000803012200021101031101ffc400140001000000000000000000"
    "00000000000000ffc4001501010100000000000000000000000000000001ffda000c0301000210031000000105ffc400"
    "161001010100000000000000000000000000010302ffda0008010100010502c8427fffc4001511010100000000000000"
    "000000000000000031ffda0008010301013f018fffc40014110100000000000000000000000000000000ffda00080102"
    "01013f017fffc4001810000203000000000000000000000000000001123141ffda0008010100063f0293bc47ffc40017"
    "1000030100000000000000000000000000000111b1ffda0008010100013f21953533ffda000c03010002000300000010"
    "fbffc400191100010500000000000000000000000000110001415171ffda0008010301013f1022c272d7ffc400161100"
    "030000000000000000000000000000000131ffda0008010201013f10acffc40019100100020300000000000000000000"
    "00000100113141d1ffda0008010100013f10abc59499e46e7fffd9"))

# checkpoint: the layout of include/herd/herd_ckpt.h
def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def ckpt(sections, workers=2, step=5):
    hbytes = 128 + 48 * len(sections)
    total = hbytes + sum(len(d) for _, _, d in sections)
    hdr = bytearray(b"HERDCKPT" + struct.pack("<IIQQQQQQIIII", 1, hbytes, total, step, 0, 3, 1, 10,
                                                workers, 32, len(sections), 0))
    hdr += b"mlp".ljust(20, b"\0") + b"allreduce".ljust(24, b"\0") + b"\0" * 4
    table, off = bytearray(), hbytes
    for name, worker, data in sections:
        table += name.encode().ljust(24, b"\0") + struct.pack("<IIQQ", worker, crc32c(data), off, len(data))
        off += len(data)
    crc = crc32c(bytes(table), crc32c(bytes(hdr[:124])))
    hdr[124:128] = struct.pack("<I", crc)
    return bytes(hdr + table) + b"".join(d for _, _, d in sections)

params = struct.pack("<3f", 0.5, -1.0, 2.0)
cursor = struct.pack("<QQQQd", 0, 5, 5, 5, 3.25)
put("ckpt", "two-workers", ckpt([("params", 0, params), ("cursor", 0, cursor),
                                 ("params", 1, params), ("cursor", 1, cursor)]))
put("ckpt", "empty", ckpt([], workers=1, step=0))

# CLI: NUL-separated arguments after "herd"
lines = [
    ["train", "--epochs", "2", "--workers", "4", "--algo", "allreduce", "--lr=0.1"],
    ["train", "--slow", "1:3.5", "--fail", "2@100", "--max-staleness", "4", "--algo", "asgd"],
    ["train", "--checkpoint", "ck", "--checkpoint-every", "10", "--keep", "2", "--resume"],
    ["train", "--comm-dtype", "fp16", "--allreduce", "native", "--schedule", "step", "--json"],
    ["algos"], ["version"], ["train", "--help"],
    ["bench", "allreduce", "--iters", "3", "--min-bytes=8", "--comm-dtype", "bf16"],
    ["bench", "gemm", "--size", "64", "--threads", "2"],
    ["sim", "--workers", "4", "--slow", "1:2", "--", "train", "--algo", "asgd"],
    ["compare", "--seeds", "2", "--target", "0.5", "--", "allreduce --lr 0.1"],
    ["eval", "--checkpoint", "ck", "--threads", "2", "--json"],
    ["export", "--checkpoint", "ck", "--format", "npy", "out"],
]
for i, l in enumerate(lines):
    put("cli", "args-%d" % i, b"\0".join(a.encode() for a in l))
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
def sources(*parts):
    d = os.path.join(root, "src", *parts)
    return "".join(open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.endswith(".c"))
# every sub-command's flags (src/cli), the run's options and every algorithm's
flags = sorted(set(re.findall(r'\{\.name = "([a-z0-9-]+)", \.type = HERD_OPT_',
                              sources("cli") + sources("run") + sources("algo"))))
with open(os.path.join(out, "cli.dict"), "w") as f:
    for fl in flags:
        f.write('"--%s"\n' % fl)
    for w in ("train", "bench", "gemm", "allreduce", "sim", "compare", "eval", "export", "algos", "engines",
              "--", "=", "@", ":", ",", "\\x00"):
        f.write('"%s"\n' % w)
