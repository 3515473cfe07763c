// Runs a Grammar over bytes: a pushdown matcher whose state is a set of stacks of grammar
// positions (llama.cpp's sampler keeps the same), each stack's top a Chars element still to
// match, its other entries where to go on when a rule's alternative ends; an empty stack means
// the text so far is a whole sentence. Bytes are decoded as UTF-8, a character read part way
// kept aside (and already checked against what the stacks admit). The state is kept canonical
// (stacks sorted, no duplicates), so that equal states have equal keys (the mask cache's).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"

namespace syslm::grammar {

class Matcher {
public:
    explicit Matcher(std::shared_ptr<const Grammar> g);

    // Takes one byte of output; false (the state unchanged) when the grammar does not allow it.
    bool accept(uint8_t byte);
    // All of them, or none (false: the state unchanged).
    bool accept(std::string_view bytes);
    // The same as accept on a copy, into `out` (whose buffers are reused): the mask walk's step.
    bool advance_into(uint8_t byte, Matcher& out) const;

    // The text so far is a whole sentence of the grammar (end of generation allowed).
    bool can_end() const;
    // Nothing can follow: the text is complete and the grammar allows no more.
    bool finished() const { return n_stacks() == 1 && stack_size(0) == 0 && need_ == 0; }

    // A key equal for equal states (stacks and the partial character), and its hash.
    const std::vector<uint32_t>& key() const { return key_; }
    uint64_t hash() const;
    const Grammar& grammar() const { return *g_; }

private:
    size_t n_stacks() const { return starts_.size() - 1; }
    size_t stack_size(size_t i) const { return starts_[i + 1] - starts_[i]; }
    // Appends the stacks that `stack` becomes once its top is a Chars element (or it is empty).
    void expand(std::vector<uint32_t>& stack, Matcher& out) const;
    void advance_cp(uint32_t cp, Matcher& out) const;  // every stack whose top admits cp
    void canonicalize();

    std::shared_ptr<const Grammar> g_;
    std::vector<uint32_t> data_;    // the stacks, bottom to top, one after another
    std::vector<uint32_t> starts_;  // stack i is data_[starts_[i], starts_[i + 1])
    uint32_t partial_ = 0;          // the bits of a character read part way
    int need_ = 0;                  // its bytes still to come
    int total_ = 0;                 // and its continuation bytes in all (1 to 3)
    std::vector<uint32_t> key_;
    std::vector<uint32_t> scratch_;
};

}  // namespace syslm::grammar
