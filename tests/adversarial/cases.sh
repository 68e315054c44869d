# The adversarial cases (sourced by tests/adversarial/run.sh), by class.
# Each: expect NAME RC MESSAGE [changes PATH... --] -- ARGS...
# shellcheck shell=bash disable=SC2034 # check, stdin, stdout are read by expect

# ---- usage errors: exit 2, one message naming the flag, nothing written ----
expect usage-unknown-flag 2 "herd: unknown flag '--bogus' (see 'herd train --help')" -- train --bogus
expect usage-unknown-command 2 "herd: unknown command 'trian'" -- trian
expect usage-no-command 2 "usage: herd <command>" --
expect usage-missing-value 2 "flag '--epochs' needs a value" -- train --epochs
expect usage-bool-with-value 2 "flag '--nesterov' takes no value" -- train --nesterov=yes
expect usage-not-a-number 2 "herd: --lr: expected a number, got 'fast'" -- train --lr fast
expect usage-nan 2 "herd: --lr: expected a number, got 'nan'" -- train --lr nan --dry-run
expect usage-inf 2 "herd: --lr: expected a number, got 'inf'" -- train --lr inf --dry-run
expect usage-negative-size 2 "--epochs: expected a non-negative integer, got '-3'" -- train --epochs -3
expect usage-huge-size 2 "--workers must be in [1, 4096], got 5000" -- train --workers 5000 --dry-run
expect usage-zero-workers 2 "--workers must be in [1, 4096], got 0" -- train --workers 0 --dry-run
expect usage-zero-batch 2 "--batch must be in [1, 65536], got 0" -- train --batch 0 --dry-run
expect usage-negative-lr 2 "--lr must be in (0, 100], got -1" -- train --lr -1 --dry-run
expect usage-float-underflow 2 "--lr: 1e-300 is out of the range of a float" -- train --lr 1e-300 --dry-run
expect usage-momentum-one 2 "--momentum must be in [0, 1), got 1" -- train --momentum 1 --dry-run
expect usage-threads 2 "--threads must be in [0, 256], got 300" -- train --threads 300 --dry-run
expect usage-timeout-zero 2 "--timeout must be in (0, 86400], got 0" -- train --timeout 0 --dry-run
expect usage-seed-negative 2 "--seed: expected a non-negative integer, got '-1'" -- train --seed -1 --dry-run
expect usage-choice 2 "--precision must be fp32 or bf16, got 'fp16'" -- train --precision fp16 --dry-run
expect usage-schedule 2 "--schedule must be const, step or cosine, got 'linear'" -- train --schedule linear
expect usage-empty-data 2 "--data: expected a value, got ''" -- train --data "" --dry-run
expect usage-empty-log 2 "--log: expected a value, got ''" -- train --log "" --dry-run
expect usage-slow-form 2 "--slow: expected RANK:FACTOR" -- train --slow 3
expect usage-fail-mode 2 "--fail: expected RANK@STEP[:MODE]" -- train --fail 1@2:explode
expect usage-inject-form 2 "--inject-nan: expected RANK@STEP" -- train --inject-nan x@1
expect usage-twice 2 "--lr is given twice ('0.1', then '0.2')" -- train --lr 0.1 --lr=0.2 --dry-run
expect usage-twice-algo-option 2 "--softsync is given twice ('2', then '3')" -- train --algo amsgd --workers 4 --softsync 2 --softsync 3 --dry-run
expect usage-twice-bool 2 "--nesterov is given twice" -- train --nesterov --nesterov --dry-run
expect usage-after-dashes 2 "unknown flag '--'" -- train -- --epochs 1
expect usage-algo-option-elsewhere 2 "--local-steps applies to localsgd, postlocal, not --algo allreduce" -- train --algo allreduce --workers 2 --local-steps 3 --dry-run
expect usage-lr-as-algo-option 2 "--softsync must be in [1," -- train --algo amsgd --workers 2 --softsync 0
expect usage-bench-unknown 2 "unknown benchmark 'fft'" -- bench fft
expect usage-bench-flag 2 "unknown flag '--workers' (see 'herd bench --help')" -- bench gemm --workers 2
expect usage-sim-workers 2 "--workers must be in [1, 4096], got 0" -- sim --workers 0 -- train
expect usage-compare-seeds 2 "--seeds must be in [1, 100], got 0" -- compare --seeds 0 allreduce
expect usage-model-unknown 2 "herd: unknown model 'lenett' (choose one of: linear, mlp, lenet, cnn, resnet20, or a description file)" -- model lenett
expect usage-eval-flag 2 "unknown flag '--bogus' (see 'herd eval --help')" -- eval --bogus
expect usage-export-flag 2 "unknown flag '--bogus' (see 'herd export --help')" -- export --bogus

# ---- one validation: --dry-run refuses what the run refuses, alike ------
for spec in "osgp --workers 4 --checkpoint ck|--algo osgp keeps state between steps" \
    "allreduce --workers 2 --warmup 9|--warmup must be in [0, epochs], got 9" \
    "allreduce --workers 2 --fail 5@1|--fail 5@1 names worker 5, but there are 2 workers" \
    "allreduce --workers 2 --fail 1@1:kill|the threads engine's mode is stop" \
    "sgd --workers 2|--algo sgd runs on at most 1 worker(s), got --workers 2" \
    "nosuch|unknown algorithm 'nosuch'" \
    "allreduce --workers 2 --slow 3:2|--slow 3:2 names worker 3, but there are 2 workers" \
    "allreduce --workers 2 --slow 1:0.5|--slow factor must be in [1, 1e6], got 0.5" \
    "sgd --resume|--resume needs --checkpoint DIR" \
    "sgd --checkpoint-every 3|--checkpoint-every needs --checkpoint DIR" \
    "sgd --nesterov --momentum 0|--nesterov needs --momentum > 0" \
    "sgd --optimizer lamb --nesterov|--nesterov applies to --optimizer sgd and lars"; do
    algo_args=${spec%%|*} says=${spec#*|}
    # shellcheck disable=SC2086 # the spec's words
    expect "dry-run-refuses: $algo_args" 2 "$says" -- train "${tiny[@]}" --algo $algo_args --dry-run
    # shellcheck disable=SC2086
    expect "run-refuses: $algo_args" 2 "$says" -- train "${tiny[@]}" --algo $algo_args
done
expect dry-run-synthetic-size 2 "would take 175.8 GiB, above the 8 GiB" -- train --data synthetic:3x512x512:10 --model linear --dry-run
expect run-synthetic-size 2 "would take 175.8 GiB, above the 8 GiB" -- train --data synthetic:3x512x512:10 --model linear --train-limit 64
expect dry-run-synthetic-form 2 "expected CxHxW:K" -- train --data synthetic:3x32 --dry-run
expect dry-run-model 2 "unknown model 'foo'" -- train --model foo --dry-run
expect dry-run-engine 2 "unknown engine" -- train --engine warp --dry-run
expect dry-run-accepts 0 "" -- train "${tiny[@]}" --algo easgd --workers 3 --dry-run

# ---- configuration files ----------------------------------------------
setup() { printf 'model = linear\nworkers = 0\n' >bad.conf; }
expect config-bad-value 2 "bad.conf:2: --workers must be in [1, 4096], got 0" -- train --config bad.conf --dry-run
setup() { printf 'model = linear\nmodel = mlp\n' >twice.conf; }
expect config-twice 2 "twice.conf:2: model is given twice" -- train --config twice.conf --dry-run
setup() { printf 'model linear\n' >form.conf; }
expect config-form 2 "form.conf:1: expected NAME = VALUE or NAME" -- train --config form.conf --dry-run
expect config-missing 2 "--config nothere.conf" -- train --config nothere.conf --dry-run
setup() { printf '{"model": "linear", "workers": 2\n' >cut.json; }
expect config-json-cut 2 "cut.json: not a JSON object of options" -- train --config cut.json --dry-run
setup() { mkdir d.conf; }
expect config-directory 2 "not a regular file" -- train --config d.conf --dry-run
setup() { printf '{"model": "linear", "workers": [2]}\n' >bad.json; }
expect config-json-bad 2 "bad.json: --workers takes one value, not a list" -- train --config bad.json --dry-run
setup() { printf 'model = linear\nworkers = 3\nalgo = sgd\n' >ok.conf; }
expect config-then-flag 0 "" -- train --config ok.conf --workers 1 --dry-run
setup() { printf 'algo = sgd\nworkers = 3\n' >sgd.conf; }
expect config-checked-whole 2 "--algo sgd runs on at most 1 worker(s), got --workers 3" -- train --config sgd.conf --dry-run

# ---- writes that never destroy ------------------------------------------
setup() { mkdir logdir; }
expect log-is-directory 1 "logdir" -- train "${tiny[@]}" --log logdir
setup() { ln -s nowhere/x.jsonl dangling; }
expect log-dangling-link 1 "dangling" -- train "${tiny[@]}" --log dangling
setup() { printf 'keep\n' >target.jsonl && ln -s target.jsonl link.jsonl; }
check='[ -L link.jsonl ] && grep -q keep target.jsonl && grep -q "\"event\":\"end\"" target.jsonl'
expect log-through-link 0 "" changes target.jsonl -- train "${tiny[@]}" --log link.jsonl
setup() { mkfifo fifo.jsonl; }
expect log-fifo-no-reader 1 "fifo.jsonl" -- train "${tiny[@]}" --log fifo.jsonl
setup() { mkdir tracedir; }
expect trace-is-directory 1 "tracedir" -- train "${tiny[@]}" --trace tracedir
# looked at before the run: no log begun, no step taken (it failed after the run)
setup() { mkdir tracedir; }
expect trace-is-directory-first 1 "--trace tracedir: is a directory" -- train "${tiny[@]}" --trace tracedir --log run.jsonl
setup() { ln -s nowhere/t.json tracelink; }
expect trace-dangling-first 1 "--trace tracelink: a symbolic link to a missing file" -- train "${tiny[@]}" --trace tracelink --log run.jsonl
setup() { printf 'x\n' >ckfile; }
expect checkpoint-is-file 2 "ckfile is a file" -- train "${tiny[@]}" --checkpoint ckfile
setup() { mkdir ck && printf 'not a checkpoint' >ck/ckpt-5.herd; }
expect resume-corrupt-only 1 "none of its 1 checkpoint(s) is valid" changes ck/.lock -- train "${tiny[@]}" --checkpoint ck --resume
# herd sim's own outputs: --paje (SimGrid opens it: a FIFO would hold the
# simulation) and the files --keep DIR holds already (a FIFO was waited on,
# SIGTERM ignored); /bin/true stands for herd-sim, which --dry-run never runs
sim=(sim --workers 2 --bin /bin/true)
setup() { mkfifo t.paje; }
expect sim-paje-fifo 1 "--paje t.paje: is a FIFO; SimGrid writes the trace itself" -- "${sim[@]}" --paje t.paje --dry-run -- train
setup() { mkdir t.paje; }
expect sim-paje-directory 1 "--paje t.paje: is a directory" -- "${sim[@]}" --paje t.paje --dry-run -- train
setup() { mkdir kd && mkfifo kd/hosts; }
expect sim-keep-fifo 1 "output file kd/hosts: a FIFO that no process reads" -- "${sim[@]}" --keep kd --dry-run -- train
expect checkpoint-new-dir 0 "" changes ck -- train "${tiny[@]}" --checkpoint ck

# an output never lands on a checkpoint its command reads or keeps (the
# run's one model was written over with exit 0), nor on another output
ckpt4() { "$herd" train "${tiny[@]}" --checkpoint ck --quiet >/dev/null 2>&1 && [ -f ck/ckpt-4.herd ]; }
setup() { ckpt4; }
expect export-over-its-checkpoint 1 "export: ck/ckpt-4.herd is a checkpoint's file in ck; herd export will not write over" -- export --checkpoint ck ck/ckpt-4.herd
setup() { ckpt4 && ln -s ck/ckpt-4.herd model.st; }
expect export-link-to-checkpoint 1 "export: model.st is a checkpoint's file in ck" -- export --checkpoint ck model.st
setup() { ckpt4; }
expect eval-dump-over-checkpoint 2 "--dump-logits ck/ckpt-4.herd is a checkpoint's file in ck" -- eval --checkpoint ck --dump-logits ck/ckpt-4.herd
setup() { ckpt4; }
expect eval-dumps-same-file 2 "--dump-logits out.npy and --dump-inputs ./out.npy are the same file" -- eval --checkpoint ck --dump-logits out.npy --dump-inputs ./out.npy
setup() { ckpt4; }
expect log-over-checkpoint 2 "--log ck/ckpt-4.herd is a checkpoint's file in --checkpoint ck" -- train "${tiny[@]}" --checkpoint ck --resume --log ck/ckpt-4.herd
expect trace-over-lock 2 "--trace ck/.lock is a checkpoint's file in --checkpoint ck" -- train "${tiny[@]}" --checkpoint ck --trace ck/.lock --dry-run
expect log-trace-same-file 2 "--log run.json and --trace run.json are the same file" -- train "${tiny[@]}" --log run.json --trace run.json

# ---- results tied to their data, and to their options --------------------
# idx DIR SEED: a small IDX data set (8x8 images, 4 classes) in DIR
idx() {
    python3 - "$1" "$2" <<'PY'
import os, random, struct, sys
d, seed = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
r = random.Random(seed)
for part, n in (("train", 512), ("t10k", 128)):
    ys = [r.randrange(4) for _ in range(n)]
    xs = bytes(min(255, max(0, 40 * y + r.randrange(-30, 30) + 40)) for y in ys for _ in range(64))
    open(os.path.join(d, part + "-images-idx3-ubyte"), "wb").write(struct.pack(">IIII", 0x803, n, 8, 8) + xs)
    open(os.path.join(d, part + "-labels-idx1-ubyte"), "wb").write(struct.pack(">II", 0x801, n) + bytes(ys))
PY
}
idxrun=(--model linear --epochs 1 --no-progress --quiet)
trained() { idx a 1 && idx b 2 && "$herd" train --data a "${idxrun[@]}" --checkpoint ck >/dev/null 2>&1; }
setup() { trained; }
expect resume-other-data 2 "was trained on other data" changes ck/.lock -- train --data b "${idxrun[@]}" --checkpoint ck --resume
setup() { trained; }
expect resume-other-data-named 0 "" changes ck -- train --data b "${idxrun[@]}" --checkpoint ck --resume --other-data
setup() { trained; }
expect eval-other-data 2 "was trained on other data" -- eval --checkpoint ck --data b
setup() { trained; }
expect eval-same-data 0 "" -- eval --checkpoint ck --data a
setup() { trained; }
expect resume-other-lr 1 "was written with --lr 0.05; this run has --lr 0.1" changes ck/.lock -- train --data a "${idxrun[@]}" --checkpoint ck --resume --lr 0.1
setup() { trained; }
expect resume-other-precision 1 "--precision fp32; this run has --precision bf16" changes ck/.lock -- train --data a "${idxrun[@]}" --checkpoint ck --resume --precision bf16
setup() { trained; }
expect resume-other-batch 1 "--batch 64; this run has --batch 32" changes ck/.lock -- train --data a "${idxrun[@]}" --checkpoint ck --resume --batch 32
setup() { trained; }
expect resume-other-schedule 1 "--schedule cosine; this run has --schedule const" changes ck/.lock -- train --data a "${idxrun[@]}" --checkpoint ck --resume --schedule const
setup() { trained; }
expect checkpoint-no-resume 2 "already holds checkpoints" -- train --data a "${idxrun[@]}" --checkpoint ck
setup() { trained; }
expect checkpoint-no-resume-dry 2 "already holds checkpoints" -- train --data a "${idxrun[@]}" --checkpoint ck --dry-run
expect other-data-alone 2 "--other-data applies to --resume" -- train --other-data --dry-run

# ---- output that fails is a failure --------------------------------------
stdout=/dev/full
expect help-to-full 1 "cannot write" -- --help
stdout=/dev/full
expect train-help-to-full 1 "cannot write" -- train --help
stdout=/dev/full
expect algos-to-full 1 "cannot write" -- algos
stdout=/dev/full
expect json-to-full 1 "cannot write" -- train "${tiny[@]}" --json --quiet
expect version 0 "" -- version

# ---- hangs: every wait ends ---------------------------------------------
case_timeout=20
setup() { mkfifo in.fifo; }
expect config-fifo 2 "not a regular file" -- train --config in.fifo --dry-run
# every file a user names for herd to read is opened without waiting on a
# FIFO's writer (core/inpath.h): a model description, a platform file
setup() { mkfifo net.model; }
expect model-fifo-dry-run 2 "model description net.model: is a FIFO, not a file" -- train --model net.model --dry-run
setup() { mkfifo net.model; }
expect model-fifo-run 2 "model description net.model: is a FIFO, not a file" -- train --data "$data" --model net.model --epochs 1 --no-progress
setup() { mkfifo net.model; }
expect model-fifo-show 1 "model description net.model: is a FIFO, not a file" -- model net.model
setup() { mkdir net.model; }
expect model-directory 2 "model description net.model: is a directory, not a file" -- train --model net.model --dry-run
setup() { mkfifo cluster.xml; }
expect platform-fifo 2 "--platform cluster.xml: is a FIFO, not a file" -- sim --workers 2 --platform cluster.xml --dry-run -- train
case_timeout=30

# ---- runs that learn nothing are named -----------------------------------
check='grep -q "\"status\":\"not_learning\"" "$out"'
expect not-learning-status 0 "not learning" -- train "${tiny[@]}" --lr 1e-7 --json --quiet
expect not-learning-stops 1 "not learning" -- train "${tiny[@]}" --lr 1e-7 --stop-on-divergence --quiet
expect nonfinite-stops 1 "non-finite" -- train "${tiny[@]}" --inject-nan 0@2 --quiet

# ---- compare: a label is what ran ------------------------------------------
expect compare-spec-and-extra 2 "--batch is given twice ('32', then '16')" -- compare --workers 2 --epochs 1 --model linear --data "$data" --extra "--batch 16" "allreduce --batch 32"
# an earlier run's log and curve in --out are emptied for the new run, a
# link to its target: never unlinked (which replaced the link)
setup() { mkdir c && ln -s ../kept.jsonl c/run00.jsonl && printf 'old\n' >kept.jsonl; }
check='[ -L c/run00.jsonl ] && ! grep -q old kept.jsonl && grep -q "\"event\":\"end\"" kept.jsonl'
expect compare-log-link-kept 0 "" changes c kept.jsonl -- compare --workers 2 --epochs 1 --model linear --data "$data" --extra "--train-limit 256 --test-limit 64" --no-baseline --out c allreduce
# a spec's own --model wins over compare's --model: its row and its
# configuration in compare.json name the model the run built, from its summary
check='grep -q "^\"allreduce --model mlp\",.*,\"mlp\"," c/compare.csv && grep -q "\"spec\":\"allreduce --model mlp\",.*\"model\":\"mlp\"}" c/compare.json'
expect compare-row-names-its-model 0 "" changes c -- compare --workers 2 --epochs 1 --model linear --data "$data" --extra "--train-limit 256 --test-limit 64" --no-baseline --out c "allreduce --model mlp"
expect compare-spec-refused 2 "spec 'allreduce --bogus' is refused" -- compare --workers 2 --epochs 1 --model linear --data "$data" "allreduce --bogus"

# ---- data in other formats: a malformed file is named, exit 1 -------------
# npy FILE HEADER BODY: a version 1.0 .npy file of that header dict and
# body (printf escapes). npyset HEADER BODY: a directory np/ of the four
# files of a data set, both image files of that header and body, both
# label files one label 0
npy() { printf "\\x93NUMPY\\x01\\x00\\x$(printf %02x $((${#2} + 1)))\\x00%s\\n$3" "$2" >"$1"; }
npyset() {
    mkdir np && npy np/train_images.npy "$1" "$2" && npy np/test_images.npy "$1" "$2" &&
        npy np/train_labels.npy "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }" '\0' &&
        cp np/train_labels.npy np/test_labels.npy
}
npyrun=(--model linear --epochs 1 --no-progress)
setup() { mkdir np && : >np/train_images.npy; }
expect npy-lacks-files 1 "np: has 1 of the 4 .npy files" -- train --data np "${npyrun[@]}"
setup() { mkdir np && printf '\x93NUMPY\x01\x00\xff\x00{' >np/train_images.npy && touch np/{train_labels,test_images,test_labels}.npy; }
expect npy-header-cut 1 "np/train_images.npy: .npy header of 255 bytes but the file holds 1" -- train --data np "${npyrun[@]}"
setup() { npyset "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }" '\0\0\0\0\0\0\0\0'; }
expect npy-fortran 1 "np/train_images.npy: a Fortran-ordered array" -- train --data np "${npyrun[@]}"
setup() { npyset "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000, 1000000000), }" ''; }
expect npy-shape-huge 1 "np/train_images.npy: .npy header's shape needs more than the 0 bytes" -- train --data np "${npyrun[@]}"
setup() { npyset "{'descr': 'O', 'fortran_order': False, 'shape': (1, 2), }" ''; }
expect npy-object-dtype 1 "np/train_images.npy: .npy dtype 'O' is not one herd reads" -- train --data np "${npyrun[@]}"
setup() { npyset "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }" '\0\0\0\0\0\0\xc0\x7f'; }
expect npy-nan-pixel 1 "np/train_images.npy: image 0 holds a non-finite value" -- train --data np "${npyrun[@]}"
# pics CLASSES: a folder pics/ of train/ and test/ holding each class's one
# 2x2 gray PNG (python3's zlib writes it)
pics() {
    python3 - "$@" <<'PY'
import os, struct, sys, zlib
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)) +
       chunk(b"IDAT", zlib.compress(b"\0\1\2\0\3\4")) + chunk(b"IEND", b""))
for part in ("train", "test"):
    for c in sys.argv[1:]:
        os.makedirs(f"pics/{part}/{c}", exist_ok=True)
        open(f"pics/{part}/{c}/a.png", "wb").write(png)
PY
}
setup() { pics cat dog && rm -r pics/test; }
expect images-no-test 1 "pics: has train/ but not test/" -- train --data pics "${npyrun[@]}"
setup() { pics cat dog && printf 'not a picture' >pics/train/dog/b.png; }
expect images-not-an-image 1 "pics/train/dog/b.png: not a PNG or JPEG file" -- train --data pics "${npyrun[@]}"
setup() { pics cat dog && head -c 40 pics/train/cat/a.png >pics/train/cat/b.png; }
expect images-cut-short 1 "pics/train/cat/b.png: corrupt PNG" -- train --data pics "${npyrun[@]}"
setup() { pics cat dog && printf '\xff\xd8\xff\xe0\0\x10JFIF' >pics/test/dog/c.jpeg; }
expect images-jpeg-cut 1 "pics/test/dog/c.jpeg: corrupt JPEG" -- train --data pics "${npyrun[@]}"
setup() { pics cat dog && mkdir pics/test/cow && cp pics/test/dog/a.png pics/test/cow/; }
expect images-unknown-class 1 "class 'cow' is not one of" -- train --data pics "${npyrun[@]}"
setup() { pics cat dog; }
expect images-trains 0 "" -- train --data pics --model linear --epochs 1 --batch 1 --no-progress
# a model too big for the pictures read: a usage error, as on synthetic data
lenet_2x2="models/lenet.model:7 (conv 16 k=5): a 5x5 convolution (stride 1, pad 0) does not fit its 6x1x1 input"
setup() { pics cat dog; }
expect images-model-does-not-fit 2 "$lenet_2x2" -- train --data pics --model lenet --epochs 1 --no-progress
setup() { pics cat dog; }
expect images-model-summary 1 "$lenet_2x2" -- model lenet --data pics
