// A handler's side of one HTTP exchange. Handlers never touch the socket: they reply once with a
// whole response, or start a stream (status + headers), write pieces and end it. Bytes go to
// the exchange's output queue (`Outbox`) and the transport's I/O thread, woken through `Waker`,
// sends them. A writer that gets ahead of a slow client waits while more than the bound is
// queued; once the client is gone (it disconnected, or stopped reading past the write timeout)
// every write returns false, so a handler can stop the work it was streaming.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "serve/http_message.hpp"

namespace syslm::serve::http {

// The I/O thread's doorbell: connection `conn_id` has output (or its response is complete).
class Waker {
public:
    virtual ~Waker() = default;
    virtual void wake(uint64_t conn_id) = 0;
    // The transport is stopping: responses say `Connection: close` (it will close them).
    virtual bool stopping() const = 0;
};

// One response's bytes between a handler and the I/O thread (under `mu`).
struct Outbox {
    Outbox(uint64_t conn_id, Waker* waker, size_t max_buffered)
        : conn_id(conn_id), waker(waker), max_buffered(max_buffered) {}

    std::mutex mu;
    std::condition_variable room;  // writers waiting for the I/O thread to send
    std::string buf;               // [sent, size) not yet written to the socket
    size_t sent = 0;
    Framing framing;
    bool started = false;           // the head is queued
    bool streaming = false;         // started by start_stream
    bool complete = false;          // the whole response is queued
    bool close_after = false;       // close the connection once it is sent
    std::atomic<bool> gone{false};  // the client is gone: nothing more will be sent

    const uint64_t conn_id;
    Waker* const waker;  // outlives every handler (the transport joins its workers first)
    const size_t max_buffered;

    size_t unsent() const { return buf.size() - sent; }
};

class Responder {
public:
    explicit Responder(std::shared_ptr<Outbox> out) : out_(std::move(out)) {}

    // The whole response (Content-Length). Throws std::logic_error if a response was begun.
    void reply(const Response& r);
    // Status and headers now (r.body is ignored); the body follows in write()s: chunked on
    // HTTP/1.1, raw until the connection closes on HTTP/1.0. Throws if a response was begun.
    void start_stream(const Response& r);
    // Queues a piece of the stream, waiting while the connection's unsent output is over its
    // bound. False once the client is gone (the data is dropped).
    bool write(std::string_view data);
    // Ends the stream (idempotent).
    void end();

    bool client_gone() const { return out_->gone.load(); }
    bool started() const;

    // After the handler returns: answers 500 if it did not answer, ends an unended stream.
    // With `error` (it threw): 500 with that message, or, mid-stream, the connection is closed
    // without the last chunk so the client sees a truncated body, not a complete one.
    void finish(const std::string* error, const ErrorResponse& make_error);

private:
    std::shared_ptr<Outbox> out_;
};

}  // namespace syslm::serve::http
