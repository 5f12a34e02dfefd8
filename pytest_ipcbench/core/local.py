"""Local process groups: :class:`LocalWorld` starts worker processes (spawn) and :class:`LocalGroup`
joins the calling process (rank 0) with them, so backends that do not need MPI are tested with
several ranks by plain ``pytest`` too.

One cohesive thing: local process groups and the pipe protocol their hub and workers speak.

Rank 0 is the hub; collectives go through one pipe per worker. Before a run, rank 0 sends the
workers its run-time registrations of backends and payload kinds (a conftest.py's
``register_backend``), which a spawned process would not have; objects that can only be
inherited (a backend's ``before_ranks``) are made before the workers start.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait as wait_for
from typing import Any

from . import cleanup, names, procs, registry, where
from .group import DEFAULT_TIMEOUT, Group, GroupError, PeerFailed, RankFailure, describe_failure, raise_failures
from .terminate import AsInterrupt, Terminated, tracker_outlives_hangup, unlink_queue_names

_RUN, _STOP, _RESULT, _ERROR, _DATA, _READY = "run", "stop", "result", "error", "data", "ready"
_REGISTER = "register"  # rank 0's run-time registrations of backends and payload kinds
_PROGRESS = [0]  # messages this process's ranks sent or received: an isolated rank 0 that makes none hangs
STARTUP_TIMEOUT = 60.0  # a worker must be up within this (spawn + imports), whatever the run timeout
PARENT_SETTLE = 5.0  # seconds a worker whose parent died waits for its siblings to let go of what the parent made


class LocalGroup(Group):
    """One rank of a group of local processes; rank 0 holds a pipe to each other rank."""

    def __init__(
        self,
        rank: int,
        size: int,
        links: dict[int, Connection],
        mailboxes: Sequence[Any] = (),
        timeout: float = DEFAULT_TIMEOUT,
        world: LocalWorld | None = None,
    ) -> None:
        self.rank = rank
        self.size = size
        self._links = links  # rank 0: {peer: conn}; others: {0: conn}
        self.mailboxes = list(mailboxes)  # one multiprocessing.Queue per rank (inherited at spawn)
        self.timeout = timeout
        self._world = world
        self._active = rank != 0  # rank 0 is active only inside run()
        self.node_rank, self.node_size, self.node_of = rank, size, (0,) * size  # local processes: one node
        # what run() isolates, e.g. "backend 'x'": rank 0 then runs in a process of its own too,
        # so that a crash in a third-party backend's code fails the test, not the pytest process
        self.isolate = ""
        #: how to raise ``timeout``, said with a hang (the plugin names its option)
        self.hint = ""

    # Messages are (tag, payload). Everything is in program order on each pipe, so a plain
    # send/recv pair per collective is enough; an _ERROR from a peer aborts the collective.
    def _send(self, peer: int, obj: Any) -> None:
        self._links[peer].send((_DATA, obj))
        _PROGRESS[0] += 1

    def _recv(self, peer: int) -> Any:
        conn = self._links[peer]
        # a dead or hung peer is reported as *its* failure (not the waiting rank's)
        if self.rank == 0 and not conn.poll(self.timeout):
            step = self._world.where(peer) if self._world is not None else ""
            raise PeerFailed(RankFailure(peer, hung(step, f"did not answer within {self.timeout:g} s", self.hint)))
        try:
            tag, obj = conn.recv()
        except EOFError:
            raise PeerFailed(RankFailure(peer, "died")) from None
        if tag == _ERROR:
            raise PeerFailed(obj)
        if tag == _STOP:
            raise _Stopped("rank 0 stopped the group")
        _PROGRESS[0] += 1
        return obj

    def _check_active(self) -> None:
        if not self._active:
            raise GroupError(
                "collectives of a local group work only inside group.run(fn): "
                "the other ranks run fn, not the test body"
            )

    def barrier(self) -> None:
        self.bcast(self.gather(None))

    def bcast(self, obj: Any, root: int = 0) -> Any:
        self._check_active()
        if root != 0:  # route through the hub
            if self.rank == root:
                self._send(0, obj)
            if self.rank == 0:
                obj = self._recv(root)
            root = 0
        if self.rank == 0:
            for peer in range(1, self.size):
                self._send(peer, obj)
            return obj
        return self._recv(0)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        self._check_active()
        if self.rank == 0:
            values = [obj] + [self._recv(peer) for peer in range(1, self.size)]
        else:
            self._send(0, obj)
            values = None
        if root == 0:
            return values
        # gather to another root: the hub forwards the list
        if self.rank == 0:
            self._send(root, values)
            return None
        return self._recv(0) if self.rank == root else None

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        if self.rank != 0:
            raise GroupError("run() is started from rank 0 of a local group")
        if self._world is None:
            raise GroupError("this local group has no worker processes")
        if self.isolate:
            return self._world.run_isolated(fn, *args, ranks=self.size, timeout=self.timeout, label=self.isolate,
                                            hint=self.hint)
        return self._world.run(fn, *args, ranks=self.size, timeout=self.timeout, hint=self.hint)


class _Stopped(GroupError):
    pass


def hung(step: str, waited: str, hint: str) -> str:
    """A hung rank's failure: where it is stuck (``step``: the backend and its step, from
    core/where.py), how long it was waited for, and how to raise that."""
    if step and not step.startswith("in "):  # in a backend's step (core/where.py)
        text = f"hung in {step}: {waited}"
    else:
        text = f"{waited} (hung?{f' {step}' if step else ''})"
    return f"{text}; {hint}" if hint else text


# ------------------------------------------------------- objects made before the ranks start
# name -> (hook(size), release(made) or None): the hook runs in the parent before a LocalWorld
# starts its workers; what it returns is handed to every worker at spawn (multiprocessing queues
# and pipes, faster-fifo queues: objects that can only be inherited); release runs in the parent
# once the workers stopped (the world closes or restarts), before any leak check. Filled by
# backends (Backend.before_ranks, Backend.after_ranks); core knows nothing of backends.
Hooks = tuple[Callable[[int], Any], "Callable[[Any], None] | None"]
_BEFORE_RANKS: dict[str, Hooks] = {}
_BEFORE_RANKS_VERSION = [0]
_INHERITED: dict[str, Any] = {}  # in a worker: what its parent made; in the parent: the same objects


def register_before_ranks(name: str, hook: Callable[[int], Any],
                          release: Callable[[Any], None] | None = None) -> None:
    """Run ``hook(size)`` in the parent before the ranks of a local world start; every rank finds
    its result with :func:`inherited` (a world already started restarts its workers to get it).
    ``release(made)`` runs in the parent after the workers stopped: what the hook made is gone
    before the session's leak check."""
    if _BEFORE_RANKS.get(name) != (hook, release):  # bound classmethods: equal, never identical
        _BEFORE_RANKS[name] = (hook, release)
        _BEFORE_RANKS_VERSION[0] += 1


def _picklable(hooks: dict[str, Hooks]) -> dict[str, bytes]:
    """Each hook pair pickled apart (by reference: module and class); one that cannot be (a class
    of a conftest.py that the registrations bring along anyway) is left out."""
    out = {}
    for name, pair in hooks.items():
        try:
            out[name] = pickle.dumps(pair)
        except Exception:
            continue
    return out


def inherited(name: str) -> Any:
    """What the ``before_ranks`` hook of ``name`` made before the ranks started (None if nothing:
    not a local world, or the hook was registered after it started)."""
    return _INHERITED.get(name)


def _worker_main(rank: int, conn: Connection, mailboxes: Sequence[Any], timeout: float,
                 made: dict[str, Any] | None = None, probe: Connection | None = None) -> None:
    """Loop of a local worker: run what rank 0 sends until told to stop."""
    if probe is not None:
        where.serve(probe)  # says where this rank is stuck when rank 0 waited in vain
    _INHERITED.clear()
    _INHERITED.update(made or {})
    # Ctrl-C in a terminal reaches the whole process group: rank 0 alone handles it (it stops
    # the run, then stops the workers); a worker dying of it mid-collective would turn rank 0's
    # KeyboardInterrupt into "rank N died"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM or SIGHUP to the whole group (a terminated session) leaves through the finally blocks
    # and multiprocessing's finalisers (a segment's exit hook), not the death that runs none
    AsInterrupt()
    end_with_parent()
    try:
        _serve(rank, conn, mailboxes, timeout)
    except Terminated as exc:
        _remove_left_by_dead_parent()
        sys.exit(128 + exc.signum)  # no traceback; rank 0, terminated too, stops its run anyway


def end_with_parent() -> None:
    """Terminate this spawned process (SIGTERM: out through its finally blocks, as above) when the
    process that started it dies. A parent killed by SIGKILL ran no cleanup and stopped nobody:
    its workers were left polling for a peer that would never come, holding their segments and
    folders (``kill -9`` of a plain ``ipcbench run``). multiprocessing's parent sentinel becomes
    readable when the parent ends; a thread waits on it, costing nothing until then."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait_for([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ipcbench-parent-watch", daemon=True).start()


def _remove_left_by_dead_parent() -> None:
    """When the parent (rank 0) died, what it named (``ipcb-<pid>-*``: its segments, folders and
    sockets) has nobody else to remove it: each of its workers, on its way out, removes what no
    other live process maps, waiting up to :data:`PARENT_SETTLE` s for its siblings to end (a
    shared array that a process outside the group still maps stays, as ``ipcbench clean`` leaves it)."""
    parent = mp.parent_process()
    if parent is None or parent.is_alive():
        return
    deadline = time.monotonic() + PARENT_SETTLE
    while True:
        left = names.find_ours(pid=parent.pid)
        mapped = procs.mapped_paths(exclude=os.getpid())
        for item in left:
            if not cleanup.in_use(item.path, mapped):
                names.remove(item.path)
        if all(not item.path.exists() for item in left) or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _serve(rank: int, conn: Connection, mailboxes: Sequence[Any], timeout: float) -> None:
    try:
        conn.send((_READY, os.getpid()))  # started: the run timeout does not count start-up
    except OSError:
        return
    replay_error = ""
    while True:
        try:
            tag, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if tag == _STOP:
            return
        if tag == _REGISTER:
            try:  # pickled apart, so that a reference that does not load here is reported, not fatal
                registry.replay(pickle.loads(payload))
                replay_error = ""
            except Exception as exc:
                replay_error = ("could not make rank 0's registrations (register_backend/register_payload) here: "
                                + describe_failure(exc))
            continue
        if tag != _RUN:
            continue  # a stray collective message after an abort
        if replay_error:
            try:
                conn.send((_ERROR, RankFailure(rank, replay_error)))
            except Exception:
                return
            continue
        fn, args, size = payload
        group = LocalGroup(rank, size, {0: conn}, mailboxes, timeout)
        try:
            conn.send((_RESULT, fn(group, *args)))
        except PeerFailed:
            pass  # rank 0 already knows
        except _Stopped:
            return
        except Exception as exc:
            try:
                conn.send((_ERROR, RankFailure(rank, describe_failure(exc))))
            except Exception:
                return


def _crash_step(dump: str) -> str:
    """The innermost frame of faulthandler's dump that is not Python's own library:
    ``write (fakecrash.py:7)``, the backend's step that crashed."""
    lines = dump.splitlines()
    # with every thread dumped, the crash is in faulthandler's "Current thread" block (not, e.g.,
    # in the parent watch's thread, waiting in end_with_parent)
    current = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
    if current is not None:
        after = lines[current + 1:]
        lines = after[:next((i for i, line in enumerate(after) if line.startswith("Thread ")), len(after))]
    for line in lines:
        line = line.strip()
        if not line.startswith('File "'):
            continue
        try:
            path, rest = line[6:].split('", line ', 1)
            lineno, func = rest.split(" in ", 1)
        except ValueError:
            continue
        if where.own_library(path):
            continue
        return f"{func} ({os.path.basename(path)}:{lineno})"
    return ""


def _host_main(conn: Connection, size: int, timeout: float, blob: bytes, fn: Callable[..., Any], args: tuple,
               fault_path: str, hooks: bytes = b"", probe: Connection | None = None, hint: str = "") -> None:
    """Rank 0 of an isolated run: a world of its own; a crash is dumped into ``fault_path``."""
    if probe is not None:
        where.serve(probe, lambda: _PROGRESS[0])  # the parent asks while it waits (run_isolated)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    AsInterrupt()  # as a worker's: SIGTERM closes its world (with) instead of leaving what its workers made
    end_with_parent()
    try:
        _host_serve(conn, size, timeout, blob, fn, args, fault_path, hooks, hint)
    except Terminated as exc:
        sys.exit(128 + exc.signum)


def _host_serve(conn: Connection, size: int, timeout: float, blob: bytes, fn: Callable[..., Any], args: tuple,
                fault_path: str, hooks: bytes = b"", hint: str = "") -> None:
    import faulthandler

    fault = open(fault_path, "w")
    faulthandler.enable(fault, all_threads=True)
    try:
        registry.replay(pickle.loads(blob))
        # the parent's before_ranks hooks (an installed plugin's backend is loaded on first use,
        # which in this fresh process would come after its world started: nothing inherited); a
        # conftest.py's came with the registrations replayed above
        for name, blob in (pickle.loads(hooks) if hooks else {}).items():
            try:
                pair = pickle.loads(blob) if name not in _BEFORE_RANKS else None
            except Exception:  # its backend cannot load here: a test that uses it says why
                continue
            if pair is not None:
                register_before_ranks(name, *pair)
    except Exception as exc:
        conn.send(("error", f"could not make rank 0's registrations here: {describe_failure(exc)}", []))
        return
    with LocalWorld(size, timeout) as world:
        # the answer names this world's workers: the caller's leak check looks for what they named
        try:
            conn.send(("ok", world.run(fn, *args, ranks=size, hint=hint), world.pids))
        except GroupError as exc:
            conn.send(("error", str(exc), world.pids))
        except Exception as exc:
            conn.send(("error", describe_failure(exc), world.pids))


class LocalWorld:
    """Worker processes (spawn) that serve as ranks 1..n-1 of local groups.

    Started lazily, kept for the session, restarted after a failure (a failed rank may have
    left messages in its pipe).
    """

    def __init__(self, size: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        if size < 1:
            raise ValueError(f"a local world needs at least 1 rank, got {size}")
        self.size = size
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")
        self._procs: list[Any] = []
        self._links: dict[int, Connection] = {}
        self._probes: dict[int, Connection] = {}  # rank -> the pipe its where-thread answers on
        self.mailboxes: list[Any] = []
        self.pids: list[int] = []  # every worker ever started (leak checks look for their resources)
        self._sent_version = 0  # of the registrations the workers have (registry.snapshot())
        self._hooks_version = 0  # of the before_ranks hooks the workers inherited
        self._made: dict[str, Any] = {}  # what the before_ranks hooks made for the running workers
        #: an after_ranks hook that failed, in words (the session's leak check reports them)
        self.release_problems: list[str] = []

    def _start(self) -> None:
        tracker_outlives_hangup()  # before the queues: it unlinks their semaphores if we die
        self._sent_version = 0
        self.mailboxes = [self._ctx.Queue() for _ in range(self.size)]
        self._hooks_version = _BEFORE_RANKS_VERSION[0]
        made = self._made = {}
        for name, (hook, _) in list(_BEFORE_RANKS.items()):
            try:
                made[name] = hook(self.size)
            except Exception as exc:
                self._release()  # what the hooks before it made
                raise GroupError(f"backend {name}: its before_ranks hook failed: {describe_failure(exc)}") from exc
        _INHERITED.clear()
        _INHERITED.update(made)
        for rank in range(1, self.size):
            here, there = self._ctx.Pipe(duplex=True)
            self._probes[rank], probe = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(
                target=_worker_main,
                args=(rank, there, self.mailboxes, self.timeout, made, probe),
                name=f"ipcbench-rank{rank}",
                daemon=True,
            )
            proc.start()
            assert proc.pid is not None  # started
            self.pids.append(proc.pid)
            there.close()
            probe.close()
            self._procs.append(proc)
            self._links[rank] = here
        wait = max(STARTUP_TIMEOUT, self.timeout)
        for rank, conn in self._links.items():
            problem = ""
            try:
                if not conn.poll(wait):
                    problem = f"did not start within {wait:g} s"
                elif conn.recv()[0] != _READY:
                    problem = "did not say it was ready"
            except (EOFError, OSError):
                proc = self._procs[rank - 1]
                proc.join(timeout=1.0)
                problem = f"died at start (exit code {proc.exitcode})"
            if problem:
                self.close()
                raise GroupError(f"local worker rank {rank} {problem}")
        unlink_queue_names(self.mailboxes)  # every worker has them open now

    def group(self, ranks: int | None = None, timeout: float | None = None) -> LocalGroup:
        """Rank 0 of a group of ``ranks`` processes (this one and ``ranks - 1`` workers)."""
        ranks = self.size if ranks is None else ranks
        if not 1 <= ranks <= self.size:
            raise ValueError(f"cannot make a group of {ranks} ranks out of {self.size}")
        return LocalGroup(
            0,
            ranks,
            self._links,
            self.mailboxes,
            self.timeout if timeout is None else timeout,
            world=self,
        )

    def where(self, rank: int) -> str:
        """Where worker ``rank`` is stuck: ``"inshm's read (at ..., inshm.py:95)"``, or ""."""
        return where.ask(self._probes.get(rank))

    def run(
        self, fn: Callable[..., Any], *args: Any, ranks: int | None = None, timeout: float | None = None,
        hint: str = "",
    ) -> list[Any]:
        """Run ``fn(group, *args)`` on ranks 0..ranks-1; return the results by rank. ``hint`` says
        how to raise ``timeout`` in a hang's failure."""
        ranks = self.size if ranks is None else ranks
        if self._procs and self._hooks_version != _BEFORE_RANKS_VERSION[0]:
            self.close()  # a before_ranks hook came after the workers started: they must inherit its objects
        if ranks > 1 and not self._procs:
            self._start()
        group = self.group(ranks, timeout)
        group.hint = hint
        _PROGRESS[0] += 1  # the world is up: an isolated rank 0 is waited for from now on
        self._ship_registrations()
        # rank 0 is this process: it holds what this world's hooks made (another world of the same
        # process, e.g. the conformance kit's, made objects of its own)
        _INHERITED.clear()
        _INHERITED.update(self._made)
        for peer in range(1, ranks):
            self._links[peer].send((_RUN, (fn, args, ranks)))
        group._active = True
        outcomes: list[tuple[str, Any]] = []
        from_peer: dict[int, tuple[str, Any]] = {}
        broken = True
        try:
            try:
                outcomes.append(("ok", fn(group, *args)))
                broken = False
            except PeerFailed as exc:  # a worker's own failure, met inside a collective
                outcomes.append(("error", RankFailure(0, "(peer) stopped by another rank's failure")))
                from_peer = {exc.failure.rank: ("error", exc.failure)}
            except Exception as exc:
                outcomes.append(("error", RankFailure(0, describe_failure(exc))))
            for peer in range(1, ranks):
                outcomes.append(from_peer.get(peer) or self._collect(peer, group.timeout, broken, hint))
                broken = broken or outcomes[-1][0] == "error"
        except BaseException:  # Ctrl-C or exit half-way: the workers are somewhere in fn
            broken = True
            raise
        finally:
            group._active = False
            if broken:
                self.close()  # a failed rank may have left messages in its pipe
        raise_failures(outcomes)
        return [value for _, value in outcomes]

    def run_isolated(self, fn: Callable[..., Any], *args: Any, ranks: int | None = None,
                     timeout: float | None = None, label: str = "", hint: str = "") -> list[Any]:
        """:meth:`run` with every rank, rank 0 included, in processes of their own (a host
        process that runs a world of its own): a crash (SIGSEGV in a backend's ``write``) raises
        GroupError naming ``label``, the rank, the signal and the step (the innermost frame outside
        Python's own library, from faulthandler), and this process goes on."""
        ranks = self.size if ranks is None else ranks
        timeout = self.timeout if timeout is None else timeout
        fd, fault_path = tempfile.mkstemp(prefix="ipcbench-fault-", suffix=".txt")
        os.close(fd)
        here, there = self._ctx.Pipe(duplex=True)
        probe_here, probe_there = self._ctx.Pipe(duplex=True)
        blob = pickle.dumps(registry.snapshot()[1])
        hooks = pickle.dumps(_picklable(_BEFORE_RANKS))  # an isolated rank 0 starts a world too
        host = self._ctx.Process(target=_host_main, args=(there, ranks, timeout, blob, fn, args, fault_path, hooks,
                                                                   probe_there, hint),
                                 name="ipcbench-rank0", daemon=False)  # it starts workers of its own
        try:
            host.start()
            if host.pid is not None:  # rank 0 here: what it names is this world's to check
                self.pids.append(host.pid)
            there.close()
            probe_there.close()
            # rank 0 hangs when it exchanges no message for longer than a rank may wait for another
            # (timeout, and 10 s for the answer of a peer it found hung itself); its world's start-up
            # comes first
            stall = timeout + 10
            last, progress = time.monotonic() + STARTUP_TIMEOUT, 0
            step, limit = "", STARTUP_TIMEOUT + stall
            while not here.poll(0.5):
                answer = where.ask(probe_here, wait=0.5)
                if isinstance(answer, tuple):
                    step, count = answer
                    if count != progress:
                        last, progress = time.monotonic(), count
                if not host.is_alive() or time.monotonic() - last > stall:
                    limit = stall
                    break
            if here.poll(0):
                try:
                    tag, value, pids = here.recv()
                    self.pids.extend(pids)
                except EOFError:
                    tag, value = "died", None
            else:
                tag, value = "died", None
            if tag == "ok":
                return value
            if tag != "died":
                raise GroupError(f"{label}: {value}" if label else str(value))
            host.join(timeout=5 if not host.is_alive() or limit != stall else 0.5)
            code = host.exitcode
            if code is None:
                host.kill()
                host.join(timeout=5)
                waited = f"exchanged no message with the other ranks for {limit:g} s"
                raise GroupError(f"{label}: rank 0 (pid {host.pid}) {hung(step, waited, hint)}")
            with open(fault_path, errors="replace") as f:
                step = _crash_step(f.read())
            how = (
                f"was killed by signal {-code} ({procs.signal_name(-code)})" if code < 0 else f"exited with code {code}"
            )
            raise GroupError(f"{label}: rank 0 (pid {host.pid}) {how}{f' in {step}' if step else ''}; "
                             "the session goes on")
        finally:
            if host.is_alive():
                host.kill()
            if host.pid is not None:
                host.join(timeout=5)
                for item in names.find_ours(pid=host.pid):  # what a crashed host left
                    names.remove(item.path)
            here.close()
            probe_here.close()
            os.unlink(fault_path)

    def _ship_registrations(self) -> None:
        """Send the workers this process's run-time registrations (spawned, they never ran our
        conftest.py), when they changed since the last run."""
        version, data = registry.snapshot()
        if version == self._sent_version:
            return
        blob = pickle.dumps(data)
        for conn in self._links.values():
            conn.send((_REGISTER, blob))
        self._sent_version = version

    def _collect(self, peer: int, timeout: float, after_failure: bool, hint: str = "") -> tuple[str, Any]:
        conn = self._links[peer]
        # after a failure on another rank this one may be stuck in a collective: wait briefly
        wait = min(timeout, 0.2) if after_failure else timeout
        while conn.poll(wait):
            try:
                tag, obj = conn.recv()
            except EOFError:
                proc = self._procs[peer - 1]
                proc.join(timeout=1.0)
                code = proc.exitcode
                how = (f"was killed by signal {-code} ({procs.signal_name(-code)})" if code is not None and code < 0
                       else f"exit code {code}")
                return ("error", RankFailure(peer, f"died ({how})"))
            if tag == _RESULT:
                return ("ok", obj)
            if tag == _ERROR:
                return ("error", obj)
            # a collective message rank 0 never consumed: rank 0 must have failed; keep draining
        if after_failure:
            return ("error", RankFailure(peer, "(peer) abandoned after another rank failed"))
        return ("error", RankFailure(peer, hung(self.where(peer), f"did not finish within {timeout:g} s", hint)))

    def close(self) -> None:
        """Stop every worker (politely, then by force) and drop the pipes."""
        for conn in self._links.values():
            try:
                conn.send((_STOP, None))
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2.0)
        for conn in [*self._links.values(), *self._probes.values()]:
            conn.close()
        self._probes = {}
        for box in self.mailboxes:
            # what is still queued is for workers that are gone: do not wait to flush it (a
            # reader stopped half-way, e.g. by Ctrl-C, leaves a full pipe and a blocked feeder)
            box.cancel_join_thread()
            box.close()
            box.join_thread()
        self._procs, self._links, self.mailboxes = [], {}, []
        self._release()

    def _release(self) -> None:
        """Give what the before_ranks hooks made to their release hooks (the workers are gone)."""
        made, self._made = self._made, {}
        for name, obj in made.items():
            if _INHERITED.get(name) is obj:
                del _INHERITED[name]
            release = _BEFORE_RANKS.get(name, (None, None))[1]
            if release is None:
                continue
            try:
                release(obj)
            except Exception as exc:
                self.release_problems.append(f"backend {name}: its after_ranks hook failed: {describe_failure(exc)}")

    def __enter__(self) -> LocalWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["LocalGroup", "LocalWorld", "inherited", "register_before_ranks"]
