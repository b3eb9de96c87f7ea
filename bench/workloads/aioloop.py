# aioloop.py - an asyncio program for the sweeps (BENCHMARKS.md, "Unix
# socket pairs move: asyncio programs"): coroutines that hash and sleep,
# a producer and consumer on an asyncio.Queue, a thread that wakes the loop
# with call_soon_threadsafe, an executor job, and a SIGUSR1 handler of the
# loop's (it sends itself the signal). Its event loop wakes itself through
# a unix socket pair. Prints a digest that does not depend on timing.
# Usage: python3 aioloop.py ROUNDS
import asyncio, hashlib, os, signal, sys, threading

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400


async def hasher(k):
    h = hashlib.sha256()
    for i in range(rounds):
        for j in range(800):
            h.update(b"%d" % (k * 10**7 + i * 800 + j))
        await asyncio.sleep(0.003)
    return h.hexdigest()


async def pipeline():
    q = asyncio.Queue(maxsize=8)
    total = 0

    async def produce():
        for i in range(rounds * 5):
            await q.put(i * i % 1009)
            if i % 50 == 0:
                await asyncio.sleep(0.001)
        await q.put(None)

    async def consume():
        nonlocal total
        while (v := await q.get()) is not None:
            total += v

    await asyncio.gather(produce(), consume())
    return total


async def main():
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    signals = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: signals.append(1))

    def from_thread():
        s = sum(i * i for i in range(200000))
        loop.call_soon_threadsafe(woken.set)
        return s

    t = threading.Thread(target=from_thread)
    t.start()
    r = await asyncio.gather(*(hasher(k) for k in range(3)), pipeline())
    await woken.wait()
    t.join()
    x = await loop.run_in_executor(None, lambda: sum(i * 3 for i in range(100000)))
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(500):
        if signals:
            break
        await asyncio.sleep(0.01)
    print(*r, x, "signal" if signals else "no-signal", flush=True)


asyncio.run(main())
