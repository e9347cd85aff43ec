"""PostgreSQL restarted (not frozen): a reconnect refused at once also silences the store for
RETRY_AFTER (1 s), although the docstring says only "the watchdog cut a statement, or a new
connection timed out". A write made just after the server is back is refused with "did not answer"."""

import subprocess
import time

import anyio
from arkhon_rheo.store import PostgresStore
from arkhon_rheo.testing import find_postgres, start_postgres


def pg_ctl(server, *args):
    subprocess.run(
        [*server.prefix, f"{server.bindir}/pg_ctl", "-D", str(server.root / "data"), *args],
        capture_output=True,
        check=True,
        timeout=60,
    )


async def main():
    server = start_postgres(find_postgres())
    options = f"-c listen_addresses=127.0.0.1 -c port={server.port} -c unix_socket_directories={server.root}"
    try:
        async with PostgresStore(server.url, connect_timeout=2.0) as store:
            await store.create_session("before", machine="m", snapshot={"n": 0})
            pg_ctl(server, "-m", "fast", "-w", "stop")
            t0 = time.monotonic()
            for k in range(2):  # the first finds the connection dropped; the second reconnects
                try:
                    await store.create_session(f"down{k}", machine="m", snapshot={"n": 0})
                    print(f"while down: write {k} landed?!")
                except Exception as e:
                    print(
                        f"while down (+{time.monotonic() - t0:.2f} s): {type(e).__name__}: {str(e)[-90:]}"
                    )
            pg_ctl(server, "-o", options, "-l", str(server.root / "log"), "-w", "start")
            up = time.monotonic() - t0
            for i in range(30):
                try:
                    await store.create_session(f"after{i}", machine="m", snapshot={"n": 0})
                    print(
                        f"server up at +{up:.2f} s; first write after it landed at +{time.monotonic() - t0:.2f} s ({i} refused)"
                    )
                    break
                except Exception as e:
                    if i == 0:
                        print(
                            f"server up at +{up:.2f} s; write at +{time.monotonic() - t0:.2f} s refused: {type(e).__name__}: {str(e)[:100]}"
                        )
                    await anyio.sleep(0.05)
    finally:
        server.stop()


anyio.run(main)
