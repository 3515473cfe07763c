#include "core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace syslm {

void release_mapped_pages(const void* p, size_t n) {
    static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail(path, ": cannot stat: ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            fail(path, ": cannot mmap ", size_, " bytes: ", std::strerror(err));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp-XXXXXX") {
    fd_ = ::mkstemp(tmp_path_.data());
    if (fd_ < 0) fail(path_, ": cannot create temporary file: ", std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail(path_, ": write failed at byte ", offset_, ": ", std::strerror(errno));
        }
        p += w;
        n -= static_cast<size_t>(w);
        offset_ += static_cast<uint64_t>(w);
    }
}

void AtomicFileWriter::commit() {
    if (::fsync(fd_) != 0) fail(path_, ": fsync failed: ", std::strerror(errno));
    ::fchmod(fd_, 0644);
    if (::close(fd_) != 0) {
        fd_ = -1;
        fail(path_, ": close failed: ", std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
        fail(path_, ": cannot rename temporary file into place: ", std::strerror(errno));
    committed_ = true;
}

std::string read_whole_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    SYSLM_CHECK(in, path, ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    SYSLM_CHECK(!in.bad(), path, ": read failed");
    return s.str();
}

void write_file_atomically(const std::string& path, std::string_view text) {
    AtomicFileWriter w(path);
    w.write(text.data(), text.size());
    w.commit();
}

}  // namespace syslm
