#include "serve/http_responder.hpp"

#include <stdexcept>

namespace syslm::serve::http {

void Responder::reply(const Response& r) {
    {
        std::lock_guard lk(out_->mu);
        if (out_->started) throw std::logic_error("http: reply() after the response was begun");
        if (out_->waker->stopping()) out_->framing.keep_alive = false;
        out_->started = out_->complete = true;
        out_->close_after = !out_->framing.keep_alive;
        if (!out_->gone) out_->buf += serialize(r, out_->framing);
    }
    out_->waker->wake(out_->conn_id);
}

void Responder::start_stream(const Response& r) {
    {
        std::lock_guard lk(out_->mu);
        if (out_->started)
            throw std::logic_error("http: start_stream() after the response was begun");
        // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
        if (out_->framing.version == 10 || out_->waker->stopping())
            out_->framing.keep_alive = false;
        out_->started = out_->streaming = true;
        out_->close_after = !out_->framing.keep_alive;
        if (!out_->gone) out_->buf += stream_head(r, out_->framing);
    }
    out_->waker->wake(out_->conn_id);
}

bool Responder::write(std::string_view data) {
    {
        std::unique_lock lk(out_->mu);
        if (!out_->streaming || out_->complete)
            throw std::logic_error("http: write() outside a started, unended stream");
        out_->room.wait(lk, [&] { return out_->gone || out_->unsent() < out_->max_buffered; });
        if (out_->gone) return false;
        if (data.empty() || out_->framing.head_only) return true;
        if (out_->framing.version == 11)
            out_->buf += chunk(data);
        else
            out_->buf.append(data);
    }
    out_->waker->wake(out_->conn_id);
    return true;
}

void Responder::end() {
    {
        std::lock_guard lk(out_->mu);
        if (!out_->streaming || out_->complete) return;
        out_->complete = true;
        if (!out_->gone && out_->framing.version == 11 && !out_->framing.head_only)
            out_->buf += kLastChunk;
    }
    out_->waker->wake(out_->conn_id);
}

bool Responder::started() const {
    std::lock_guard lk(out_->mu);
    return out_->started;
}

void Responder::finish(const std::string* error, const ErrorResponse& make_error) {
    bool started = false, truncate = false;
    {
        std::lock_guard lk(out_->mu);
        started = out_->started;
        if (started && !out_->complete && error) {
            out_->complete = out_->close_after = true;  // no last chunk: a truncated body
            truncate = true;
        }
    }
    if (truncate) {
        out_->waker->wake(out_->conn_id);
    } else if (!started) {
        reply(make_error(500, error ? *error : "the handler sent no response"));
    } else {
        end();
    }
}

}  // namespace syslm::serve::http
