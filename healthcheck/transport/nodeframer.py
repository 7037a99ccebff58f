"""The framed per-host script's node side in Python: one interpreter runs every command.

``build_script`` (script.py) sends this file's source to the node inside the sh script, a quoted
here-document with one call appended (``main(<plan>)``), and runs it with the node's system
interpreter (``/usr/bin/python3``, else ``/usr/libexec/platform-python``; ``-I -S``). It prints
exactly the stream the sh framer prints (same headers, lengths, NOTRUN lines, exit codes), so
``FrameReader`` cannot tell which one ran. What it saves the node is the sh framer's helper
processes per command (a subshell, ``timeout`` and its fork, ``head``), ``mktemp`` and ``rm``:
here a command costs its own ``posix_spawn`` (vfork) and exec, the timer is this process's
``poll`` on a SIGCHLD wake-up pipe, and the output is read back with ``pread``.

Kept from the sh framer, each tested on both (tests/unit/test_script.py):

- stdout and stderr go to two anonymous files (``memfd_create``), never to the session's pipe; a
  descendant that outlives the command keeps its own reference to them, not the host's session.
  RLIMIT_FSIZE caps them in the command (SIGXFSZ stays ignored, so the tool sees EFBIG), and a
  section announces exactly the bytes read back: a writer still appending cannot break the frame;
- the per-command timeout acts on the command's own process group: SIGTERM, then SIGKILL ``kill``
  seconds later, exit codes 124 and 137 as with GNU ``timeout -k``; a tool that hung is not
  started again on this node (a NOTRUN line);
- a missing tool is rc 127 (126 when it cannot be executed) with the reason on stderr;
- SIGHUP/SIGINT/SIGTERM end the script with 129/130/143, a closed session with 141, after a
  SIGTERM to the running command's group. Unlike the sh framer (which notices a closed session
  only when it next prints), it watches its output while a command runs: a sweep that gave up on
  the host, or a dropped connection, stops the node's command at once, not at its timeout.

Exit codes tell the sh script what happened (``_PY_TRY`` in script.py): 98 when nothing was started
(no ``posix_spawnp``/``memfd_create`` before Python 3.8, a module missing, memfds refused by the
kernel or a seccomp policy), and the sh framer then runs every command; 97 when this code failed
after starting (its sections so far stand). Written for the node's Python: no ``from __future__``,
no walrus; annotations are strings, never evaluated there; ``posix`` and ``_signal`` instead of
``os`` and ``signal``, whose imports cost the node more than any command's framing.
"""

import errno
import posix
import select
import sys
import time

try:
    import _signal as signal
    import resource
except ImportError:  # pragma: no cover - every CPython 3 on Linux has both
    resource = None

TIMEOUT_RCS = (124, 137)  # as GNU timeout: after SIGTERM, after the -k SIGKILL (script.py reads it from here)
NOT_STARTED = 98  # nothing was run: the sh framer runs every command
FAILED = 97  # this code failed after the first command started: what was printed stands
KILL_WAIT_S = 1.0  # after SIGKILL, how long to wait for the command before going on (D state)
_CLOSED_SESSION = 141  # as the sh framer's PIPE trap


class Stop(Exception):
    """A signal asked the script to end with ``code``."""

    def __init__(self, code: "int") -> None:
        super().__init__(code)
        self.code = code


def main(plan: "dict") -> None:
    """Run ``plan['commands']`` in order, printing one section each; exit like the sh framer."""
    if resource is None or not hasattr(posix, "posix_spawnp") or not hasattr(posix, "memfd_create"):
        sys.exit(NOT_STARTED)  # a fork of this interpreter per command would cost the node more than sh
    try:
        posix.close(posix.memfd_create("hc-probe"))  # a kernel or seccomp policy that refuses it: sh instead
        wake_r, wake_w = posix.pipe()
        posix.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, _wake)
        for signum, code in ((signal.SIGHUP, 129), (signal.SIGINT, 130), (signal.SIGTERM, 143)):
            signal.signal(signum, _stopper(code))
        framer = Framer(plan, wake_r)
    except (OSError, ValueError, KeyError, TypeError):
        sys.exit(NOT_STARTED)
    code = 0
    try:
        for command in plan["commands"]:
            framer.run(*command)
    except Stop as stop:
        code = stop.code
    except BrokenPipeError:
        code = _CLOSED_SESSION
    except BaseException as exc:  # say why on stderr, keep the exit code for the sh script
        _say("healthcheck: node framer failed: %r\n" % (exc,))
        code = FAILED
    framer.stop_running()
    sys.exit(code)


def _wake(signum: "int", frame: "object") -> None:
    """SIGCHLD's handler: its only job is the byte the interpreter writes to the wake-up pipe."""


def _stopper(code: "int") -> "object":
    def stop(signum: "int", frame: "object") -> None:
        raise Stop(code)
    return stop


def _say(text: "str") -> None:
    try:
        posix.write(2, text.encode("ascii", "replace"))
    except OSError:
        pass


class Framer:
    """One node script's state: the plan's limits, tools that hung, the command being waited for."""

    def __init__(self, plan: "dict", wake_fd: "int") -> None:
        self.marker = plan["marker"].encode()
        self.cap = int(plan["cap"])
        self.limit = int(plan["blk"]) * 512
        self.kill_s = float(plan["kill"])
        self.wake_fd = wake_fd
        self.poller = select.poll()  # the wake-up pipe, and the session's end: POLLERR/POLLHUP once it is gone
        self.poller.register(wake_fd, select.POLLIN)
        self.poller.register(1, 0)
        self.hung = {}  # tool -> (timeout text, id of the command that hung)
        self.running = 0  # pid (and process group) of the command being waited for

    def run(self, cid: "str", timeout_text: "str", tools: "list", argv: "list") -> None:
        for tool in tools:
            if tool in self.hung:
                hung_s, cause = self.hung[tool]
                self.write(b"\n%s NOTRUN %s tool=%s hung_s=%s in=%s\n" % (
                    self.marker, cid.encode(), tool.encode(), hung_s.encode(), cause.encode()))
                return
        try:
            out_fd = posix.memfd_create("hc-" + cid + ".o")
        except OSError as exc:
            return self.fail(cid, exc)
        try:
            try:
                err_fd = posix.memfd_create("hc-" + cid + ".e")
            except OSError as exc:
                return self.fail(cid, exc)
            try:
                rc = self.execute(argv, float(timeout_text), out_fd, err_fd)
                if rc in TIMEOUT_RCS:
                    for tool in tools:
                        self.hung.setdefault(tool, (timeout_text, cid))
                out, out_size = self.read_back(out_fd)
                err, err_size = self.read_back(err_fd)
            finally:
                posix.close(err_fd)
        finally:
            posix.close(out_fd)
        self.write(b"".join((b"\n%s BEGIN %s rc=%d out=%d err=%d outsize=%d errsize=%d\n" % (
            self.marker, cid.encode(), rc, len(out), len(err), out_size, err_size), out, err,
            b"\n%s END %s\n" % (self.marker, cid.encode()))))

    def fail(self, cid: "str", exc: "OSError") -> None:
        """An rc=255 section whose stderr says why the command could not be run."""
        text = ("healthcheck: cannot create the command's output files on the node: %s" % exc.strerror).encode()
        self.write(b"\n%s BEGIN %s rc=255 out=0 err=%d outsize=0 errsize=%d\n%s\n%s END %s\n" % (
            self.marker, cid.encode(), len(text), len(text), text, self.marker, cid.encode()))

    def execute(self, argv: "list", timeout_s: "float", out_fd: "int", err_fd: "int") -> "int":
        """Run ``argv`` in its own process group; its exit code, 124/137 when the timeout ended it."""
        actions = [(posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                   (posix.POSIX_SPAWN_DUP2, out_fd, 1), (posix.POSIX_SPAWN_DUP2, err_fd, 2)]
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        try:  # inherited by the command: its files stop at the cap (SIGXFSZ stays ignored, so EFBIG)
            resource.setrlimit(resource.RLIMIT_FSIZE, (_at_most(self.limit, hard), hard))
            pid = posix.posix_spawnp(argv[0], argv, posix.environ, file_actions=actions, setpgroup=0,
                                     setsigdef=(signal.SIGPIPE,))
        except OSError as exc:
            posix.write(err_fd, ("healthcheck: failed to run command '%s': %s\n" % (argv[0], exc.strerror)).encode())
            return 127 if exc.errno == errno.ENOENT else 126
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        self.running = pid
        status = self.wait(pid, time.monotonic() + timeout_s)
        rc = None
        if status is None:
            _signal_group(pid, signal.SIGTERM)
            rc = TIMEOUT_RCS[0]
            if self.wait(pid, time.monotonic() + self.kill_s) is None:
                _signal_group(pid, signal.SIGKILL)
                rc = TIMEOUT_RCS[1]
                self.wait(pid, time.monotonic() + KILL_WAIT_S)  # a process in D state is left behind
        self.running = 0
        if rc is not None:
            return rc
        if posix.WIFSIGNALED(status):
            return 128 + posix.WTERMSIG(status)
        return posix.WEXITSTATUS(status)

    def wait(self, pid: "int", deadline: "float") -> "int | None":
        """The wait status of ``pid``, or None at ``deadline`` (woken by SIGCHLD, not polling).

        BrokenPipeError when the session's output is closed meanwhile (the sweep gave up on this
        host, the connection dropped): the command is stopped now, not when its timeout ends."""
        while True:
            done, status = posix.waitpid(pid, posix.WNOHANG)
            if done == pid:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for fd, events in self.poller.poll(left * 1000 + 1):
                if fd == self.wake_fd:
                    try:
                        posix.read(self.wake_fd, 512)
                    except BlockingIOError:
                        pass
                elif events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    raise BrokenPipeError("the session's output was closed")

    def read_back(self, fd: "int") -> "tuple":
        """(bytes to print, at most ``cap``; the file's size) of one output file."""
        chunks = []
        have = 0
        while have < self.cap:
            chunk = posix.pread(fd, self.cap - have, have)
            if not chunk:
                break
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks), max(posix.fstat(fd).st_size, have)

    def write(self, data: "bytes") -> None:
        view = memoryview(data)
        while view:
            view = view[posix.write(1, view):]

    def stop_running(self) -> None:
        """The script is ending: the command being waited for goes with it (SIGTERM to its group)."""
        if self.running:
            _signal_group(self.running, signal.SIGTERM)


def _signal_group(pid: "int", signum: "int") -> None:
    try:
        posix.killpg(pid, signum)
    except OSError:
        pass


def _at_most(limit: "int", hard: "int") -> "int":
    """``limit``, or the hard limit where that is lower."""
    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)
