"""`syslm serve` against slow and malicious clients (issue 17, item 2).

A client may hold its own connection and nothing else: 200 connections holding partial requests
(headers without their end, `Content-Length: 500` with 10 bytes sent, a byte every 1.5 s) are
held open, re-opened as the server drops them, while `/health` and a completion keep answering
within 1 s, round after round for more than three request timeouts. Malformed Content-Length
values get 400 at once; a partial request gets 408 once the request timeout (a total, not per
read: a byte every 0.5 s does not extend it) has passed; a known route with the wrong method is
405 with `Allow`; with every HTTP worker holding a generation a completion gets 503 at once
while /health still answers; past --max-connections a connection gets 503.

Against the cpp-httplib server these fail: the partial connections occupy its threads (/health
times out), bad lengths got no answer, a trickled request is never timed out, wrong methods are
404, a busy pool queues instead of answering 503, and the new flags do not exist.
"""
import http.client
import json
import signal
import socket
import threading
import time

import pytest

from test_serve_openai import init_model, start_server

REQUEST_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def model(tmp_path_factory, syslm_bin, vocab_dir):
    return init_model(syslm_bin, vocab_dir, tmp_path_factory.mktemp("slow") / "model.gguf", 2, 64,
                      4, 512)


@pytest.fixture(scope="module")
def server(syslm_bin, model):
    proc, port = start_server(syslm_bin, model, "--ctx-size", "512", "--request-timeout",
                              REQUEST_TIMEOUT)
    yield port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def raw_exchange(port, data, timeout=5.0):
    """Sends `data` on a new connection and reads until the server closes it (or `timeout`).
    Returns (seconds, status or None, head, body)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    t0 = time.monotonic()
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    finally:
        s.close()
    took = time.monotonic() - t0
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None
    return took, status, head.decode(errors="replace"), body.decode(errors="replace")


def timed(port, method, path, body=None):
    """(seconds, status, body) of one request on a fresh connection."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        text = resp.read().decode()
        return time.monotonic() - t0, resp.status, text, resp
    except (socket.timeout, TimeoutError, ConnectionError) as e:
        return time.monotonic() - t0, None, repr(e), None
    finally:
        conn.close()


class PartialClients:
    """Holds `n` connections with partial requests open, re-opening each one the server closes.
    Kinds, in turn: headers without their end; Content-Length 500 with 10 bytes of body; a
    request trickled one byte every `drip_every` seconds."""
    HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    DRIP = HEAD + b"X-Slow: " + b"a" * 4000  # never ends within a request timeout

    def __init__(self, port, n=200, drip_every=1.5):
        self.port, self.n, self.drip_every = port, n, drip_every
        self.slots = [None] * n
        self.answers = {}  # status -> count of answers the server sent to partial requests
        self.reopened = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        for i in range(n):
            self._open(i)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self, i):
        s = socket.create_connection(("127.0.0.1", self.port))
        kind = i % 3
        if kind == 0:
            s.sendall(self.HEAD)
        elif kind == 1:
            s.sendall(self.HEAD + b"Content-Length: 500\r\n\r\n" + b'{"prompt":')
        else:
            s.sendall(self.DRIP[:1])
        s.setblocking(False)
        self.slots[i] = [s, kind, 1, time.monotonic()]  # socket, kind, bytes sent, last send

    def open_count(self):
        with self.lock:
            return sum(1 for slot in self.slots if slot is not None)

    def _run(self):
        while not self.stop.is_set():
            for i in range(self.n):
                s, kind, sent, last = self.slots[i]
                closed = False
                try:
                    data = s.recv(4096)
                    if data:
                        status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
                        with self.lock:
                            self.answers[status] = self.answers.get(status, 0) + 1
                    closed = True  # answered (or closed): this partial request is over
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
                if not closed and kind == 2 and time.monotonic() - last >= self.drip_every:
                    try:
                        s.send(self.DRIP[sent:sent + 1])
                        self.slots[i][2:] = [sent + 1, time.monotonic()]
                    except OSError:
                        closed = True
                if closed:
                    s.close()
                    with self.lock:
                        self.slots[i] = None
                        self.reopened += 1
                    self._open(i)
            self.stop.wait(0.1)

    def close(self):
        self.stop.set()
        self.thread.join()
        for slot in self.slots:
            if slot:
                slot[0].close()


def test_partial_connections_do_not_block_health_or_completions(server):
    clients = PartialClients(server, 200)
    try:
        rounds = []
        t_end = time.monotonic() + 3 * REQUEST_TIMEOUT + 1
        while time.monotonic() < t_end:
            held = clients.open_count()
            h = timed(server, "GET", "/health")
            c = timed(server, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 4})
            rounds.append((held, h[:3], c[:3]))
            time.sleep(0.3)
        for held, (h_s, h_status, h_text), (c_s, c_status, c_text) in rounds:
            assert held >= 190, rounds
            assert h_status == 200 and h_s < 1.0, (h_s, h_status, h_text)
            assert c_status == 200 and c_s < 1.0, (c_s, c_status, c_text)
            assert json.loads(c_text)["usage"]["completion_tokens"] == 4
        assert len(rounds) >= 8
        # The server timed the partial requests out (408) and the holders re-opened them.
        assert clients.answers.get(408, 0) >= 100, clients.answers
        assert set(clients.answers) == {408}, clients.answers
    finally:
        clients.close()


@pytest.mark.parametrize("length", ["-5", "99999999999999999999", "abc"])
def test_malformed_content_length_is_400_at_once(server, length):
    took, status, head, body = raw_exchange(
        server, f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\n\r\n{{}}".encode())
    assert status == 400, (status, head, body)
    assert took < 1.0
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and length in error["message"]
    assert "Connection: close" in head


def test_partial_request_is_408_after_the_request_timeout(server):
    took, status, head, body = raw_exchange(
        server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n"
                b'{"prompt":', timeout=REQUEST_TIMEOUT + 10)
    assert status == 408, (status, head, body)
    assert REQUEST_TIMEOUT <= took < REQUEST_TIMEOUT + 3
    assert json.loads(body)["error"]["code"] == "timeout"
    # A byte every 0.5 s: each read is quick, the whole request is not.
    s = socket.create_connection(("127.0.0.1", server))
    s.settimeout(0.5)
    t0 = time.monotonic()
    out = b""
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    for byte in request:
        try:
            s.sendall(bytes([byte]))
        except OSError:
            break
        try:
            out += s.recv(65536)
            if out:
                break
        except socket.timeout:
            pass
        if time.monotonic() - t0 > REQUEST_TIMEOUT + 10:
            break
    took = time.monotonic() - t0
    s.close()
    assert out.startswith(b"HTTP/1.1 408 "), out[:100]
    assert REQUEST_TIMEOUT <= took < REQUEST_TIMEOUT + 3


def test_wrong_method_is_405_with_allow(server):
    for method, path, allow in [("GET", "/v1/completions", "POST"),
                                ("PUT", "/v1/chat/completions", "POST"),
                                ("POST", "/health", "GET, HEAD"),
                                ("DELETE", "/v1/models", "GET, HEAD")]:
        _, status, text, resp = timed(server, method, path)
        assert status == 405, (method, path, status, text)
        assert resp.getheader("Allow") == allow
        assert json.loads(text)["error"]["type"] == "invalid_request_error"
    assert timed(server, "GET", "/v1/nothing")[1] == 404


def test_busy_workers_answer_503_at_once(syslm_bin, tmp_path, vocab_dir):
    model = init_model(syslm_bin, vocab_dir, tmp_path / "m.gguf", 4, 256, 4, 4096)
    proc, port = start_server(syslm_bin, model, "--ctx-size", "4096", "--max-tokens", "4000",
                              "--http-threads", "1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v1/completions",
                     json.dumps({"prompt": "Go", "max_tokens": 4000, "ignore_eos": True,
                                 "stream": True}), {"Content-Type": "application/json"})
        stream = conn.getresponse()
        assert stream.status == 200
        stream.fp.readline()  # generating: the only worker is held
        took, status, text, resp = timed(port, "POST", "/v1/completions",
                                         {"prompt": "Hi", "max_tokens": 2})
        assert status == 503, (status, text)
        assert took < 1.0
        assert resp.getheader("Retry-After") == "1"
        assert json.loads(text)["error"]["type"] == "server_error"
        took, status, _, _ = timed(port, "GET", "/health")
        assert status == 200 and took < 1.0
        assert timed(port, "GET", "/v1/models")[1] == 200
        conn.close()  # the stream's client is gone: its generation is cancelled
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if timed(port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2})[1] == 200:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the worker was never freed")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_connections_past_the_cap_get_503(syslm_bin, model):
    proc, port = start_server(syslm_bin, model, "--ctx-size", "512", "--max-connections", "8")
    held = []
    try:
        for _ in range(8):  # keep-alive connections, idle after one request
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            assert r.status == 200
            held.append(c)
        took, status, head, body = raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503, (status, head)
        assert "too many open connections" in json.loads(body)["error"]["message"]
        held.pop().close()
        deadline = time.monotonic() + 10
        while timed(port, "GET", "/health")[1] != 200:
            assert time.monotonic() < deadline, "no room after a connection closed"
            time.sleep(0.05)
    finally:
        for c in held:
            c.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_chunked_body_and_expect_continue(server):
    body = json.dumps({"prompt": "Hello", "max_tokens": 3}).encode()
    s = socket.create_connection(("127.0.0.1", server))
    s.settimeout(10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    half = len(body) // 2
    for piece in (body[:half], body[half:]):
        s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    s.sendall(b"0\r\n\r\n")
    resp = http.client.HTTPResponse(s)  # whatever the framing of the answer
    resp.begin()
    text = resp.read()
    s.close()
    assert resp.status == 200, (resp.status, text)
    assert json.loads(text)["usage"]["completion_tokens"] == 3
