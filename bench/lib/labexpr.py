"""bench/lib/labexpr.py: the expressions of bench/lab's specs.

Specs are the project's own files; their expressions (measures, columns,
verdicts, {expr} in commands) are Python evaluated with the names a spec
gives them and the helpers below: arithmetic, aggregates and reads of what
a run left in its scratch directory, nothing else of the machine.
"""

import glob
import json
import math
import os
import statistics

# What an expression may call: arithmetic and aggregates, nothing that
# reaches the machine.
SAFE = {
    "abs": abs, "all": all, "any": any, "len": len, "max": max, "min": min,
    "round": round, "sum": sum, "sorted": sorted, "int": int, "float": float,
    "str": str, "repr": repr, "median": statistics.median, "sqrt": math.sqrt, "log": math.log, "exp": math.exp,
    "isfinite": math.isfinite, "mean": statistics.mean, "True": True, "False": False, "None": None,
    "isnan": math.isnan, "nan": math.nan, "inf": math.inf, "bool": bool, "dict": dict, "list": list,
    "set": set, "tuple": tuple, "range": range, "enumerate": enumerate, "zip": zip, "next": next,
    "map": map, "filter": filter, "getattr": getattr, "hasattr": hasattr, "isinstance": isinstance,
}


class LabError(Exception):
    pass


def last_cpus(n=1):
    """The last n CPUs this process may run on, as taskset lists them ('' if fewer)."""
    c = sorted(os.sched_getaffinity(0))
    return ",".join(map(str, c[-n:])) if len(c) >= n else ""


def jsonl(path):
    """The records of a JSON Lines file (a run's --log {tmp}/log.jsonl)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_has(flag):
    """Whether the CPU lists this flag in /proc/cpuinfo (avx512_bf16)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False


def json_file(path):
    with open(path) as f:
        return json.load(f)


def text(path):
    with open(path) as f:
        return f.read()


def files(pattern):
    """The paths that match pattern, sorted (every rank's log: tmp + '/log.jsonl*')."""
    return sorted(glob.glob(pattern))


def fail(why):
    raise LabError(why)


def spread(xs):
    """max - min, the scripts' spread over seeds (0 for one value)."""
    xs = list(xs)
    return max(xs) - min(xs) if xs else math.nan


def stdev(xs):
    """The sample standard deviation, 0 for one value."""
    xs = list(xs)
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


SAFE.update(jsonl=jsonl, json_file=json_file, text=text, files=files, fail=fail, spread=spread, stdev=stdev,
            cpu_has=cpu_has, last_cpus=last_cpus)


def ev(expr, names, what):
    try:
        # the names as globals, so that comprehensions and lambdas see them too
        # in parentheses, so that an expression may run over several lines of a TOML string
        return eval("(" + expr + "\n)", dict(names, __builtins__=SAFE))  # noqa: S307 (specs are the project's own files)
    except Exception as e:  # a spec's mistake: name it
        raise LabError(f"{what}: {expr!r}: {type(e).__name__}: {e}") from None


def subst(template, names, what):
    """{expr} -> its value; {{ and }} are literal braces."""
    out, i = [], 0
    while i < len(template):
        c = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            out.append(c)
            i += 2
        elif c == "{":
            j = template.find("}", i)
            if j < 0:
                raise LabError(f"{what}: unclosed '{{' in {template!r}")
            v = ev(template[i + 1:j], names, what)
            out.append(("%g" % v) if isinstance(v, float) else str(v))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Obj:
    """Attribute access to a dict (a row's run medians: base.ms)."""

    def __init__(self, d):
        self.__dict__.update(d)

    def __repr__(self):
        return repr(self.__dict__)


def names_in_order(table, names, what, tolerant=False):
    """A spec's [define] or [derive]: each entry an expression over names and
    the entries before it; with tolerant, one that fails is left out (a
    later stage's value, not measured yet). Returns (values, errors)."""
    out, errors = {}, []
    for k, expr in table.items():
        try:
            out[k] = ev(expr, {**names, **out}, f"{what} {k}")
        except LabError as e:
            if not tolerant:
                raise
            errors.append(str(e))
    return out, errors
