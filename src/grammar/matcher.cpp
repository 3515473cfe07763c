#include "grammar/matcher.hpp"

#include <algorithm>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace syslm::grammar {
namespace {

// The smallest code point of a UTF-8 character by its continuation bytes (1 to 3): fewer bytes
// would do for a smaller one, and such overlong forms are not UTF-8.
constexpr uint32_t kMinOfLength[4] = {0, 0x80, 0x800, 0x10000};

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    SYSLM_CHECK(g_ && g_->root < g_->rules.size(), "grammar: no rules to match");
    starts_ = {0};
    for (uint32_t alt : g_->rules[g_->root]) {
        std::vector<uint32_t> stack{alt};
        expand(stack, *this);
    }
    canonicalize();
}

void Matcher::expand(std::vector<uint32_t>& stack, Matcher& out) const {
    const std::vector<Element>& el = g_->elements;
    while (!stack.empty() && el[stack.back()].kind == Element::End) stack.pop_back();
    if (stack.empty() || el[stack.back()].kind == Element::Chars) {
        out.data_.insert(out.data_.end(), stack.begin(), stack.end());
        out.starts_.push_back(static_cast<uint32_t>(out.data_.size()));
        return;
    }
    const uint32_t pos = stack.back();
    const uint32_t rule = el[pos].ref;
    // Where to go on once the rule is matched; nothing when that is the end of this
    // alternative too (right recursion then keeps the stack flat).
    stack.back() = pos + 1;
    if (el[pos + 1].kind == Element::End) stack.pop_back();
    // Each alternative expands from its own copy: expanding pops and rewrites what lies below.
    const std::vector<uint32_t> base = stack;
    for (uint32_t alt : g_->rules[rule]) {
        stack = base;
        stack.push_back(alt);
        expand(stack, out);
    }
}

void Matcher::advance_cp(uint32_t cp, Matcher& out) const {
    out.data_.clear();
    out.starts_.assign(1, 0);
    std::vector<uint32_t>& stack = out.scratch_;
    for (size_t i = 0; i < n_stacks(); ++i) {
        if (stack_size(i) == 0) continue;
        const uint32_t top = data_[starts_[i + 1] - 1];
        if (!g_->admits(top, cp)) continue;
        stack.assign(data_.begin() + starts_[i], data_.begin() + starts_[i + 1]);
        stack.back() = top + 1;
        expand(stack, out);
    }
}

bool Matcher::advance_into(uint8_t byte, Matcher& out) const {
    if (out.g_ != g_) out.g_ = g_;
    uint32_t partial = 0;
    int need = 0, total = total_;
    if (need_ == 0) {
        if (byte < 0x80) {
            advance_cp(byte, out);
            out.partial_ = 0;
            out.need_ = out.total_ = 0;
            out.canonicalize();
            return out.n_stacks() > 0;
        }
        if (byte >= 0xC2 && byte <= 0xDF) {
            partial = byte & 0x1F;
            need = total = 1;
        } else if (byte >= 0xE0 && byte <= 0xEF) {
            partial = byte & 0x0F;
            need = total = 2;
        } else if (byte >= 0xF0 && byte <= 0xF4) {
            partial = byte & 0x07;
            need = total = 3;
        } else {
            return false;  // not a UTF-8 lead byte
        }
    } else {
        if ((byte & 0xC0) != 0x80) return false;
        partial = partial_ << 6 | (byte & 0x3F);
        need = need_ - 1;
        if (need == 0) {
            if (partial < kMinOfLength[total] || partial > 0x10FFFF ||
                (partial >= 0xD800 && partial <= 0xDFFF))
                return false;  // overlong, beyond Unicode, or a surrogate
            advance_cp(partial, out);
            out.partial_ = 0;
            out.need_ = out.total_ = 0;
            out.canonicalize();
            return out.n_stacks() > 0;
        }
    }
    // A character still being read: the stacks stay, if one of them admits some character that
    // starts with these bytes (and is as long as the lead byte says: not overlong).
    const uint32_t lo = std::max(partial << (6 * need), kMinOfLength[total]),
                   hi = std::min((partial << (6 * need)) | ((1u << (6 * need)) - 1), 0x10FFFFu);
    if (lo > hi) return false;
    bool any = false;
    for (size_t i = 0; i < n_stacks() && !any; ++i)
        any = stack_size(i) > 0 && g_->admits_any(data_[starts_[i + 1] - 1], lo, hi);
    if (!any) return false;
    out.data_ = data_;
    out.starts_ = starts_;
    out.partial_ = partial;
    out.need_ = need;
    out.total_ = total;
    out.canonicalize();
    return true;
}

bool Matcher::accept(uint8_t byte) {
    Matcher next = *this;
    if (!advance_into(byte, next)) return false;
    *this = std::move(next);
    return true;
}

bool Matcher::accept(std::string_view bytes) {
    Matcher a = *this, b = *this;
    for (char c : bytes) {
        if (!a.advance_into(static_cast<uint8_t>(c), b)) return false;
        std::swap(a, b);
    }
    *this = std::move(a);
    return true;
}

bool Matcher::can_end() const {
    if (need_ != 0) return false;
    for (size_t i = 0; i < n_stacks(); ++i)
        if (stack_size(i) == 0) return true;
    return false;
}

void Matcher::canonicalize() {
    const size_t n = n_stacks();
    std::vector<uint32_t>& order = scratch_;
    order.resize(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    const auto begin = [&](uint32_t i) { return data_.begin() + starts_[i]; };
    const auto end = [&](uint32_t i) { return data_.begin() + starts_[i + 1]; };
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        return std::lexicographical_compare(begin(a), end(a), begin(b), end(b));
    });
    key_.clear();
    key_.push_back(static_cast<uint32_t>(need_ << 8 | total_));
    key_.push_back(partial_);
    for (size_t k = 0; k < n; ++k) {
        const uint32_t i = order[k];
        if (k > 0 && std::equal(begin(i), end(i), begin(order[k - 1]), end(order[k - 1]))) continue;
        key_.push_back(static_cast<uint32_t>(end(i) - begin(i)));
        key_.insert(key_.end(), begin(i), end(i));
    }
    // The stacks again, from the key: sorted, without duplicates.
    data_.clear();
    starts_.assign(1, 0);
    for (size_t at = 2; at < key_.size();) {
        const uint32_t len = key_[at++];
        data_.insert(data_.end(), key_.begin() + static_cast<std::ptrdiff_t>(at),
                     key_.begin() + static_cast<std::ptrdiff_t>(at + len));
        starts_.push_back(static_cast<uint32_t>(data_.size()));
        at += len;
    }
}

uint64_t Matcher::hash() const {
    return word_hash(
        {reinterpret_cast<const uint8_t*>(key_.data()), key_.size() * sizeof(uint32_t)});
}

}  // namespace syslm::grammar
