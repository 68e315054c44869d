#!/usr/bin/env bash
# make test-adversarial: herd used as a careless or hostile user would,
# each case asserting its exit code, its message, and that nothing else
# changed: no file in the case's directory created, changed or removed
# (but the ones the case names), and no process of it left behind.
#
# usage: tests/adversarial/run.sh HERD [CASE-FILTER]
# Each case runs in a fresh directory with a timeout; the summary line is
# `N passed, N failed`. The cases are in tests/adversarial/cases.sh, by
# class.
set -u
herd=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
filter=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(mktemp -d /tmp/herd-adversarial.XXXXXX)
trap 'rm -rf "$root"' EXIT
pass=0 fail=0 n=0
t0=$SECONDS

# The state of directory $1: every path, its type, size, mode, target and
# content digest (a file's), sorted.
snapshot() {
    (cd "$1" && find . -mindepth 1 -printf '%p %y %s %m %l\n' | sort &&
        find . -type f -exec md5sum {} + 2>/dev/null | sort -k2)
}

# Processes whose environment holds this case's marker (herd, and any
# process it started).
leftovers() {
    local p
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = "$$" ] && continue
        { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "HERD_ADVERSARIAL_MARKER=$marker" && echo "${p#/proc/}"
    done
}

# expect NAME RC MESSAGE [changes PATH...] -- ARGS...
#   runs herd ARGS in a fresh directory (prepared by the function `setup`
#   if the case defines one: set it with `setup() { ...; }` before the
#   call, it is cleared after); RC is the exit code wanted, MESSAGE a text
#   stderr must hold ("" for none: stderr then holds no "herd:" line but
#   warnings), `changes` the paths the case may create or change.
expect() {
    local name=$1 want_rc=$2 want_msg=$3
    shift 3
    local allowed=()
    if [ "${1:-}" = changes ]; then
        shift
        while [ "$1" != -- ]; do allowed+=("$1"); shift; done
    fi
    [ "$1" = -- ] && shift
    n=$((n + 1))
    if [ -n "$filter" ] && [[ $name != *"$filter"* ]]; then
        unset -f setup
        check="" stdin="" stdout=""
        return
    fi
    local dir=$root/case$n
    mkdir -p "$dir"
    marker="herd-adversarial-$n-$$"
    (cd "$dir" && if declare -F setup >/dev/null; then setup; fi)
    unset -f setup
    local before after
    before=$(snapshot "$dir")
    (cd "$dir" && HERD_ADVERSARIAL_MARKER=$marker timeout -k 5 "${case_timeout:-30}" \
        "$herd" "$@" >"${stdout:-$root/out}" 2>"$root/err" <"${stdin:-/dev/null}")
    local rc=$?
    sleep 0.05
    after=$(snapshot "$dir")
    local why=""
    [ "$rc" = "$want_rc" ] || why="exit $rc, want $want_rc"
    if [ -n "$want_msg" ] && ! grep -qF -- "$want_msg" "$root/err"; then
        why="${why:+$why; }stderr lacks \"$want_msg\""
    fi
    if [ -z "$want_msg" ] && grep -v 'warning' "$root/err" | grep -q '^herd:'; then
        why="${why:+$why; }unexpected message"
    fi
    # the paths the case may change, then everything else must be the same
    local diff
    diff=$(diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") | grep '^[<>]' | sed 's/^[<>] //')
    for p in "${allowed[@]+"${allowed[@]}"}"; do
        diff=$(printf '%s\n' "$diff" | grep -v -- "^\./$p\( \|/\|$\)\|  \./$p$\|  \./$p/" || true)
    done
    [ -z "$diff" ] || why="${why:+$why; }files changed: $(printf '%s' "$diff" | head -3 | tr '\n' '|')"
    local left
    left=$(leftovers)
    if [ -n "$left" ]; then
        why="${why:+$why; }processes left: $left"
        kill -9 $left 2>/dev/null
    fi
    if [ -z "$why" ] && [ -n "${check:-}" ] && ! (cd "$dir" && out=$root/out && eval "$check") >"$root/check" 2>&1; then
        why="check failed: $check: $(head -c 300 "$root/check")"
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
        echo "ok    $name"
    else
        fail=$((fail + 1))
        echo "FAIL  $name: $why"
        echo "      herd $*"
        sed 's/^/      | /' "$root/err" | head -5
    fi
    check="" stdin="" stdout=""
}

data=synthetic:1x8x8:4
tiny=(--data "$data" --model linear --epochs 1 --train-limit 256 --test-limit 64 --no-progress)
# shellcheck source=tests/adversarial/cases.sh
. "$here/cases.sh"

echo "# $n cases in $((SECONDS - t0)) s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
