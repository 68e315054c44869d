# Sourced by bench scripts that run PyTorch: picks the OpenBLAS kernel set
# PyTorch's matmuls run fastest with on this CPU, by measurement. OpenBLAS's
# own CPU detection misdetects some CPUs (an Intel Xeon reporting avx512f
# got `Prescott`, SSE3: 27 GFLOP/s at sgemm 1024 against SkylakeX's 143),
# and an OPENBLAS_CORETYPE preset in the environment can be just as wrong.
#
# blas_pick PYTHON TORCH_TRAIN_PY [PIN...]
#   Times sgemm 1024 through PyTorch (best of 2) under OpenBLAS's detection
#   (`auto`) and each of CORETYPES (default: SkylakeX Cooperlake Haswell Zen
#   Sandybridge and the preset, if any), exports OPENBLAS_CORETYPE as the
#   fastest (unset for `auto`) and sets:
#     BLAS_CORE       the kernel set OpenBLAS reports it ran
#     BLAS_PROBES     every probe, "NAME=GFLOP/s(kernel set)"
#     BLAS_PRESET     OPENBLAS_CORETYPE as it was in the environment
#     BLAS_SUMMARY    one line saying all of it, for a report's header
#   CORETYPES with one name fixes the setting without probing. PIN is a
#   command prefix (taskset) the probes run under.
# Needs OPENBLAS_NUM_THREADS etc. set by the caller (one thread, usually).

BLAS_PRESET=${BLAS_PRESET-${OPENBLAS_CORETYPE:-}}
unset OPENBLAS_CORETYPE

blas__gemm() { # PYTHON PY CORETYPE PIN... -> "GFLOP/s kernel-set", or "nan -"
    local py=$1 script=$2 ct=$3 j
    shift 3
    if j=$( ([[ $ct == auto ]] || export OPENBLAS_CORETYPE=$ct
             "$@" "$py" "$script" --gemm 1024 --reps 5 2>/dev/null) | tail -n1) && [[ -n $j ]]; then
        "$py" -c 'import json,sys; r = json.loads(sys.argv[1]); print(r["gflops"], r["blas_core"])' "$j" 2>/dev/null ||
            echo "nan -"
    else
        echo "nan -"
    fi
}

blas_pick() {
    local py=$1 script=$2 ct g1 g2 g core best=auto best_gf=0
    shift 2
    local -a cands
    local -A seen=()
    read -ra cands <<<"${CORETYPES:-auto SkylakeX Cooperlake Haswell Zen Sandybridge ${BLAS_PRESET}}"
    best=${cands[0]}
    BLAS_PROBES=""
    if ((${#cands[@]} > 1)); then
        for ct in "${cands[@]}"; do
            [[ -n ${seen[$ct]:-} ]] && continue
            seen[$ct]=1
            read -r g1 core < <(blas__gemm "$py" "$script" "$ct" "$@" 2>/dev/null)
            read -r g2 _ < <(blas__gemm "$py" "$script" "$ct" "$@" 2>/dev/null)
            g=$(printf '%s\n' "$g1" "$g2" | sort -g | tail -n1)
            BLAS_PROBES+="${BLAS_PROBES:+ }$ct=${g}($core)"
            # a kernel set this CPU cannot run (Illegal instruction) gives nan,
            # which mawk's comparisons would let through
            [[ $g == nan ]] && continue
            if awk -v g="$g" -v b="$best_gf" 'BEGIN { exit !(g > b) }'; then best=$ct best_gf=$g; fi
        done
    fi
    if [[ $best == auto ]]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$best; fi
    BLAS_CORE=$(blas__gemm "$py" "$script" "$best" "$@" | awk '{ print $2 }')
    # Without OpenBLAS (Debian's python3-torch alone falls back to the
    # reference BLAS, ~5 GFLOP/s) no comparison with PyTorch is fair.
    if [[ $BLAS_CORE == unknown || $BLAS_CORE == - ]] && [[ -z ${BLAS_ALLOW_REFERENCE:-} ]]; then
        echo "bench: PyTorch runs without OpenBLAS here (sgemm ${best_gf:-?} GFLOP/s, kernel set $BLAS_CORE): apt-get install libopenblas0-pthread (BLAS_ALLOW_REFERENCE=1 runs anyway)" >&2
        return 1
    fi
    BLAS_SUMMARY="PyTorch's OpenBLAS: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset (its own detection)}, kernel set $BLAS_CORE${BLAS_PROBES:+; sgemm GFLOP/s measured: $BLAS_PROBES}${BLAS_PRESET:+; preset in the environment: $BLAS_PRESET}"
}
