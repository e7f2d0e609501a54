"""A log read by its structure, as an engineer reads it: the final exception, the crashing frame,
and what the engine was doing when it failed. Written once; the vocabulary lives in the rules.

- ``final_exception``: the last ``Type: message`` line of a Python traceback (any log prefix before
  it: ``(EngineCore pid=1) ERROR ... [core.py:1] ``, ``[rank0]: ``), or the last C++ ``what():``.
- ``crash_frame``: the innermost frame of a crash dump: the first ``File ... in f`` after Python's
  ``Current thread ... (most recent call first)``, the ``PC: @ ... f`` of an abseil/glog dump, the
  ``#0 ...`` of gdb, or the ``0# ...`` of a boost stack trace.
- ``exception_frames``: the final exception with the frames of its (last) traceback, each as a dotted
  module (the file below ``site-packages``) and a function; the program's own outermost ``<module>``
  frame is left out, so a later ``<module>`` frame is an import.
- ``oldest_first``: the log in the order it was written. A log viewer's export lists the newest entry
  first (Google Cloud Logging, Datadog, Loki's default); read so, the consequence (a shell's "Killed")
  precedes its cause and a traceback reads upside down. Told by the lines' own timestamps.
- ``phase``: the last phase marker (``[phases]`` in ``_common.toml``) at or before a line: loading
  the model, compiling kernels, capturing CUDA graphs, allocating the KV cache, ...
"""

from __future__ import annotations

import re

_TAIL = 256 * 1024  # structure is read in the last 256 KiB: the end of a log is where it died
_EXC = re.compile(
    r"(?:^|[\s:\]\)>|])((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception|[a-z_]+\.error))"
    r"(?::\s+(\S.*)|\s*$)"
)
_WHAT = re.compile(r"^\s*what\(\):\s+(\S.*)")
_NOT_EXC_LINE = re.compile(r'File "[^"]*", line \d+|^\s*raise\b|^\s*(?:\S+\s+)?During handling|most recent call')
_CRASH_HEAD = re.compile(
    r"Current thread 0x[0-9a-f]+ \(most recent call first\)|\*\*\* SIG\w+ received|received signal SIG\w+"
    r"|Signal \(\d+\) received|Caught signal \d+"
)
_FRAME = re.compile(r'^\s*(?:\S+\s+)?(?:File "[^"]+", line \d+ in \S+|PC: @\s+\S+\s+.*\S|#\d+\s+\S.*|\d+# \S.*)')


# a timestamp at the head of a line (after a level word or a bracket): an ISO date, vLLM's "MM-DD", glog's
# "E0407", then the time; the first one on the line is the logger's. A time without a date is not taken:
# a countdown ("ETA 00:00:09") goes back in time in a log written oldest first
_STAMP = re.compile(
    r"^\W{0,4}(?:[A-Z]{1,8}\W{1,3})?\[?(?:(\d{4})-(\d\d)-(\d\d)[T ]|(\d\d)-(\d\d) |[IWEF](\d\d)(\d\d) )"
    r"(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
)
_MIN_STAMPS = 6  # timestamped lines needed before an order is read from them


def _stamp(line: str) -> tuple | None:
    m = _STAMP.search(line)
    if m is None:
        return None
    g = m.groups()
    year, month, day = g[0] or "", g[1] or g[3] or g[5] or "", g[2] or g[4] or g[6] or ""
    return (year, month, day, g[7], g[8], g[9], (g[10] or "").ljust(9, "0"))


def oldest_first(text: str) -> tuple[str, int] | None:
    """(the log with its lines in reverse order, its line count) when it was listed newest first, else
    None. Newest first: at least ``_MIN_STAMPS`` timestamped lines, their consecutive stamps go back in
    time at least five times and forward at most once per ten steps back (a log written oldest first
    goes back only where processes interleave)."""
    lines = text.split("\n")
    stamps = [st for st in map(_stamp, lines) if st is not None]
    if len(stamps) < _MIN_STAMPS:
        return None
    back = sum(1 for a, b in zip(stamps, stamps[1:]) if b < a)
    forward = sum(1 for a, b in zip(stamps, stamps[1:]) if b > a)
    if back < 5 or forward * 10 > back:
        return None
    return "\n".join(reversed(lines)), len(lines)


def _tail(text: str) -> tuple[int, list[str]]:
    """(line number of the first line, lines) of the log's last ``_TAIL`` characters."""
    cut = max(0, len(text) - _TAIL)
    if cut:
        cut = text.find("\n", cut) + 1 or cut
    return text.count("\n", 0, cut) + 1, text[cut:].split("\n")


def final_exception(text: str) -> tuple[int, str, str] | None:
    """(line number, exception type, the full line) of the last raised exception, or None.

    A C++ ``what():`` line counts as an exception of type ``what``."""
    first, lines = _tail(text)
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if _NOT_EXC_LINE.search(line):
            continue
        m = _WHAT.search(line)
        if m:
            return first + i, "what", line
        m = _EXC.search(line)
        if m and (m.group(2) or line.strip().endswith(m.group(1))):
            return first + i, m.group(1).rsplit(".", 1)[-1], line
    return None


def crash_frame(text: str) -> tuple[int, str] | None:
    """(line number, line) of the innermost frame after the last crash marker, or None."""
    first, lines = _tail(text)
    head = max((i for i, line in enumerate(lines) if _CRASH_HEAD.search(line)), default=None)
    if head is None:
        return None
    for i in range(head, min(len(lines), head + 12)):
        if i == head and "PC: @" not in lines[i]:
            continue
        if _FRAME.search(lines[i]):
            return first + i, lines[i]
    return None


def phase(text: str, upto: int, phases: tuple) -> str | None:
    """The name of the last phase announced in the ``_TAIL`` characters before ``upto``, or None.

    Read backwards line by line: the nearest announcing line decides, so a long serving log costs
    one line."""
    window = text[max(0, upto - _TAIL):upto]
    for line in reversed(window.split("\n")):
        for name, rx in phases:
            if rx is not None and rx.search(line):
                return name
    return None


# An assertion's expression is code: its words ("tensor", "memory", "cache") are no cause's
# vocabulary. The forms (each a regex whose group "x" is the expression): a C macro that printed
# ``GGML_ASSERT(expr) failed`` (also when the line was cut inside it, after the ``file:line:`` that
# ggml prints first; its older form ``GGML_ASSERT: file:line: expr``), glibc's ``Assertion `expr'
# failed``, glog/abseil ``Check failed: expr (a vs. b)`` and torch's ``expr INTERNAL ASSERT FAILED at``. A string literal inside the expression is a message
# (``assert(false && "computeCapability not supported")``) and stays.
_ASSERT_FORMS = (
    re.compile(r"\b[A-Z][A-Z0-9_]*(?:ASSERT|CHECK)\w*\((?P<x>.*)\)\s*failed"),
    re.compile(r":\d+: [A-Z][A-Z0-9_]*(?:ASSERT|CHECK)\w*\((?P<x>(?!.*\)\s*failed).*)$"),
    # the older ggml form "GGML_ASSERT: file.c:12: expr"
    re.compile(r"\b[A-Z][A-Z0-9_]*ASSERT: \S+:\d+: (?P<x>.*)$"),
    re.compile(r"Assertion `(?P<x>.*?)'\s*failed"),
    # glog's "Check failed: a == b (1 vs. 2) message", TVM's "Check failed: (a == b) is false: message":
    # the expression is a parenthesized one or a chain of operands and operators, the message stays
    re.compile(r"Check failed: (?P<x>\(.*?\)(?= is false)|[^\s(]+(?: (?:==|!=|<=|>=|<|>|&&|\|\|) [^\s(]+)*)"),
    re.compile(r"(?:^|: )(?P<x>[^:]*?) INTERNAL ASSERT FAILED\b"),
)
_ASSERT_WORDS = ("ASSERT", "Assertion `", "Check failed")
_LITERAL = re.compile(r'"[^"]*"')


def mask_assertions(line: str) -> str:
    """``line`` with the code of every assertion expression on it blanked (same length, so offsets
    keep); string literals inside an expression stay. A line without an assertion is returned as is."""
    if not any(w in line for w in _ASSERT_WORDS):
        return line
    out = list(line)
    for rx in _ASSERT_FORMS:
        for m in rx.finditer(line):
            a, b = m.span("x")
            keep = [k.span() for k in _LITERAL.finditer(line, a, b)]
            for i in range(a, b):
                if not any(k0 <= i < k1 for k0, k1 in keep):
                    out[i] = " "
    return "".join(out)


# The final exception's frames: ``File "path", line N, in function`` (any log prefix before it).
_PYFRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)')
_TB_START = re.compile(r"Traceback \(most recent call last\)|During handling of the above exception"
                       r"|The above exception was the direct cause")
_FRAMES_BACK = 300  # lines searched back from the final exception for its traceback
# pybind11's rendering of a Python exception raised through C++ (error_already_set::what(): the message, a blank
# line, "At:", then one "  path(line): function" per frame, innermost first), as LM Studio's MLX engine logs it
_AT_HEAD = re.compile(r"^\s*At:\s*$")
_AT_FRAME = re.compile(r"^\s+(?P<path>\S.*?\.py)\(\d+\): (?P<func>[\w<>.]+)\s*$")
_PKG_ROOT = re.compile(r".*[/\\](?:site|dist)-packages[/\\]")
_ENTRY = ("runpy",)  # the interpreter's own entry frames (python -m): part of the program, not what it did


def module_of(path: str) -> str:
    """A frame's file as a dotted module: ``.../site-packages/vllm/config/model.py`` ->
    ``vllm.config.model``; a source checkout keeps its whole path (``sgl-workspace.sglang.python.sglang...``);
    ``<frozen importlib._bootstrap>`` -> ``importlib._bootstrap``."""
    if path.startswith("<frozen ") and path.endswith(">"):
        return path[8:-1]
    p = _PKG_ROOT.sub("", path)
    p = re.sub(r"\.pyc?$", "", p).replace("\\", "/").strip("/")
    return ".".join(x for x in p.split("/") if x and x != "__init__")


def exception_frames(text: str) -> tuple[tuple[int, str, str], list[tuple[int, str, str, str]]] | None:
    """The final exception and the frames of its traceback, innermost last, or None when the final
    exception has no frame (a bare error line). Frames are read above it (Python's traceback) or, failing
    that, in pybind11's ``At:`` list just below it. ``((line number, type, line), [(line number,
    module, function, line), ...])``. Only the last traceback counts: the frames stop at the
    ``Traceback`` header or a chained exception's separator above the exception. The outermost
    ``<module>`` frame (and runpy's before it) is the program that ran, so it is left out: a later
    ``<module>`` frame is a module being imported."""
    exc = final_exception(text)
    if exc is None:
        return None
    first, lines = _tail(text)
    at = exc[0] - first
    frames: list[tuple[int, str, str, str]] = []
    for i in range(at - 1, max(-1, at - 1 - _FRAMES_BACK), -1):
        line = lines[i]
        if _TB_START.search(line):
            break
        m = _PYFRAME.search(line)
        if m:
            frames.append((first + i, module_of(m.group("path")), m.group("func"), line))
    frames.reverse()
    if not frames:
        frames = _frames_below(lines, at, first)
    while frames and frames[0][1].rsplit(".", 1)[-1] in _ENTRY:
        frames.pop(0)
    if frames and frames[0][2] == "<module>":
        frames.pop(0)
    if not frames:
        return None
    return exc, frames


def _frames_below(lines: list[str], at: int, first: int) -> list[tuple[int, str, str, str]]:
    """pybind11's ``At:`` frames within 3 lines below the exception at index ``at``, outermost first."""
    for i in range(at + 1, min(len(lines), at + 4)):
        if _AT_HEAD.search(lines[i]):
            out = []
            for j in range(i + 1, len(lines)):
                m = _AT_FRAME.search(lines[j])
                if not m:
                    break
                out.append((first + j, module_of(m.group("path")), m.group("func"), lines[j]))
            return out[::-1]
        if lines[i].strip():
            return []
    return []
