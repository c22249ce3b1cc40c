#!/usr/bin/python3
"""The asyncio Python client (turnstile.aio) against a real ZooKeeper and
turnstiled (tests/conformance/harness.py's live_replicas), for what the
conformance scenarios do not show:

    python_aio_live_test.py --build BUILD_DIR [--package DIR]

- Cancellation: a waiter queued behind a holder whose awaiting task is
  cancelled leaves no node: the lock node's children, read from ZooKeeper
  (kazoo) on every children-watch event, are the holder's alone within the
  session timeout. So do 30 more waits cancelled by asyncio.wait_for at
  staggered moments (before the replica's create is answered, while
  queued), and a multi-lock cancelled while waiting for its second lock;
  then the next try-once is granted at once.
- No thread per hold, FIFO: in a process of its own (this file with
  --fifo), 1,000 waiters queued one after another (each once QUEUED)
  behind a holder: the process has as many threads (/proc/self/task) with
  all of them queued as with one (gRPC core's timer pool brought to its
  steady size first: see fifo()); Describe lists them in that order; once
  the holder lets go they are granted in that order, each releasing at once.

Every wait has a deadline; nothing waits by sleeping. Runs in 5 to 20 s.
"""
import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402

WITHIN = 15.0      # seconds: the deadline of every wait for an event
WAITERS = 1000     # the --fifo child's waiters on one lock
FIFO_WITHIN = 120  # seconds: the whole --fifo run's deadline


class Check(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Check(what)


def threads():
    """The names of this process's threads (Linux: /proc/self/task)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # it ended meanwhile
            pass
    return sorted(names)


# -- ZooKeeper's own view ---------------------------------------------------------

class Children:
    """The children of one lock node as ZooKeeper lists them, read again on
    every children-watch event (a test session's watch: the replicas are
    not affected)."""

    def __init__(self, replica, lock):
        from kazoo.client import KazooClient  # Debian's python3-kazoo
        import logging
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        self.path = "%s/%s" % (replica.zk_root, lock)
        self.zk = KazooClient(hosts=replica.zk_connect, timeout=10)
        self.zk.start(timeout=10)

    def close(self):
        self.zk.stop()
        self.zk.close()

    def wait_for(self, pred, within, what):
        """The children once pred(children) holds; Check after `within` s."""
        from kazoo.exceptions import NoNodeError
        deadline = time.monotonic() + within
        changed = threading.Event()
        while True:
            changed.clear()
            try:
                kids = sorted(self.zk.get_children(self.path, watch=lambda ev: changed.set()))
            except NoNodeError:  # the container is gone, or not made yet
                kids = []
                if self.zk.exists(self.path, watch=lambda ev: changed.set()):
                    continue
            if pred(kids):
                return kids
            left = deadline - time.monotonic()
            if left <= 0 or not changed.wait(left):
                raise Check("%s: not within %.1fs; children of %s: %s"
                            % (what, within, self.path, kids))


# -- cancellation ---------------------------------------------------------------

async def queued_waiter(client, lock, owner):
    """A task waiting for `lock`, once the replica has said QUEUED."""
    queued = asyncio.Event()
    task = asyncio.ensure_future(client.lock(lock, wait_timeout=WITHIN, owner=owner,
                                             on_queued=lambda position: queued.set()))
    await asyncio.wait_for(queued.wait(), WITHIN)
    return task


async def check_cancellation(replica, children):
    import turnstile.aio
    from turnstile import TurnstileError
    async with turnstile.aio.Client(replica.address) as client:
        holder = await client.lock("aio-cancel", wait_timeout=WITHIN, owner="holder")
        session = holder.session_timeout
        expect(session and session > 0, "ACQUIRED carries the session timeout: %r" % session)
        mine = await asyncio.get_running_loop().run_in_executor(
            None, children.wait_for, lambda kids: len(kids) == 1, WITHIN, "the holder's node")

        task = await queued_waiter(client, "aio-cancel", "cancelled")
        await asyncio.get_running_loop().run_in_executor(
            None, children.wait_for, lambda kids: len(kids) == 2, WITHIN, "the waiter's node")
        cancelled_at = time.monotonic()
        task.cancel()
        try:
            await task
            raise Check("a cancelled wait returned a hold")
        except asyncio.CancelledError:
            pass
        left = await asyncio.get_running_loop().run_in_executor(
            None, children.wait_for, lambda kids: kids == mine, session,
            "the cancelled waiter's node gone within the session timeout")
        gone_after = time.monotonic() - cancelled_at
        print("a cancelled wait's node is gone %.0f ms after task.cancel() (session timeout "
              "%.1f s); children: %s" % (gone_after * 1000, session, left))

        # Waits cancelled at every moment: before the replica answers the
        # create, while queued.
        outcomes = {"cancelled": 0}

        async def cancelled_wait(i):
            try:
                await asyncio.wait_for(client.lock("aio-cancel", wait_timeout=WITHIN,
                                                   owner="staggered-%d" % i), 0.002 * i)
                raise Check("staggered wait %d was granted under a holder" % i)
            except asyncio.TimeoutError:
                outcomes["cancelled"] += 1
        await asyncio.wait_for(asyncio.gather(*(cancelled_wait(i) for i in range(30))), WITHIN)
        expect(outcomes["cancelled"] == 30, "30 waits cancelled: %r" % outcomes)

        # A multi-lock cancelled while waiting for its second lock: its
        # first lock ("aio-a", taken) and its wait on "aio-cancel" both go.
        multi = asyncio.ensure_future(client.lock_all(["aio-cancel", "aio-a"], wait_timeout=WITHIN,
                                                      owner="multi"))
        await asyncio.get_running_loop().run_in_executor(
            None, children.wait_for, lambda kids: len(kids) == 2, WITHIN,
            "the multi-lock's wait on aio-cancel")
        multi.cancel()
        try:
            await multi
            raise Check("a cancelled multi-lock returned")
        except asyncio.CancelledError:
            pass
        await asyncio.get_running_loop().run_in_executor(
            None, children.wait_for, lambda kids: kids == mine, session,
            "every cancelled wait's node gone")
        d = await client.describe("aio-a")
        expect(d is None, "the cancelled multi-lock left aio-a held: %r" % (d,))

        expect(await holder.release(), "the holder released")
        try:
            nxt = await client.lock("aio-cancel", wait_timeout=0, owner="next")
        except TurnstileError as e:
            raise Check("the next try-once after the holder let go: %s" % e)
        await nxt.release()


# -- 1,000 waiters in one process (this file --fifo TARGET) ---------------------

async def fifo(target):
    import grpc
    import turnstile.aio
    async with turnstile.aio.Client(target) as client:
        holder = await client.lock("aio-fifo", wait_timeout=WITHIN, owner="holder")
        # gRPC core's own threads: a fixed set, and the timer manager's pool,
        # which grows (never shrinks) when a timer fires while its only
        # thread is the one waiting: at a moment gRPC's internal timers
        # choose (seen 0.5 to 5 s after the first call, whatever the
        # calls). Deadlines that expire bring the pool to its steady size
        # (two threads) before anything is counted.
        async def expiring():
            try:
                await client._stub.Describe(client._pb2.DescribeRequest(name="aio-fifo"),
                                            timeout=0.001)
            except grpc.RpcError:
                pass
        for _ in range(5):
            await asyncio.gather(*(expiring() for _ in range(10)))
        granted = []

        async def waiter(i):
            hold = await client.lock("aio-fifo", wait_timeout=FIFO_WITHIN, owner="w%04d" % i,
                                     on_queued=lambda position: queued.set())
            granted.append(i)
            await hold.release()

        tasks = []
        counts = {}
        started = time.monotonic()
        for i in range(WAITERS):
            queued = asyncio.Event()
            tasks.append(asyncio.ensure_future(waiter(i)))
            await asyncio.wait_for(queued.wait(), WITHIN)
            if i == 0:
                counts["one"] = threads()
        counts["all"] = threads()
        queued_s = time.monotonic() - started
        d = await client.describe("aio-fifo")
        expect([w.owner for w in d.waiters] == ["w%04d" % i for i in range(WAITERS)],
               "Describe's waiters are not in the order they were queued")
        started = time.monotonic()
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), FIFO_WITHIN)
        granted_s = time.monotonic() - started
        counts["after"] = threads()
        added = collections.Counter(counts["all"]) - collections.Counter(counts["one"])
        return {"threads_one_waiter": len(counts["one"]),
                "threads_all_waiters": len(counts["all"]), "threads_after": len(counts["after"]),
                "with_one": counts["one"], "added": dict(added), "waiters": WAITERS,
                "fifo": granted == list(range(WAITERS)),
                "first_out_of_order": next((n for n, i in enumerate(granted) if n != i), None),
                "queued_s": round(queued_s, 2), "granted_s": round(granted_s, 2)}


def check_fifo(build, package, target):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--build", build,
                        "--package", package, "--fifo", target], capture_output=True, text=True,
                       timeout=FIFO_WITHIN + 30)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        raise Check("the --fifo child exited %d: %s"
                    % (r.returncode, (r.stdout + r.stderr)[-2000:]))
    res = json.loads(lines[-1])
    print("%(waiters)d waiters: threads %(threads_one_waiter)d with one queued, "
          "%(threads_all_waiters)d with all queued, %(threads_after)d after; queued one by one "
          "in %(queued_s).1f s, granted in order in %(granted_s).1f s" % res)
    expect(res["threads_all_waiters"] == res["threads_one_waiter"],
           "threads: %(threads_one_waiter)d with one waiter, %(threads_all_waiters)d with "
           "%(waiters)d (with one: %(with_one)s; added by name: %(added)s)" % res)
    expect(res["fifo"], "granted out of queue order (first at grant %r)"
           % res["first_out_of_order"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--package", help="the import root of the package turnstile "
                    "(default BUILD/python, where the CMake build assembles it)")
    ap.add_argument("--fifo", metavar="TARGET", help=argparse.SUPPRESS)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    package = os.path.abspath(args.package or os.path.join(build, "python"))
    sys.path.insert(0, package)
    if args.fifo:
        print(json.dumps(asyncio.run(fifo(args.fifo))))
        return 0
    started = time.monotonic()
    try:
        with harness.live_replicas(build, "py-aio", count=1, extra={
                0: ["--max-contenders-per-lock", str(WAITERS + 100)]}) as (replicas, _):
            children = Children(replicas[0], "aio-cancel")
            try:
                asyncio.run(check_cancellation(replicas[0], children))
            finally:
                children.close()
            check_fifo(build, package, replicas[0].address)
    except (Check, harness.Failure) as e:
        print("FAIL python_aio_live: %s" % e)
        return 1
    print("PASS python_aio_live (%.1fs)" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
