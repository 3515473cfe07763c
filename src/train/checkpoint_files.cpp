#include "train/checkpoint_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace syslm::train {
namespace fs = std::filesystem;

namespace {

// Makes renames and removals in the directory holding `path` durable.
void sync_parent(const fs::path& path) {
    const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;  // best effort: the renames themselves have happened
    ::fsync(fd);
    ::close(fd);
}

void rename_dir(const fs::path& from, const fs::path& to) {
    std::error_code ec;
    fs::rename(from, to, ec);
    SYSLM_CHECK(!ec, "checkpoint: cannot rename ", from.string(), " to ", to.string(), ": ",
                ec.message());
}

void remove_dir(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
    SYSLM_CHECK(!ec, "checkpoint: cannot remove ", p.string(), ": ", ec.message());
}

}  // namespace

bool checkpoint_complete(const std::string& dir) {
    const fs::path state = fs::path(dir) / "state.bin";
    std::error_code ec;
    if (!fs::is_regular_file(state, ec)) return false;
    try {
        CheckpointReader r(state.string(), true);  // verifies the checksum
        return true;
    } catch (const Error&) {
        return false;
    }
}

bool recover_checkpoint(const std::string& dir) {
    const fs::path final_dir(dir), tmp(dir + ".tmp"), old(dir + ".old");
    std::error_code ec;
    if (fs::exists(final_dir, ec)) {
        // Only complete directories are ever renamed to `dir`; the others are leftovers.
        remove_dir(tmp);
        remove_dir(old);
        return true;
    }
    if (checkpoint_complete(tmp.string())) {  // killed between the two renames: the newer one
        rename_dir(tmp, final_dir);
        remove_dir(old);
    } else if (fs::exists(old, ec)) {  // killed while writing .tmp after moving dir aside
        rename_dir(old, final_dir);
        remove_dir(tmp);
    } else {
        return false;
    }
    sync_parent(final_dir);
    std::fprintf(stderr, "note: %s was recovered from an interrupted checkpoint write\n",
                 dir.c_str());
    return true;
}

void begin_checkpoint(const std::string& dir) {
    recover_checkpoint(dir);
    const fs::path tmp(dir + ".tmp");
    remove_dir(tmp);
    std::error_code ec;
    fs::create_directories(tmp, ec);
    SYSLM_CHECK(!ec, "checkpoint: cannot create ", tmp.string(), ": ", ec.message());
}

void swap_in_checkpoint(const std::string& dir) {
    const fs::path final_dir(dir), tmp(dir + ".tmp"), old(dir + ".old");
    // The caller has just written and committed state.bin (last): its presence is enough here;
    // verifying its checksum again would read the moments a second time on every save.
    SYSLM_CHECK(fs::is_regular_file(tmp / "state.bin"), "checkpoint: ", tmp.string(),
                " is not complete (no state.bin)");
    remove_dir(old);
    std::error_code ec;
    if (fs::exists(final_dir, ec)) rename_dir(final_dir, old);
    rename_dir(tmp, final_dir);
    sync_parent(final_dir);
    remove_dir(old);
}

void ChecksummedWriter::floats(std::span<const float> v) {
    const uint64_t n = v.size();
    write(&n, sizeof n);
    if (n) write(v.data(), n * sizeof(float));
}

void ChecksummedWriter::commit() {
    const uint64_t sum = hash_.value();
    file_.write(&sum, sizeof sum);
    file_.commit();
}

CheckpointReader::CheckpointReader(std::string path, bool checksummed)
    : path_(std::move(path)), in_(path_, std::ios::binary) {
    SYSLM_CHECK(in_, path_, ": cannot open");
    in_.seekg(0, std::ios::end);
    end_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
    if (!checksummed) return;
    SYSLM_CHECK(end_ >= 8, path_, ": truncated (", end_, " bytes, no checksum)");
    end_ -= 8;
    WordHash h;
    std::vector<char> buf(size_t{1} << 20);
    for (uint64_t left = end_; left > 0;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        in_.read(buf.data(), static_cast<std::streamsize>(n));
        SYSLM_CHECK(in_, path_, ": read failed");
        h.update(buf.data(), n);
        left -= n;
    }
    uint64_t stored = 0;
    in_.read(reinterpret_cast<char*>(&stored), sizeof stored);
    SYSLM_CHECK(in_, path_, ": read failed");
    SYSLM_CHECK(stored == h.value(), path_, ": checksum mismatch (the last 8 bytes say 0x",
                std::hex, stored, ", the content hashes to 0x", h.value(), std::dec,
                "): the file is corrupt or was modified");
    in_.seekg(0);
}

void CheckpointReader::read(void* p, size_t n, const char* what) {
    SYSLM_CHECK(n <= end_ - pos_, path_, ": truncated at the ", what, " (byte ", pos_, ")");
    in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    SYSLM_CHECK(in_ && static_cast<size_t>(in_.gcount()) == n, path_, ": truncated at the ", what,
                " (byte ", pos_, ")");
    pos_ += n;
}

std::vector<float> CheckpointReader::floats(const char* what, uint64_t limit) {
    uint64_t n = 0;
    read(&n, sizeof n, what);
    SYSLM_CHECK(n <= limit, path_, ": ", n, " values of ", what, " for a model of ", limit);
    std::vector<float> v(n);
    read(v.data(), n * sizeof(float), what);
    return v;
}

void CheckpointReader::expect_end() {
    SYSLM_CHECK(pos_ == end_, path_, ": ", end_ - pos_, " unexpected bytes after the last field");
}

}  // namespace syslm::train
