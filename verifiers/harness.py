"""The program that runs inside the sandbox (stdlib only; passed to ``python -I -S -c``, never imported by the host).

Protocol (one JSON object per line; the host in ``verifiers.sandbox_protocol`` drives it and checks every reply):
- The host sends ``{"code", "entry_point", "limits"}``; the harness sets the limits on itself and says
  ``{"event": "hello"}`` (or ``limits_error`` and exits), then loads the program: ``ready``, or ``syntax_error`` /
  ``load_error`` and exits.
- Then, one at a time, ``{"nonce", "args"}`` gets exactly one ``{"nonce", "value"}`` or ``{"nonce", "error"}``;
  ``{"nonce", "finish": true}`` gets ``finished``. Expected outputs never come in.
- The candidate's stdout and stderr go to ``output.txt`` (fd 3); a reply counts only when it answers the one
  outstanding request with its nonce. An error is always ``{"type", "errno", "message"}`` (``describe``).
The full protocol and why: verifiers/README.md.
"""

import json
import os
import resource
import sys

RESERVE = [bytearray(8 << 20)]  # freed when the candidate runs out of memory, so the reply can still be written
LIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
          "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}


def describe(err):
    """{type: str, errno: int | None, message: str}, the one shape the host accepts. The exception is the
    candidate's object: its errno can be anything, its __str__ can raise; neither may change the shape."""
    if isinstance(err, MemoryError):
        RESERVE.clear()
    err.__traceback__ = None  # frees the candidate's frames (a memory bomb's data) before anything is allocated
    try:
        number = getattr(err, "errno", None)
    except BaseException:  # a property that raises
        number = None
    try:
        message = str.__str__(str(err))[:300]  # an exact str, whatever subclass __str__ returned
    except BaseException:
        message = "(the exception's message could not be read)"
    if type(number) is not int or not -(1 << 31) <= number < 1 << 31:  # real errnos are small C ints
        number = None
    return {"type": str.__str__(type(err).__name__), "errno": number, "message": message}


def main():
    output = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # fd 3
    null = os.open("/dev/null", os.O_RDONLY)
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(null)
    pid, dumps, loads, write, getpid, exit_now = os.getpid(), json.dumps, json.loads, os.write, os.getpid, os._exit

    def send(text):
        if getpid() != pid:  # a forked copy of the candidate must not speak for it
            exit_now(0)
        data = (text + "\n").encode()
        while data:
            data = data[write(replies, data):]

    def reply(message):
        send(dumps(message, allow_nan=False))

    payload = loads(requests.readline())
    for name, (soft, hard) in payload["limits"].items():  # a user namespace of its own: nproc counts this sandbox
        try:
            resource.setrlimit(LIMITS[name], (soft, hard))
        except (ValueError, OSError) as err:  # above this process's hard limit, which only the host can raise
            reply({"event": "limits_error", "message": f"{name} {soft}/{hard}: {err} (hard limit here: "
                                                       f"{resource.getrlimit(LIMITS[name])[1]})"})
            return
    reply({"event": "hello"})
    try:
        code = compile(payload["code"], "<candidate>", "exec")
    except (SyntaxError, ValueError) as err:
        reply({"event": "syntax_error", "error": describe(err)})
        return
    namespace = {"__name__": "__candidate__"}
    try:
        exec(code, namespace)
    except BaseException as err:  # the candidate's failure is data
        reply({"event": "load_error", "error": describe(err)})
        return
    fn = namespace.get(payload["entry_point"])
    if not callable(fn):
        reply({"event": "load_error", "error": {"type": "NameError", "errno": None,
                                                "message": f"no function named {payload['entry_point']!r}"}})
        return
    reply({"event": "ready"})
    for line in iter(requests.readline, b""):
        request = loads(line)
        nonce = request["nonce"]
        if request.get("finish"):
            reply({"nonce": nonce, "event": "finished"})
            continue  # the host checks for leftover processes now, then kills the sandbox
        try:
            text = dumps({"nonce": nonce, "value": fn(*request["args"])}, allow_nan=False)
        except BaseException as err:
            text = dumps({"nonce": nonce, "error": describe(err)})
        send(text)
    sys.exit(0)


main()
