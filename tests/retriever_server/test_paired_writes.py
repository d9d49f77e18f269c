"""``PairedWrites``: a response's head and body leave in one socket write (``retriever_server.http_guard``).

The transport under it records what reaches the socket; the event loop is a real one, because a lone write is sent
when the loop's current iteration ends. The server's responses over real sockets are covered by ``test_hostile.py``
and ``test_cli.py``, whose servers run on this transport.
"""

from __future__ import annotations

import asyncio

from retriever_server.http_guard import PairedWrites


class Socket:
    """The transport under test: what was sent, in sends (one ``write`` or ``writelines`` call is one send)."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.eof = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.sends.append(bytes(data))

    def writelines(self, chunks) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def write_eof(self) -> None:
        self.eof = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 8000) if name == "sockname" else default


async def next_iteration() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_head_and_body_leave_in_one_send():
    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert sock.sends == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await next_iteration()  # the flush scheduled for the head finds nothing left
    assert len(sock.sends) == 1


async def test_a_lone_write_leaves_when_the_loop_iteration_ends():
    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert sock.sends == []
    assert t.get_write_buffer_size() == len(b"HTTP/1.1 204 No Content\r\n\r\n")
    await next_iteration()
    assert sock.sends == [b"HTTP/1.1 204 No Content\r\n\r\n"]
    assert t.get_write_buffer_size() == 0


async def test_order_is_kept_over_many_writes():
    sock = Socket()
    t = PairedWrites(sock)
    for i in range(5):  # a streamed body: pairs go at once, the odd one at the end of the iteration
        t.write(b"%d" % i)
    assert b"".join(sock.sends) == b"0123"
    await next_iteration()
    assert b"".join(sock.sends) == b"01234"
    t.writelines([b"a", b"b"])
    t.write(bytearray(b"c"))
    await next_iteration()
    assert b"".join(sock.sends) == b"01234abc"


async def test_close_and_eof_send_what_is_held_first():
    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    t.close()
    assert sock.sends == [b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n"] and sock.closed
    await next_iteration()  # the scheduled flush does not write to the closed socket
    assert len(sock.sends) == 1

    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"last")
    t.write_eof()
    assert sock.sends == [b"last"] and sock.eof


async def test_abort_drops_what_is_held_and_the_rest_passes_through():
    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.abort()
    await next_iteration()
    assert sock.sends == [] and sock.aborted
    assert t.is_closing()
    assert t.get_extra_info("sockname") == ("127.0.0.1", 8000)


async def test_writelines_is_a_whole_response_sent_at_once_after_what_is_held():
    sock = Socket()
    t = PairedWrites(sock)
    t.writelines([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"])
    assert sock.sends == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    t.write(b"held")
    t.writelines([b"head", b"body"])
    assert sock.sends[1:] == [b"heldheadbody"]
    await next_iteration()  # nothing was left held
    assert len(sock.sends) == 2


async def test_writes_after_the_connection_closed_are_dropped():
    """uvloop raises on a write to a closed transport; a client that left must not turn into an app fault."""
    sock = Socket()
    t = PairedWrites(sock)
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    sock.closed = True  # the client went away between the head and the body
    t.write(b"{}")
    t.writelines([b"HTTP/1.1 200 OK\r\n\r\n", b"{}"])
    await next_iteration()
    assert sock.sends == [] and t.get_write_buffer_size() == 0
