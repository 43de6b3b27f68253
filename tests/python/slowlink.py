# SPDX-License-Identifier: Apache-2.0
"""A unix-socket relay whose client-to-server direction carries at most
RATE bytes per second: a slow link between wsfs and agentd for the tests.
Usage: slowlink.py LISTEN_PATH TARGET_PATH RATE; serves until killed."""
import asyncio
import sys
import time

CHUNK = 16 * 1024


async def pump(reader, writer, rate):
    start, sent = time.monotonic(), 0
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
            if rate:
                sent += len(data)
                ahead = sent / rate - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
                elif ahead < -1:  # idle: do not bank the time
                    start, sent = time.monotonic(), 0
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main():
    listen, target, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])

    async def serve(cr, cw):
        try:
            sr, sw = await asyncio.open_unix_connection(target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, sw, rate), pump(sr, cw, 0))

    server = await asyncio.start_unix_server(serve, path=listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
