"""The program that runs inside the sandbox (stdlib only; passed to ``python -I -S -c``, never imported by the host).

Protocol: stdin holds ``{"code", "entry_point", "inputs"}``; fd 1 becomes the result channel and gets one JSON
line per event: ``syntax_error``, ``load_error``, ``test`` (``i`` plus ``value`` or ``error``), ``leftover``
(processes still alive after the tests) and ``done``. The candidate's own stdout and stderr go to a size-limited
file in the sandbox's temporary directory. Expected outputs never come in: the host compares.
"""

import copy
import json
import os
import sys

RESERVE = [bytearray(8 << 20)]  # freed when the candidate runs out of memory, so the report can still be written


def describe(err):
    if isinstance(err, MemoryError):
        RESERVE.clear()
    err.__traceback__ = None  # frees the candidate's frames (a memory bomb's data) before anything is allocated
    return {"type": type(err).__name__, "errno": getattr(err, "errno", None), "message": str(err)[:300]}


def main():
    payload = json.loads(sys.stdin.buffer.read())
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open("/dev/null", os.O_RDONLY)
    output = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    pid, dumps, write, flush, getpid, exit_now = os.getpid(), json.dumps, channel.write, channel.flush, os.getpid, os._exit

    def emit(event):
        if getpid() != pid:  # a forked copy of the candidate must not speak for it
            exit_now(0)
        write(dumps(event, allow_nan=False) + "\n")
        flush()

    try:
        code = compile(payload["code"], "<candidate>", "exec")
    except (SyntaxError, ValueError) as err:
        emit({"event": "syntax_error", "error": describe(err)})
        return
    namespace = {"__name__": "__candidate__"}
    try:
        exec(code, namespace)
    except BaseException as err:  # the candidate's failure is data
        emit({"event": "load_error", "error": describe(err)})
        return
    fn = namespace.get(payload["entry_point"])
    if not callable(fn):
        emit({"event": "load_error", "error": {"type": "NameError", "errno": None,
                                               "message": f"no function named {payload['entry_point']!r}"}})
        return
    for i, args in enumerate(payload["inputs"]):
        try:
            value = fn(*copy.deepcopy(args))
            dumps(value, allow_nan=False)
        except BaseException as err:
            emit({"event": "test", "i": i, "error": describe(err)})
            if isinstance(err, MemoryError):
                break  # the process's memory is spent: the remaining tests count as failed
            continue
        emit({"event": "test", "i": i, "value": value})
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap finished children; live ones count below
            pass
    except ChildProcessError:
        pass
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, pid)]
    if others:
        emit({"event": "leftover", "count": len(others)})
    emit({"event": "done"})


main()
