"""A TCP proxy on 127.0.0.1 that holds back what clients send by a fixed delay.

Put in front of the local S3 server, it gives every request the round trip of a real object
store (a GET on S3 takes 20-50 ms) while the server behind it stays the same: the figures then
show what request concurrency and the number of read sweeps cost against S3, which a server on
the same machine (a fraction of a millisecond a request) hides.

One delay per chunk a client sends: a GET or a listing request is one chunk, so it is one delay
per request on a kept-alive connection (uploads, which come in several chunks, are not timed
through it).

Example:
    >>> with LatencyProxy(target_port=server.port, delay_seconds=0.025) as proxy:  # doctest: +SKIP
    ...     options = storage_entry(uri, StoreOptions(endpoint=proxy.endpoint), origin="bench")
    ...     storage = ObjectStorage(uri, options=options)
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType


class LatencyProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, delaying client-to-server data.

    Args:
        target_port: The server's port on 127.0.0.1.
        delay_seconds: How long each chunk from a client is held before it is forwarded.
    """

    def __init__(self, target_port: int, delay_seconds: float) -> None:
        self.target_port = target_port
        self.delay_seconds = delay_seconds
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def endpoint(self) -> str:
        """The proxy's URL."""
        return f"http://127.0.0.1:{self.port}"

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
    ) -> None:
        try:
            while chunk := await reader.read(1 << 16):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(
                self._pump(reader, upstream_writer, self.delay_seconds),
                self._pump(upstream_reader, writer, 0.0),
            )
        finally:
            self._writers -= {writer, upstream_writer}

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def start(self) -> LatencyProxy:
        """Listen on a free port (in a thread of its own)."""
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result()
        return self

    async def _shutdown(self) -> None:
        """Stop listening, close both ends of every connection, let their pumps finish."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        connections = {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}
        if connections:
            await asyncio.wait(connections, timeout=5)

    def stop(self) -> None:
        """Stop listening, close every connection, end the thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
