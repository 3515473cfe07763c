#include "infer/paged_rows.hpp"

#include "core/error.hpp"
#include "kernels/type_traits.hpp"

namespace syslm::infer {

void PagedRows::clear() {
    segs_.clear();
    row_seg_.clear();
}

void PagedRows::add(const BlockTable& t, int64_t pos0, int64_t n, const Options& o) {
    SYSLM_CHECK(n > 0 && pos0 >= 0 && pos0 + n <= t.length, "paged rows: positions ", pos0, "..",
                pos0 + n - 1, " outside a table of ", t.length);
    segs_.push_back({&t, pos0, n, size(), o});
    row_seg_.insert(row_seg_.end(), static_cast<size_t>(n), static_cast<int32_t>(segs_.size() - 1));
}

int64_t PagedRows::position(int64_t row) const {
    const Segment& s = segs_[static_cast<size_t>(row_seg_[static_cast<size_t>(row)])];
    return s.pos0 + (row - s.row0);
}

void PagedRows::store(int il, int64_t row, const float* k, const float* v) {
    const Segment& s = segs_[static_cast<size_t>(row_seg_[static_cast<size_t>(row)])];
    pages_.store(*s.table, il, s.pos0 + (row - s.row0), k, v);
}

void PagedRows::attend(int il, const kernels::AttentionShape& shape, const float* q, float* out,
                       backend::Backend& be) {
    const int64_t q_dim = static_cast<int64_t>(shape.n_head) * shape.head_dim;
    k_ptr_.clear();
    v_ptr_.clear();
    for (const Segment& s : segs_)
        for (PageId p : pages_.pages_of(*s.table, il)) {  // dropped (-1): outside the window
            k_ptr_.push_back(p < 0 ? nullptr : pages_.k(p, il));
            v_ptr_.push_back(p < 0 ? nullptr : pages_.v(p, il));
        }
    seqs_.clear();
    size_t first_page = 0;
    for (const Segment& s : segs_) {
        seqs_.push_back(
            {{k_ptr_.data() + first_page, v_ptr_.data() + first_page, pages_.config().page_size},
             q + s.row0 * q_dim,
             out + s.row0 * q_dim,
             s.n,
             s.pos0,
             s.o.window,
             s.o.linear ? s.o.linear + il : nullptr});
        first_page += pages_.pages_of(*s.table, il).size();
    }
    be.attention_paged(shape, seqs_);  // every sequence in one call: one pool loop for decode
}

const float* PagedRows::conv_lag(int il, int64_t row, int lag, const float* a, int64_t dim,
                                 float* scratch) {
    const Segment& s = segs_[static_cast<size_t>(row_seg_[static_cast<size_t>(row)])];
    if (row - lag >= s.row0)  // this step's row, as the pages will keep it
        return as_kept(pages_.config().types.conv(), a + (row - lag) * dim, dim, scratch);
    const int64_t pos = s.pos0 + (row - s.row0) - lag;
    if (pos < 0) return nullptr;
    kernels::type_traits(pages_.config().types.conv())
        .to_float(pages_.conv_row(*s.table, il, pos), scratch, dim);
    return scratch;
}

float PagedRows::expert_top_p(int64_t row) const {
    return segs_[static_cast<size_t>(row_seg_[static_cast<size_t>(row)])].o.expert_top_p;
}

void PagedRows::store_conv(int il, int64_t row, const float* a) {
    const Segment& s = segs_[static_cast<size_t>(row_seg_[static_cast<size_t>(row)])];
    pages_.store_conv(*s.table, il, s.pos0 + (row - s.row0), a);
}

}  // namespace syslm::infer
