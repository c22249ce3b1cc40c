#!/usr/bin/python3
"""The conformance runner for the asyncio Python library (turnstile.aio,
client/python/turnstile/aio): the protocol of tests/conformance/README.md
on one event loop, with no thread of its own: every command is a task, and
a hold's events come from its on_state callback, in the library's order.
The options and events are spelled by runner.py's functions.
"""
import asyncio
import sys

import turnstile.aio
from turnstile import TurnstileError

from runner import (QUIT, acquire_options, command, parse_args, ready, say_acquired, say_error,
                    say_not_held, say_state, unary_call)


class AioRunner:
    def __init__(self, target, owner):
        self.client = turnstile.aio.Client(target)
        self.owner = owner
        self.locks = {}

    async def acquire(self, cmd):
        hold = cmd["hold"]

        def on_state(lock, state, reason):
            if reason == "ACQUIRED":  # said before the awaited lock() returns
                self.locks[hold] = lock
                say_acquired(hold, lock)
            else:
                say_state(hold, lock, state)

        try:
            await self.client.lock(cmd["lock"], on_state=on_state, **acquire_options(cmd, hold))
        except TurnstileError as e:
            say_error("hold", hold, e)

    async def release(self, cmd):
        lock = self.locks.get(cmd["hold"])
        if lock is None:
            say_not_held(cmd["hold"])
            return
        await lock.release()  # on_state says RELEASED (or LOST)

    async def unary(self, cmd):
        call, report = unary_call(self.client, cmd, self.owner)
        try:
            report(await call())
        except TurnstileError as e:
            say_error("req", cmd["req"], e)


async def main():
    args = parse_args()
    runner = AioRunner(args.server, args.owner)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    ready("python_aio")
    tasks = set()
    while True:
        line = await stdin.readline()
        todo = command(runner, line.decode()) if line else QUIT
        if todo == QUIT:
            break
        if todo is not None:
            task = asyncio.ensure_future(todo[0](todo[1]))
            tasks.add(task)  # referenced until done
            task.add_done_callback(tasks.discard)
    for lock in list(runner.locks.values()):
        await lock.release(timeout=2.0)
    await runner.client.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
